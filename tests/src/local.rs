//! Support for tests that run the real binaries on this machine (no VM):
//! finding (and once per process building) `lab-agent` and `labctl`, temp
//! dirs, token files, and agents started on a loopback port that are killed
//! when the test lets go of them.
//!
//! Binaries: `$LAB_AGENT_BIN` / `$LABCTL_BIN` when set; otherwise the ones
//! in this test binary's target dir, brought up to date first with
//! `cargo build -p lab-agent -p labctl --bins` (through `$CARGO`,
//! which cargo sets for the tests it runs) so a test never runs a stale one.

use lab_agent_proto::addr_file;
use lab_runner::qemu::Arch;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The `lab-agent` binary to test.
pub fn agent_bin() -> PathBuf {
    bin("LAB_AGENT_BIN", "lab-agent")
}

/// The `labctl` binary to test.
pub fn labctl_bin() -> PathBuf {
    bin("LABCTL_BIN", "labctl")
}

/// The static agent for `arch`, brought up to date once per process
/// (`packaging/build-agent.sh --arch ARCH` is a no-op when it is fresh).
pub fn static_agent_for(arch: Arch) -> &'static Path {
    static AMD64: OnceLock<PathBuf> = OnceLock::new();
    static ARM64: OnceLock<PathBuf> = OnceLock::new();
    let cell = match arch {
        Arch::Amd64 => &AMD64,
        Arch::Arm64 => &ARM64,
    };
    cell.get_or_init(|| {
        let out = Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/build-agent.sh"))
            .args(["--arch", arch.name()])
            .stdin(Stdio::null())
            .output()
            .expect("run packaging/build-agent.sh");
        assert!(
            out.status.success(),
            "packaging/build-agent.sh --arch {arch} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let path = PathBuf::from(path.lines().last().unwrap_or_default());
        assert!(path.is_file(), "build-agent.sh printed no agent path");
        path
    })
}

/// The hostile fake agent (`src/bin/hostile-agent.rs`), for tests in
/// other languages.
pub fn hostile_agent_bin() -> PathBuf {
    bin("HOSTILE_AGENT_BIN", "hostile-agent")
}

/// The relay stand-ins (`src/bin/relay-stand-in.rs`), for the Python tests.
pub fn relay_stand_in_bin() -> PathBuf {
    bin("RELAY_STAND_IN_BIN", "relay-stand-in")
}

/// `src/bin/rusage-run.rs`: runs a command and reports its own peak RSS
/// and CPU.
pub fn rusage_run_bin() -> PathBuf {
    bin("RUSAGE_RUN_BIN", "rusage-run")
}

fn bin(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{env}={} is not a file", p.display());
        return p;
    }
    let dir = built_bins();
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "`{}` does not exist; build it with \
         `cargo build -p lab-agent -p labctl -p lab-agent-tests --bins` \
         or set {env}",
        p.display()
    );
    p
}

/// The profile dir (`target/debug`) of this test binary, with the binaries
/// built once per process.
fn built_bins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // target/debug/deps/<test> → target/debug
        let exe = std::env::current_exe().expect("current_exe");
        let mut dir = exe.parent().expect("exe dir").to_owned();
        if dir.ends_with("deps") {
            dir.pop();
        }
        if let Some(cargo) = std::env::var_os("CARGO") {
            let mut cmd = Command::new(cargo);
            cmd.args([
                "build",
                "-p",
                "lab-agent",
                "-p",
                "labctl",
                "-p",
                "lab-agent-tests",
            ])
            .arg("--bins");
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
            let status = cmd.status().expect("run cargo build");
            assert!(status.success(), "cargo build of the binaries failed");
        }
        dir
    })
}

/// A temp dir (labctl's one helper), removed on drop; kept, and named,
/// when the test panicked.
#[derive(Debug)]
pub struct TempDir {
    dir: Option<tempfile::TempDir>,
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = lab_runner::tempdir::create(&format!("lab-agent-test-{tag}"), 0o711)
            .expect("create temp dir");
        // Passable by others, whatever the umask: checks may run as another user.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        TempDir {
            path: dir.path().to_owned(),
            dir: Some(dir),
        }
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }

    /// Writes `contents` to `name` with `mode`, creating parent folders.
    pub fn write(&self, name: &str, contents: &str, mode: u32) -> PathBuf {
        let p = self.path.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, contents).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!("(kept {} for inspection)", dir.keep().display());
            }
        }
    }
}

/// A fresh token, as `labctl secret` makes them.
pub fn new_token() -> String {
    labctl::token::generate().expect("random bytes for a token")
}

/// Writes `token` to `path` with mode 0600, as the agent demands.
pub fn write_token(path: &Path, token: &str) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .expect("write token");
    f.write_all(token.as_bytes()).unwrap();
}

/// A loopback port held for as long as this lives, with nothing listening
/// on it: connecting is refused, and no other socket is given the port (a
/// port found by bind-and-drop can be taken by a parallel test's agent
/// before it is used).
///
/// The socket is bound with `SO_REUSEADDR` but never listens, so an agent
/// started on the port later (std and tokio bind with `SO_REUSEADDR` too)
/// can bind it and listen while the reservation is still held: there is no
/// moment at which the port is free.
#[derive(Debug)]
pub struct ReservedPort {
    _socket: std::os::fd::OwnedFd,
    pub port: u16,
}

