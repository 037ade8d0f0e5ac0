//! The Python tools the tests run, from the cache `tests/pydeps.sh` fills
//! (`tests/install-deps.sh` runs it). Nothing here installs anything: a
//! missing tool is a panic that says how to get it.
//!
//! - cloud-init: Debian's package (the guest's version) and its Python
//!   dependencies, unpacked in `<cache>/cloud-init/<hash>/root/`, run by
//!   Debian's `/usr/bin/python3` with `PYTHONPATH` pointing there
//!   ([`cloud_init_python`], [`cloud_init_schema`]). The host has no
//!   cloud-init package and no cloud-init service.
//! - the PyPI validators (`kubernetes-validate`, `schemathesis`): a
//!   virtualenv in `<cache>/venv/<hash>/` ([`venv_tool`]).
//!
//! `<cache>` is `$LAB_AGENT_CACHE`, else `$XDG_CACHE_HOME/lab-agent`, else
//! `$HOME/.cache/lab-agent`: the rule of the shell scripts (an empty
//! variable counts as unset). `<hash>` is that of this checkout's
//! `tests/pydeps.sh` ([`script_hash`]): another checkout with another
//! version of the script has its own, and neither removes the other's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to do when a tool is missing.
pub const HINT: &str = "run tests/install-deps.sh (or tests/pydeps.sh alone, which needs no root)";

/// Debian's interpreter: the unpacked C extensions are built for it.
pub const DEBIAN_PYTHON: &str = "/usr/bin/python3";

fn non_empty(key: &str) -> Option<OsString> {
    std::env::var_os(key).filter(|v| !v.is_empty())
}

/// The cache root shared with `tests/pydeps.sh` and `tests/vm/build-image.sh`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = non_empty("LAB_AGENT_CACHE") {
        return dir.into();
    }
    if let Some(dir) = non_empty("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("lab-agent");
    }
    let home = non_empty("HOME").expect("neither LAB_AGENT_CACHE, XDG_CACHE_HOME nor HOME is set");
    PathBuf::from(home).join(".cache/lab-agent")
}

/// The first 16 hex digits of the sha256 of this checkout's
/// `tests/pydeps.sh`: the name it gives what it builds. Hashed once per
/// test process (every tool lookup needs it).
pub fn script_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("pydeps.sh");
        let out = Command::new("sha256sum")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("failed to run sha256sum (coreutils): {e}"));
        assert!(
            out.status.success(),
            "sha256sum {}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .chars()
            .take(16)
            .collect()
    })
}

/// `<cache>/<kind>/<hash>`; panics with [`HINT`] if absent or incomplete.
fn built(kind: &str, what: &str) -> PathBuf {
    let dir = cache_root().join(kind).join(script_hash());
    assert!(
        dir.join("manifest.txt").is_file(),
        "{what} for the tests is missing or incomplete: `{}` has no manifest.txt \
         (tests/pydeps.sh was edited since it last ran, or never ran)\nhint: {HINT}",
        dir.display()
    );
    dir
}

/// Where the unpacked cloud-init and its dependencies import from.
pub fn cloud_init_site_packages() -> PathBuf {
    built("cloud-init", "the unpacked cloud-init").join("root/usr/lib/python3/dist-packages")
}

/// Debian's busybox, unpacked beside cloud-init: the payload's installer
/// is tried with its `sh`, `base64` and `gzip` alone, as on Alpine.
pub fn busybox() -> PathBuf {
    let path = built("cloud-init", "the unpacked cloud-init").join("root/bin/busybox");
    assert!(
        path.is_file(),
        "`{}` is missing: the cache predates it\nhint: {HINT}",
        path.display()
    );
    path
}

/// Debian's `python3` that imports `cloudinit` (and `yaml`, `jsonschema`,
/// ... as the guest has them) from the unpacked packages; add the args.
/// Writes no bytecode (the cache is compiled when it is made).
pub fn cloud_init_python() -> Command {
    let site = cloud_init_site_packages();
    assert!(
        Path::new(DEBIAN_PYTHON).is_file(),
        "`{DEBIAN_PYTHON}` is missing: the unpacked cloud-init runs under Debian's python3\n\
         hint: apt-get install python3"
    );
    let mut cmd = Command::new(DEBIAN_PYTHON);
    cmd.env("PYTHONPATH", site)
        .env("PYTHONNOUSERSITE", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONHOME");
    cmd
}

/// `cloud-init schema --config-file FILE`, ready to run: exit 0 and
/// `Valid cloud-config: FILE` when valid, exit 1 and the errors otherwise.
pub fn cloud_init_schema(file: &Path) -> Command {
    let mut cmd = cloud_init_python();
    cmd.args(["-m", "cloudinit.cmd.main", "schema", "--config-file"])
        .arg(file);
    cmd
}

/// The virtualenv of the PyPI validators.
pub fn venv_dir() -> PathBuf {
    built("venv", "the virtualenv of the PyPI validators")
}

/// A command of the virtualenv, e.g. `venv_tool("kubernetes-validate")`;
/// add the args. `PYTHONPATH` and `PYTHONHOME` are cleared (set them after
/// this if the tool needs them).
pub fn venv_tool(name: &str) -> Command {
    let path = venv_dir().join("bin").join(name);
    assert!(
        path.is_file(),
        "`{}` is missing from the virtualenv\nhint: {HINT}",
        path.display()
    );
    let mut cmd = Command::new(path);
    cmd.env_remove("PYTHONPATH").env_remove("PYTHONHOME");
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The installed tools, when present (`cargo test -p lab-agent-tests
    /// --lib`); the payload and contract tests use them in earnest.
    #[test]
    fn the_tools_run() {
        let dir = std::env::temp_dir().join(format!("lab-pydeps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.yaml");
        std::fs::write(&good, "#cloud-config\nruncmd: [\"echo ok\"]\n").unwrap();
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, "#cloud-config\nruncmd: 5\n").unwrap();
        let ok = cloud_init_schema(&good).output().unwrap();
        let not_ok = cloud_init_schema(&bad).output().unwrap();
        let imports = cloud_init_python()
            .args([
                "-c",
                "from cloudinit.user_data import UserDataProcessor; from cloudinit import helpers",
            ])
            .output()
            .unwrap();
        let k8s = venv_tool("kubernetes-validate")
            .arg("--version")
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(ok.status.success(), "{ok:?}");
        assert!(String::from_utf8_lossy(&ok.stdout).contains("Valid cloud-config"));
        assert_eq!(not_ok.status.code(), Some(1), "{not_ok:?}");
        assert!(String::from_utf8_lossy(&not_ok.stderr).contains("runcmd"));
        assert!(imports.status.success(), "{imports:?}");
        assert!(k8s.status.success(), "{k8s:?}");
    }
}
