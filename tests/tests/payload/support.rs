//! Fixtures, temp dirs, and the external tools (with install hints).

use lab_agent_client::cli::agent_bin::fake_elf;
use lab_agent_cloudinit::{
    Format, PayloadSpec, SecretMeta, SetupScript, UserData, render_secret, render_user_data,
};
use lab_agent_proto::lab::Lab;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fixed token for renders that are compared.
pub const TOKEN: &str = "round-trip-token-0123456789abcdefghijklmnop";

/// Debian's python, where the cloud-init package installs `cloudinit`.
pub const PYTHON: &str = "/usr/bin/python3";

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The renderer's fixture lab.
pub fn fixture_lab() -> PathBuf {
    workspace().join("cloud-init/tests/fixtures/fixture-lab")
}

/// The labs to validate: the renderer's fixture and `examples/hello-lab`.
pub fn labs() -> Vec<PathBuf> {
    vec![fixture_lab(), workspace().join("examples/hello-lab")]
}

/// A small static-looking ELF standing in for the agent.
pub fn fake_agent() -> Vec<u8> {
    fake_elf(
        false,
        b"fake lab-agent payload \x00\xff\xfe for round trips",
    )
}

/// The spec `labctl secret` builds for the lab in `dir`.
pub fn spec_for(dir: &Path) -> PayloadSpec {
    let lab = Lab::load(dir).unwrap();
    let mut spec = PayloadSpec::new(&lab.name, fake_agent(), TOKEN);
    spec.files = lab.collect_files().unwrap();
    spec.setup = lab.setup_script_path().map(|p| SetupScript {
        contents: std::fs::read(p).unwrap(),
        timeout_secs: lab.setup_timeout_secs(),
    });
    spec
}

pub fn secret(user_data: &UserData, format: Format) -> String {
    let mut meta = SecretMeta::new("round-trip");
    meta.namespace = Some("lab-vms".into());
    meta.labels
        .insert("tt-lab.example/environment".into(), "dev".into());
    render_secret(user_data, &meta, format).unwrap()
}

pub fn user_data(spec: &PayloadSpec) -> UserData {
    render_user_data(spec).unwrap()
}

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lab-payload-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a command; panics with `hint` if it cannot be started at all.
pub fn run(cmd: &mut Command, hint: &str) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}\nhint: {hint}"))
}

pub const CLOUD_INIT_HINT: &str = "install Debian's cloud-init without starting anything: \
     `printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && \
     apt-get install -y --no-install-recommends cloud-init`";

pub const KUBERNETES_VALIDATE_HINT: &str =
    "install it from PyPI: `pip install kubernetes-validate` (it must be on PATH)";

/// `cloud-init schema --config-file FILE`.
pub fn cloud_init_schema(file: &Path) -> Output {
    run(
        Command::new("cloud-init")
            .args(["schema", "--config-file"])
            .arg(file),
        CLOUD_INIT_HINT,
    )
}

/// `kubernetes-validate --strict -k 1.34.0 FILE` (the platform's cluster version).
pub fn kubernetes_validate(file: &Path) -> Output {
    run(
        Command::new("kubernetes-validate")
            .args(["--strict", "-k", "1.34.0"])
            .arg(file),
        KUBERNETES_VALIDATE_HINT,
    )
}

/// What `write_files.py` reports.
pub struct Decoded {
    pub report: serde_json::Value,
    /// Where the guest's `/` is.
    pub root: TempDir,
}

impl Decoded {
    pub fn file(&self, guest_path: &str) -> PathBuf {
        self.root.path().join(guest_path.trim_start_matches('/'))
    }

    /// Bytes and permission bits of a written file.
    pub fn read(&self, guest_path: &str) -> (Vec<u8>, u32) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.file(guest_path);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("cloud-init did not write `{guest_path}`: {e}"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        (bytes, mode)
    }
}

/// Runs cloud-init's own loader and `write_files` on a Secret manifest.
pub fn decode_with_cloud_init(secret_text: &str) -> Decoded {
    let dir = TempDir::new("secret");
    let secret = dir.write("secret", secret_text);
    let root = TempDir::new("root");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/payload/write_files.py");
    let out = run(
        Command::new(PYTHON)
            .arg(&script)
            .arg(&secret)
            .arg(root.path()),
        CLOUD_INIT_HINT,
    );
    assert!(
        out.status.success(),
        "write_files.py failed ({}):\n{}\nhint: if `cloudinit` cannot be imported, {CLOUD_INIT_HINT}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_slice(&out.stdout).unwrap();
    Decoded { report, root }
}