impl ReservedPort {
    pub fn new() -> ReservedPort {
        use nix::sys::socket::{
            AddressFamily, SockFlag, SockType, SockaddrIn, bind, getsockname, setsockopt, socket,
            sockopt,
        };
        use std::os::fd::AsRawFd;
        let socket = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        setsockopt(&socket, sockopt::ReuseAddr, &true).expect("SO_REUSEADDR");
        bind(socket.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0)).expect("bind 127.0.0.1:0");
        let port = getsockname::<SockaddrIn>(socket.as_raw_fd())
            .expect("getsockname")
            .port();
        ReservedPort {
            _socket: socket,
            port,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }
}

impl Default for ReservedPort {
    fn default() -> Self {
        ReservedPort::new()
    }
}

/// How to start an agent: `lab-agent serve --no-cloud-init` on loopback.
#[derive(Debug, Clone, Default)]
pub struct AgentOptions {
    /// `--listen`; default `127.0.0.1:0`.
    pub listen: Option<String>,
    /// A setup script's text, run with `--run-setup`; default `true`, so
    /// the agent becomes ready at once (without any setup it reports
    /// `failed`, as a VM whose setup never ran).
    pub setup: Option<String>,
    /// `--lab-dir` for the setup.
    pub lab_dir: Option<PathBuf>,
    pub extra_args: Vec<String>,
    /// The token; default a fresh one.
    pub token: Option<String>,
    /// `--cloud-init-dir`: a test's stand-in for `/run/cloud-init`
    /// (`status.json`, `result.json`); default `--no-cloud-init`.
    pub cloud_init_dir: Option<PathBuf>,
    /// `--state-dir`; default `state` in the agent's own dir (a fresh one
    /// each start). One kept across starts is the same root disk: the
    /// agent keeps its instance in it (`instance.json`).
    pub state_dir: Option<PathBuf>,
}

impl AgentOptions {
    pub fn setup(mut self, script: &str) -> Self {
        self.setup = Some(script.to_owned());
        self
    }

    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen = Some(addr.into());
        self
    }

    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    pub fn cloud_init_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cloud_init_dir = Some(dir.into());
        self
    }

    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }
}

/// A running agent; killed (and its dir removed) on drop. When the test
/// panicked, its log is printed.
#[derive(Debug)]
pub struct Agent {
    child: Child,
    pub dir: TempDir,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub token: String,
    pub token_file: PathBuf,
}

impl Agent {
    pub fn start(opts: AgentOptions) -> Agent {
        let dir = TempDir::new("agent");
        let token = opts.token.clone().unwrap_or_else(new_token);
        let token_file = dir.join("token");
        write_token(&token_file, &token);
        let addr_file = dir.join("addr");
        let log = std::fs::File::create(dir.join("agent.log")).unwrap();
        let mut cmd = Command::new(agent_bin());
        cmd.args(addr_file::serve_args(
            opts.listen
                .as_deref()
                .unwrap_or(addr_file::LOOPBACK_ANY_PORT),
            &addr_file,
            &token_file,
            &opts.state_dir.clone().unwrap_or_else(|| dir.join("state")),
        ));
        match &opts.cloud_init_dir {
            Some(dir) => cmd.arg("--cloud-init-dir").arg(dir),
            None => cmd.arg("--no-cloud-init"),
        };
        let script = opts.setup.as_deref().unwrap_or("true\n");
        let path = dir.write("setup.sh", script, 0o755);
        cmd.arg("--run-setup").arg(path);
        if let Some(lab_dir) = &opts.lab_dir {
            cmd.arg("--lab-dir").arg(lab_dir);
        }
        cmd.args(&opts.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = cmd.spawn().expect("spawn lab-agent");
        let mut agent = Agent {
            child,
            dir,
            addr: String::new(),
            token,
            token_file,
        };
        match addr_file::wait(&addr_file, &mut agent.child, Duration::from_secs(20)) {
            Ok(addr) => agent.addr = addr.to_string(),
            Err(e) => panic!("{e}:\n{}", agent.log()),
        }
        agent
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The agent's stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// Kills the agent now (SIGKILL).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- lab-agent log ---\n{}--- end ---", self.log());
        }
    }
}

/// `labctl ARGS…` with no stdin, output captured.
pub fn labctl<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(labctl_bin())
        .args(args)
        .env_remove("LAB_AGENT_BIN")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run labctl")
}

/// The exit code of a finished `labctl`, and its output as text, for
/// assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// hello-lab's checks before the student's step: all pass but the last.
pub const HELLO_LAB_BEFORE_THE_STEP: [(&str, bool); 4] = [
    ("student account exists", true),
    ("welcome note is in the student's home", true),
    ("banner greets interactive shells only", true),
    ("hello.sh runs", false),
];

/// Each check's name and outcome from a `labctl grade --json` report.
pub fn check_outcomes(report: &serde_json::Value) -> Vec<(&str, bool)> {
    report["checks"]
        .as_array()
        .expect("a `checks` array")
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["passed"].as_bool().unwrap()))
        .collect()
}

/// Fails, saying what needs root, unless this process runs as root. CI
/// runs as root, so a test that needs it fails without it instead of
/// passing without having run (as the payload tests always have).
pub fn require_root(what: &str) {
    assert!(
        is_root(),
        "{what} needs root\nhint: run the tests as root, as CI does"
    );
}

/// Whether this process runs as root (needed to create users, run checks
/// as another user).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}
