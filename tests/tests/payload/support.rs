//! Fixtures, temp dirs, and the external tools (with install hints).

use lab_agent_cloudinit::{
    Arch, Format, PayloadSpec, SecretMeta, SetupScript, UserData, render_secret, render_user_data,
};
use lab_agent_proto::lab::{Lab, READY_TIMEOUT_ANNOTATION};
use labctl::agent_bin::{self, Linkage};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// A fixed token for renders that are compared.
pub const TOKEN: &str = "round-trip-token-0123456789abcdefghijklmnop";

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

/// The real static agent (`packaging/build-agent.sh`), as `labctl secret`
/// ships it: the installer runs it (`lab-agent version`) before putting it
/// in place, and its megabyte is what the payload's size is about.
pub fn agent() -> Vec<u8> {
    static AGENT: OnceLock<Vec<u8>> = OnceLock::new();
    AGENT.get_or_init(|| load_agent(Arch::Amd64)).clone()
}

/// The real static arm64 agent (`packaging/build-agent.sh --arch arm64`,
/// which `tests/install-deps.sh` runs).
pub fn arm64_agent() -> Vec<u8> {
    static AGENT: OnceLock<Vec<u8>> = OnceLock::new();
    AGENT.get_or_init(|| load_agent(Arch::Arm64)).clone()
}

fn load_agent(arch: Arch) -> Vec<u8> {
    match agent_bin::load(None, Linkage::Static(arch)) {
        Ok(agent) => agent.bytes,
        Err(e) => panic!(
            "{e}\nhint: {}",
            e.hint()
                .unwrap_or_else(|| "run tests/install-deps.sh".into())
        ),
    }
}

/// [`spec_for`] for an arm64 VM: the arm64 agent, its console.
pub fn arm64_spec_for(dir: &Path) -> PayloadSpec {
    let mut spec = spec_for(dir);
    spec.arch = Arch::Arm64;
    spec.agent = lab_agent_cloudinit::AgentSource::Embedded(arm64_agent());
    spec
}

/// The spec `labctl secret` builds for the lab in `dir`.
pub fn spec_for(dir: &Path) -> PayloadSpec {
    let lab = Lab::load(dir).unwrap();
    let mut spec = PayloadSpec::new(&lab.name, agent(), TOKEN);
    spec.files = lab.collect_files().unwrap();
    spec.setup = lab.setup_script_path().map(|p| SetupScript {
        contents: std::fs::read(p).unwrap(),
        timeout_secs: lab.setup_timeout_secs(),
    });
    spec.readiness = lab.readiness;
    spec
}

pub fn secret(user_data: &UserData, format: Format) -> String {
    let mut meta = SecretMeta::new("round-trip");
    meta.namespace = Some("lab-vms".into());
    meta.labels
        .insert("tt-lab.example/environment".into(), "dev".into());
    // As `lab_payload::render` annotates every lab's Secret.
    meta.annotations
        .insert(READY_TIMEOUT_ANNOTATION.into(), "150".into());
    render_secret(user_data, &meta, format).unwrap()
}

pub fn user_data(spec: &PayloadSpec) -> UserData {
    render_user_data(spec).unwrap()
}

/// A directory removed on drop (labctl's one temp-dir helper).
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir(lab_runner::tempdir::create(&format!("lab-payload-{tag}"), 0o755).unwrap())
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

/// Runs a command; panics with `hint` if it cannot be started at all.
pub fn run(cmd: &mut Command, hint: &str) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}\nhint: {hint}"))
}

pub const CLOUD_INIT_HINT: &str =
    "run `tests/install-deps.sh`: it unpacks Debian's cloud-init into a cache (nothing installed)";

/// `cloud-init schema --config-file FILE`, Debian's cloud-init from the
/// test cache.
pub fn cloud_init_schema(file: &Path) -> Output {
    run(
        &mut lab_agent_tests::pydeps::cloud_init_schema(file),
        CLOUD_INIT_HINT,
    )
}

/// A guest's filesystem after cloud-init delivered a payload to it
/// (`guest.py` in an overlay chroot): every file the delivery wrote is in
/// the overlay's upper dir, at its guest path; nothing reached the machine.
pub struct Guest {
    /// What `guest.py` reports (parts, commands, write_files entries).
    pub report: serde_json::Value,
    /// Holds `upper/` (the guest's writes) and the delivery's inputs.
    work: TempDir,
    /// The temp dir's own path, as the chroot saw it (under `upper/` too).
    inside: PathBuf,
}

impl Guest {
    /// Where `guest_path` is, if the delivery wrote it.
    pub fn file(&self, guest_path: &str) -> PathBuf {
        self.work
            .path()
            .join("upper")
            .join(guest_path.trim_start_matches('/'))
    }

