//! The architecture's absences, as the crate graph enforces them: a backend
//! that links `lab-agent-client` pulls in no CLI, generator, process
//! control or randomness, and the agent that ships in every VM none of the
//! client's, the CLI's or the generator's crates; the Python wheel no CLI
//! and no qemu driver; the lab runner (`lab-runner`: sandbox, qemu, VM) is
//! linked by `labctl` alone, never by the client, the agent or the wheel,
//! and links no CLI itself. `cargo tree` reads the lockfile; nothing is
//! built or fetched.

use std::collections::BTreeSet;
use std::process::Command;

/// The crates in `package`'s normal (non-dev, non-build) dependency tree.
fn normal_deps(package: &str) -> BTreeSet<String> {
    normal_deps_with(package, &[])
}

/// [`normal_deps`] with `features` of the package on.
fn normal_deps_with(package: &str, features: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--manifest-path", manifest, "-p", package])
        .args(features.iter().flat_map(|f| ["--features", f]))
        .output()
        .expect("run `cargo tree`");
    assert!(
        out.status.success(),
        "`cargo tree -p {package}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn check(package: &str, forbidden: &[&str], most: usize) {
    let deps = normal_deps(package);
    assert!(deps.contains(package), "`cargo tree` listed {deps:?}");
    let found: Vec<&&str> = forbidden.iter().filter(|f| deps.contains(**f)).collect();
    assert!(
        found.is_empty(),
        "`{package}` depends on {found:?}: they belong to another package \
         (see ARCHITECTURE.md's invariants); `cargo tree -p {package} -e normal -i CRATE` \
         shows the path"
    );
    assert!(
        deps.len() <= most,
        "`{package}` pulls in {} crates, more than {most}: {deps:?}",
        deps.len()
    );
}

#[test]
fn the_client_library_pulls_in_no_cli_generator_or_process_control() {
    check(
        "lab-agent-client",
        &[
            "clap",
            "tracing-subscriber",
            "nix",
            "flate2",
            "base64",
            "getrandom",
            "tempfile",
            "lab-agent-cloudinit",
            "labctl",
            "lab-runner",
            "pyo3",
            "lab-agent-python",
        ],
        50,
    );
}

/// `kubevirt://` (feature `kubevirt`) costs TLS and nothing else: rustls on
/// ring (whose randomness, for TLS and the WebSocket's masks, is the one
/// `getrandom` it brings); a backend without the feature links none of it.
#[test]
fn the_client_s_kubevirt_feature_adds_tls_only() {
    let plain = normal_deps("lab-agent-client");
    let with = normal_deps_with("lab-agent-client", &["kubevirt"]);
    let added: BTreeSet<&str> = with.difference(&plain).map(String::as_str).collect();
    // cfg-if and subtle: getrandom's and rustls' small helpers.
    let tls = BTreeSet::from([
        "cfg-if",
        "subtle",
        "getrandom",
        "ring",
        "rustls",
        "rustls-pki-types",
        "rustls-webpki",
        "tokio-rustls",
        "untrusted",
        "zeroize",
    ]);
    assert!(
        added.is_subset(&tls),
        "the `kubevirt` feature adds {:?} beyond TLS",
        added.difference(&tls).collect::<Vec<_>>()
    );
    assert!(
        added.contains("rustls") && plain.is_subset(&with),
        "{added:?}"
    );
    for crate_ in ["rustls", "ring", "tokio-rustls"] {
        assert!(!plain.contains(crate_), "{crate_} without the feature");
    }
}

#[test]
fn the_agent_pulls_in_nothing_of_the_client_cli_or_generator() {
    check(
        "lab-agent",
        &[
            "clap",
            "tracing-subscriber",
            "toml",
            "flate2",
            "base64",
            "tempfile",
            "lab-agent-client",
            "lab-agent-cloudinit",
            "labctl",
            "lab-runner",
            "pyo3",
            "lab-agent-python",
        ],
        60,
    );
}

/// Python stays in `python/`: the CLI links no interpreter binding either.
#[test]
fn labctl_pulls_in_no_python_binding() {
    check("labctl", &["pyo3", "lab-agent-python"], 200);
}

/// The wheel is the client, the wire types and the generator (with its
/// `fs` edge for `render_secret`; with `kubevirt://`): no CLI (clap, labctl), no runner (the
/// sandbox and the qemu driver), no tracing subscriber, no process control.
#[test]
fn the_python_wheel_pulls_in_no_cli_or_qemu_driver() {
    check(
        "lab-agent-python",
        &[
            "clap",
            "clap_builder",
            "labctl",
            "lab-runner",
            "tracing-subscriber",
            "nix",
            "tempfile",
        ],
        // 70, and the client's `kubevirt` feature (TLS: 8 crates).
        78,
    );
}

/// The runner is a library of the CLI, not the other way round: it parses
/// no arguments, sets up no logging and links no Python; only `labctl`
/// (and the tests) depend on it.
#[test]
fn the_runner_pulls_in_no_cli_or_python() {
    check(
        "lab-runner",
        &[
            "clap",
            "clap_builder",
            "labctl",
            "tracing-subscriber",
            "pyo3",
            "lab-agent-python",
        ],
        80,
    );
}

/// Of the shipped crates, only `labctl` links the runner: nothing it
/// builds on (wire types, generator, client) reaches back into it.
#[test]
fn labctl_alone_links_the_runner() {
    assert!(normal_deps("labctl").contains("lab-runner"));
    for package in ["lab-agent-proto", "lab-agent-cloudinit", "lab-agent-client"] {
        check(package, &["lab-runner", "labctl"], 200);
    }
}
