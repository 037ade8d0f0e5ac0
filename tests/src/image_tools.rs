//! skopeo, umoci and xorrisofs from the lab-agent cache
//! (`tests/image-tools.sh`: Debian's packages unpacked, never installed):
//! the tools an operator reads `labctl agent-disk`'s artefacts with, and
//! the one KubeVirt makes a ConfigMap's disk with.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What to do when they are missing.
pub const HINT: &str = "run tests/install-deps.sh (or tests/image-tools.sh alone)";

/// The cached folder, found by the script itself (its hash names it).
fn dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("image-tools.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg("--cached")
            .output()
            .expect("run tests/image-tools.sh --cached");
        assert!(
            out.status.success(),
            "skopeo, umoci and xorrisofs are not in the lab-agent cache\nhint: {HINT}"
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// `NAME` (`skopeo`, `umoci` or `xorrisofs`), not yet started.
pub fn tool(name: &str) -> Command {
    Command::new(dir().join("bin").join(name))
}
