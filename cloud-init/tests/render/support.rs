//! Shared fixtures and the snapshot helper.

use lab_agent_cloudinit::{PayloadSpec, SetupScript};
use lab_agent_proto::lab::Lab;
use std::path::{Path, PathBuf};

/// A fixed token, so snapshots are stable.
pub const TOKEN: &str = "test-token-0123456789abcdefghijklmnopqrstuv";

/// A few bytes standing in for the agent binary.
pub const FAKE_AGENT: &[u8] = b"\x7fELF fake lab-agent for tests\n";

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The workspace's `examples/NAME`.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

/// The spec `labctl secret` would build for the lab in `dir`, with the fixed
/// token and the fake agent.
pub fn spec_for(dir: &Path) -> PayloadSpec {
    let lab = Lab::load(dir).unwrap();
    let mut spec = PayloadSpec::new(&lab.name, FAKE_AGENT.to_vec(), TOKEN);
    spec.files = lab.collect_files().unwrap();
    spec.setup = lab.setup_script_path().map(|path| SetupScript {
        contents: std::fs::read(path).unwrap(),
        timeout_secs: lab.setup_timeout_secs(),
    });
    spec.readiness = lab.readiness;
    spec
}

/// Compares `actual` with `tests/snapshots/NAME`; `UPDATE_SNAPSHOTS=1`
/// (re)writes the file instead. Review the diff before committing it.
pub fn assert_snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read snapshot `{}`: {e}\nhint: run with UPDATE_SNAPSHOTS=1 to create it",
            path.display()
        )
    });
    if expected == actual {
        return;
    }
    let (line, (want, got)) = expected
        .lines()
        .chain(std::iter::repeat("<end of text>"))
        .zip(actual.lines().chain(std::iter::repeat("<end of text>")))
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .unwrap_or((0, ("<same lines>", "<different line endings>")));
    panic!(
        "snapshot `{}` differs, first at line {}:\n  expected: {want}\n  actual:   {got}\n\
         hint: if the change is intended, run with UPDATE_SNAPSHOTS=1 and review `git diff`",
        path.display(),
        line + 1,
    );
}