    /// Bytes and permission bits of a file the delivery wrote.
    pub fn read(&self, guest_path: &str) -> (Vec<u8>, u32) {
        let path = self.file(guest_path);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("the delivery did not write `{guest_path}`: {e}"));
        (bytes, mode(&path))
    }

    /// Every regular file the delivery wrote, as guest paths, leaving out
    /// cloud-init's own records (`/var/lib/cloud`), scratch space (`/tmp`,
    /// `/run`) and this test's inputs.
    pub fn written(&self) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    walk(&path, base, out);
                } else {
                    let rel = path.strip_prefix(base).unwrap();
                    out.push(format!("/{}", rel.display()));
                }
            }
        }
        let upper = self.work.path().join("upper");
        let mut out = Vec::new();
        walk(&upper, &upper, &mut out);
        let inside = self.inside.display().to_string();
        out.retain(|p| {
            !(p.starts_with("/var/lib/cloud/")
                || p.starts_with("/tmp/")
                || p.starts_with("/run/")
                || p.starts_with(&inside))
        });
        out.sort();
        out
    }
}

/// Permission bits of `path`.
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("`{}`: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Delivers a Secret manifest as KubeVirt and a guest's first boot would,
/// with Debian's cloud-init (see `guest.py`), as root in a throw-away copy
/// of this machine: an overlay of `/` in a private mount namespace, entered
/// with chroot. Runs `bootcmd`, `write_files` and the per-instance
/// installer; not `runcmd`.
pub fn deliver(secret_text: &str) -> Guest {
    deliver_with(secret_text, Tools::Host)
}

/// What the installer runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tools {
    /// The machine's `/bin/sh` (dash) and coreutils, as on Debian.
    Host,
    /// busybox's `sh` with only busybox applets on PATH, as on Alpine.
    Busybox,
}

/// [`deliver`], with the installer run by `tools`.
pub fn deliver_with(secret_text: &str, tools: Tools) -> Guest {
    assert!(
        lab_agent_tests::local::is_root(),
        "delivering a payload offline needs root (an overlay of `/` in a private mount \
         namespace)\nhint: run the tests as root, as CI does"
    );
    let work = TempDir::new("guest");
    let inside = work.path().to_owned();
    for dir in ["upper", "ovl-work", "root"] {
        std::fs::create_dir(work.path().join(dir)).unwrap();
    }
    let secret = work.write("secret", secret_text);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/payload/guest.py");
    let guest_py = work.write("guest.py", std::fs::read(script).unwrap());
    let report = work.path().join("report.json");
    let mut applets = String::new();
    if tools == Tools::Busybox {
        let busybox = lab_agent_tests::pydeps::busybox();
        let dir = work.path().join("applets");
        std::fs::create_dir(&dir).unwrap();
        // What the installer calls, and nothing else.
        for applet in [
            "sh", "base64", "gzip", "wc", "mkdir", "rm", "mv", "chmod", "cat", "uname", "printf",
            "od",
        ] {
            std::os::unix::fs::symlink(&busybox, dir.join(applet)).unwrap();
        }
        applets = shell_quote(&dir.display().to_string());
    }

    let python = lab_agent_tests::pydeps::cloud_init_python();
    let mut env = vec![
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        "PYTHONDONTWRITEBYTECODE=1".to_owned(),
        "LANG=C.UTF-8".to_owned(),
    ];
    for (k, v) in python.get_envs() {
        if let Some(v) = v {
            env.push(format!("{}={}", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    let q = |p: &Path| shell_quote(&p.display().to_string());
    let root = work.path().join("root");
    let sh = format!(
        "set -e\n\
         mount -t overlay overlay -o lowerdir=/,upperdir={upper},workdir={owork} {root}\n\
         mount --bind /dev {root}/dev\n\
         mount -t proc proc {root}/proc\n\
         mount -t tmpfs tmpfs {root}/run\n\
         exec chroot {root} env -i {env} {python} {guest_py} {secret} {report} {applets}\n",
        upper = q(&work.path().join("upper")),
        owork = q(&work.path().join("ovl-work")),
        root = q(&root),
        env = env
            .iter()
            .map(|e| shell_quote(e))
            .collect::<Vec<_>>()
            .join(" "),
        python = q(Path::new(python.get_program())),
        guest_py = q(&guest_py),
        secret = q(&secret),
        report = q(&report),
    );
    let out = run(
        Command::new("unshare").args(["--mount", "--propagation", "private", "sh", "-c", &sh]),
        "unshare(1) is in util-linux",
    );
    let guest = Guest {
        report: serde_json::Value::Null,
        work,
        inside,
    };
    let report_in_upper = guest.file(&report.display().to_string());
    assert!(
        out.status.success() && report_in_upper.exists(),
        "delivering the payload failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report_in_upper).unwrap()).unwrap();
    assert_eq!(
        report["complaints"],
        serde_json::json!([]),
        "cloud-init complained while delivering the payload"
    );
    Guest { report, ..guest }
}

/// `s` in single quotes for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
