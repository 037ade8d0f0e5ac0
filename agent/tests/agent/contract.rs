//! The API contract, machine-checked: `schemathesis` (PyPI) generates
//! requests from `openapi.yaml` — valid ones and invalid ones — and sends
//! them to the real agent; every response must conform to the description
//! (status, headers, content type, body schema), invalid data must be
//! refused, and no request may produce a 5xx.
//!
//! schemathesis runs from the virtualenv `tests/pydeps.sh` makes in the
//! lab-agent cache (`tests/install-deps.sh` runs it); see
//! `schemathesis_command`.
//!
//! `contract/hooks.py` keeps generated commands from ever being executed
//! (they are echoed back with printf instead); `contract/schemathesis.toml`
//! holds the check settings. Bounded: `LAB_AGENT_CONTRACT_EXAMPLES` (default
//! 100 per operation) and a fixed seed (`LAB_AGENT_CONTRACT_SEED`).

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HINT: &str = "run tests/install-deps.sh (or tests/pydeps.sh alone, which needs no root): \
     it puts schemathesis in a virtualenv in the lab-agent cache";

/// `schemathesis` from the virtualenv `tests/pydeps.sh` makes:
/// `<cache>/venv/<hash>/bin/schemathesis`, where `<cache>` is
/// `$LAB_AGENT_CACHE`, else `$XDG_CACHE_HOME/lab-agent`, else
/// `$HOME/.cache/lab-agent` (empty counts as unset), and `<hash>` the first
/// 16 hex digits of the sha256 of this checkout's `tests/pydeps.sh`. The
/// rule of `lab_agent_tests::pydeps`, which this package cannot depend on.
fn schemathesis_command() -> Command {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let cache = var("LAB_AGENT_CACHE")
        .map(PathBuf::from)
        .or_else(|| var("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("lab-agent")))
        .or_else(|| var("HOME").map(|d| PathBuf::from(d).join(".cache/lab-agent")))
        .expect("neither LAB_AGENT_CACHE, XDG_CACHE_HOME nor HOME is set");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/pydeps.sh");
    let sum = Command::new("sha256sum")
        .arg(&script)
        .output()
        .expect("failed to run sha256sum (coreutils)");
    assert!(sum.status.success(), "sha256sum {}", script.display());
    let hash: String = String::from_utf8_lossy(&sum.stdout)
        .chars()
        .take(16)
        .collect();
    let bin = cache.join("venv").join(hash).join("bin/schemathesis");
    assert!(
        bin.is_file(),
        "`{}` is missing\nhint: {HINT}",
        bin.display()
    );
    let mut cmd = Command::new(bin);
    cmd.env_remove("PYTHONHOME");
    cmd
}

fn contract_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agent/contract")
}

fn openapi() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi.yaml")
}

/// `openapi.yaml` with every response object closed: the published file
/// lets responses grow (clients ignore unknown fields), but the agent must
/// send exactly the fields it describes today.
fn strict_openapi(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(openapi()).unwrap();
    assert!(text.contains("additionalProperties: true"));
    let strict = dir.join("openapi-strict.yaml");
    std::fs::write(
        &strict,
        text.replace("additionalProperties: true", "additionalProperties: false"),
    )
    .unwrap();
    strict
}

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A ready agent (so long polls return at once), local mode.
fn ready_agent(tag: &str) -> Agent {
    let b = Agent::builder(tag).no_cloud_init();
    write_file(
        &b.dir.join("state/setup.json"),
        r#"{"state":"succeeded","started_at":"2026-11-29T08:00:00Z","exit_code":0,"duration_ms":5}"#,
        0o644,
    );
    b.start()
}

