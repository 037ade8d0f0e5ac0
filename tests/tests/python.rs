//! The Python package (`python/`): its wheel, built once per run with
//! `maturin build --profile dev` (the suite's own profile), installed with `pip install --no-index` into a
//! fresh virtualenv, and its pytest suite (`python/tests`) run there against
//! the real agent on loopback. maturin and pytest come from the cache
//! `tests/pydeps.sh` fills; nothing is downloaded here.

use lab_agent_tests::local::{
    TempDir, agent_bin, describe, hostile_agent_bin, labctl_bin, relay_stand_in_bin,
};
use lab_agent_tests::pydeps;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}\n{}", describe(&out));
    out
}

/// `python -c CODE`'s stdout, trimmed.
fn python_says(python: &Path, code: &str) -> String {
    let out = run(Command::new(python).args(["-c", code]));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The one wheel in `dir`.
fn wheel_in(dir: &Path) -> PathBuf {
    let wheels: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    assert_eq!(
        wheels.len(),
        1,
        "one wheel in {}: {wheels:?}",
        dir.display()
    );
    wheels.into_iter().next().unwrap()
}

#[test]
fn the_wheel_installs_into_a_clean_venv_and_its_pytest_suite_passes() {
    let tools = pydeps::venv_dir();
    let maturin = tools.join("bin/maturin");
    assert!(
        maturin.is_file(),
        "no maturin in the cache\nhint: {}",
        pydeps::HINT
    );
    let work = TempDir::new("python");
    let root = repo_root();

    // The dev profile, as the rest of the suite: its dependencies are
    // already built for `cargo test --workspace`, where a release build
    // compiled all of them again (~2 of this test's 3 minutes in CI). The
    // code and its bounds are the same; release wheels are what
    // BENCHMARKS.md's Python figures measure.
    run(Command::new(&maturin)
        .args(["build", "--profile", "dev", "--quiet", "--manifest-path"])
        .arg(root.join("python/Cargo.toml"))
        .arg("--out")
        .arg(work.join("dist")));
    let wheel = wheel_in(&work.join("dist"));
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    // One abi3 wheel for every CPython >= 3.9 on x86_64 Linux.
    assert!(name.starts_with("lab_agent_client-"), "{name}");
    assert!(name.contains("-cp39-abi3-"), "{name}");
    assert!(name.ends_with("_x86_64.whl"), "{name}");

    // A clean virtualenv with nothing but pip, then the wheel alone.
    let venv = work.join("venv");
    run(Command::new(tools.join("bin/python"))
        .args(["-m", "venv"])
        .arg(&venv));
    let python = venv.join("bin/python");
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-cache-dir",
            "--disable-pip-version-check",
        ])
        .arg(&wheel));
    // pytest, from the cached tools, is found through a .pth file: the
    // package under test is the one pip installed, not the source tree.
    let site = python_says(
        &python,
        "import sysconfig; print(sysconfig.get_path('purelib'))",
    );
    let tools_site = python_says(
        &tools.join("bin/python"),
        "import sysconfig; print(sysconfig.get_path('purelib'))",
    );
    std::fs::write(
        Path::new(&site).join("zz_test_tools.pth"),
        format!("{tools_site}\n"),
    )
    .unwrap();

    // A static ELF stand-in for the agent: render_secret needs its bytes.
    let fake_agent = work.join("lab-agent-static");
    std::fs::write(
        &fake_agent,
        lab_agent_tests::elf::fake_elf(false, b"python render test"),
    )
    .unwrap();

    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp"])
        .arg(work.join("pytest"))
        .arg(root.join("python/tests"))
        .env("LAB_AGENT_BIN", agent_bin())
        .env("LABCTL_BIN", labctl_bin())
        .env("HOSTILE_AGENT_BIN", hostile_agent_bin())
        .env("RELAY_STAND_IN_BIN", relay_stand_in_bin())
        .env("LAB_AGENT_REPO", &root)
        .env("LAB_AGENT_STATIC", &fake_agent)
        .env("LAB_AGENT_WHEEL", &wheel)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .current_dir(work.join("."))
        .output()
        .expect("run pytest");
    let text = describe(&out);
    eprintln!("{text}");
    assert!(out.status.success(), "pytest failed:\n{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(" passed") && !stdout.contains(" skipped"),
        "every test ran: {stdout}"
    );
}