/// Runs `schemathesis run SPEC` against `agent`, from the agent's temp dir
/// (so nothing is written into the source tree).
fn schemathesis(agent: &Agent, spec: &Path, extra: &[&str]) -> Output {
    let mut cmd = schemathesis_command();
    cmd.current_dir(agent.dir.path())
        .env("SCHEMATHESIS_HOOKS", "hooks")
        .env("PYTHONPATH", contract_dir())
        .env("NO_COLOR", "1")
        .arg("--config-file")
        .arg(contract_dir().join("schemathesis.toml"))
        .arg("run")
        .arg(spec)
        .args(["--url", &format!("http://{}", agent.addr)])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--generation-database",
            "none",
            "--request-timeout",
            "30",
            "--no-color",
        ])
        .args(extra);
    cmd.output()
        .unwrap_or_else(|e| panic!("failed to run `schemathesis`: {e}\nhint: {HINT}"))
}

fn tail(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    let start = text.len().saturating_sub(12_000);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    format!(
        "{}\n{}",
        &text[start..],
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_agent_conforms_to_openapi_yaml() {
    let version = schemathesis_command()
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("`schemathesis --version` does not run ({e})\nhint: {HINT}"));
    assert!(version.status.success(), "hint: {HINT}");
    let agent = ready_agent("contract");
    let examples = env_or("LAB_AGENT_CONTRACT_EXAMPLES", 100).to_string();
    let seed = env_or("LAB_AGENT_CONTRACT_SEED", 1).to_string();
    let spec = strict_openapi(agent.dir.path());
    let out = schemathesis(
        &agent,
        &spec,
        &[
            "--max-examples",
            &examples,
            "--seed",
            &seed,
            "--output-truncate",
            "true",
        ],
    );
    let said = tail(&out);
    assert!(out.status.success(), "schemathesis found problems:\n{said}");
    // Its one warning may be that it cannot read a streamed exec's
    // `application/x-ndjson` lines (it has no deserializer for them): the
    // stream is held to `StreamEvent` by agent/tests/agent/stream.rs.
    let only_ndjson_warning = said.contains(" 1 warning ")
        && said.contains("cannot validate application/x-ndjson responses");
    assert!(
        said.contains("No issues found") || only_ndjson_warning,
        "{said}"
    );
    // What the agent itself saw: no 5xx, no panic, and real work was done.
    let log = agent.log();
    assert!(!log.contains("panicked"), "{log}");
    let statuses: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split(" status=").nth(1)?.split(' ').next())
        .collect();
    assert!(
        statuses.iter().all(|s| !s.starts_with('5')),
        "a request produced a 5xx:\n{}",
        log.lines()
            .filter(|l| l.contains(" status=5"))
            .take(10)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let execs = log
        .lines()
        .filter(|l| l.contains("path=/v1/exec status=200"))
        .count();
    eprintln!(
        "contract: {} requests, {execs} commands run; {}",
        statuses.len(),
        said.lines()
            .find(|l| l.contains("generated"))
            .unwrap_or("")
            .trim()
    );
    assert!(
        execs > 10,
        "hardly any exec succeeded: the test proves little"
    );
}

/// So that a pass means something: a description that disagrees with the
/// agent (here, one that forgets `setup.log_tail`) fails the same run.
#[test]
fn a_description_that_disagrees_with_the_agent_fails() {
    let agent = ready_agent("contract-wrong");
    let text = std::fs::read_to_string(strict_openapi(agent.dir.path())).unwrap();
    let broken = text.replacen(
        "      required: [state, exit_code, duration_ms, log_tail]",
        "      required: [state, exit_code, duration_ms]",
        1,
    );
    let broken = broken.replacen(
        "        log_tail:\n          type: string\n          nullable: true\n",
        "",
        1,
    );
    assert_ne!(broken, text, "the mutation did not apply");
    let spec = agent.dir.join("broken-openapi.yaml");
    std::fs::write(&spec, broken).unwrap();
    let out = schemathesis(
        &agent,
        &spec,
        &[
            "--include-path",
            "/v1/ready",
            "--max-examples",
            "3",
            "--phases",
            "examples,fuzzing",
        ],
    );
    let said = tail(&out);
    assert!(
        !out.status.success(),
        "the wrong description passed:\n{said}"
    );
    assert!(said.contains("log_tail"), "{said}");
}
