//! Test environment: a temp dir, a token, the real `lab-agent` binary on a
//! free loopback port, and a deliberately dumb HTTP/1.1 client (so tests can
//! also send what no proper client would).

use lab_agent_proto::addr_file;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "test-token-0123456789-abcdefghijklmnopqrstuv";

/// The agent these tests run and what runs it: cargo's build of it for this
/// host, directly, unless a test has set another for its thread
/// ([`with_foreign_agent`]).
#[derive(Debug, Clone)]
pub struct Foreign {
    /// A program that runs `agent`: `qemu-aarch64` for the aarch64 agent
    /// on an x86_64 host. Its own process is the agent's: same pid, and
    /// what the agent spawns are its children.
    pub runner: PathBuf,
    pub agent: PathBuf,
}

thread_local! {
    static FOREIGN: std::cell::RefCell<Option<Foreign>> = const { std::cell::RefCell::new(None) };
}

/// Runs `test` (one of this suite's tests) with every agent it starts, as
/// `serve` or `setup`, being `foreign`: the same test, another build of the
/// agent (`arm64.rs` reruns a subset under qemu-user this way).
pub fn with_foreign_agent(foreign: &Foreign, test: &mut dyn FnMut()) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            FOREIGN.with(|f| f.borrow_mut().take());
        }
    }
    FOREIGN.with(|f| *f.borrow_mut() = Some(foreign.clone()));
    let _reset = Reset;
    test();
}

/// Fails, saying what needs root, unless the tests run as root. CI runs
/// as root, so a test that needs it fails without it instead of passing
/// without having run.
pub fn require_root(what: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "{what} needs root\nhint: run the tests as root, as CI does"
    );
}

/// `lab-agent` as this thread's tests run it (see [`Foreign`]).
pub fn agent_command() -> Command {
    match FOREIGN.with(|f| f.borrow().clone()) {
        None => Command::new(env!("CARGO_BIN_EXE_lab-agent")),
        Some(Foreign { runner, agent }) => {
            let mut cmd = Command::new(runner);
            cmd.arg(agent);
            cmd
        }
    }
}

/// A temp dir removed on drop: `tempfile`'s, so its name is random and it
/// is created exclusively (never one someone else made first), 0755 so the
/// other users the tests run commands as can reach what is in it.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir(
            tempfile::Builder::new()
                .prefix(&format!("lab-agent-it-{tag}-"))
                .permissions(std::fs::Permissions::from_mode(0o755))
                .tempdir()
                .unwrap(),
        )
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.path().join(p)
    }
}

pub fn write_file(path: &Path, contents: &str, mode: u32) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub struct AgentBuilder {
    pub dir: TempDir,
    args: Vec<String>,
    cloud_init: bool,
    env: Vec<(String, String)>,
    oom_score_adj: Option<&'static std::ffi::CStr>,
    accounts: Option<(PathBuf, PathBuf)>,
    leak_fd: bool,
}

impl AgentBuilder {
    /// The agent (and every command it runs) sees `passwd` and `group` as
    /// `/etc/passwd` and `/etc/group`, bound over them in a mount
    /// namespace of its own: a test's user exists for its agent alone,
    /// and the machine's accounts are never written (needs root).
    pub fn accounts(mut self, passwd: &Path, group: &Path) -> Self {
        self.accounts = Some((passwd.to_owned(), group.to_owned()));
        self
    }

    /// The agent starts with this `oom_score_adj` (raising needs no
    /// privilege), as if its parent had set one.
    pub fn oom_score_adj(mut self, value: &'static std::ffi::CStr) -> Self {
        self.oom_score_adj = Some(value);
        self
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, a: I) -> Self {
        self.args.extend(a.into_iter().map(Into::into));
        self
    }

    /// An extra variable in the agent's own environment.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts the agent holding one descriptor without close-on-exec (fd
    /// 9, `/dev/null`), as a careless parent would leave it.
    pub fn inheriting_a_descriptor(mut self) -> Self {
        self.leak_fd = true;
        self
    }

    pub fn no_cloud_init(mut self) -> Self {
        self.cloud_init = false;
        self
    }

    /// Starts the agent and waits until it has bound its port.
    pub fn start(self) -> Agent {
        let dir = self.dir;
        let token_file = dir.join("token");
        if !token_file.exists() {
            write_file(&token_file, &format!("{TOKEN}\n"), 0o600);
        }
        let addr_file = dir.join("addr");
        let log = dir.join("agent.log");
        let mut cmd = match &self.accounts {
            None => agent_command(),
            Some((passwd, group)) => {
                // `unshare` and `sh` exec: the agent keeps the child's pid.
                let agent = agent_command();
                let mut cmd = Command::new("unshare");
                cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                    .arg(
                        "mount --bind \"$1\" /etc/passwd && mount --bind \"$2\" /etc/group \
                         && shift 2 && exec \"$@\"",
                    )
                    .arg("sh")
                    .args([passwd, group])
                    .arg(agent.get_program())
                    .args(agent.get_args());
                cmd
            }
        };
        cmd.args(addr_file::serve_args(
            addr_file::LOOPBACK_ANY_PORT,
            &addr_file,
            &token_file,
            &dir.join("state"),
        ))
        .arg("--cloud-init-dir")
        .arg(dir.join("cloud-init"));
        if !self.cloud_init {
            cmd.arg("--no-cloud-init");
        }
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("agent.out")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap());
        // As systemd starts it: with 0, 1 and 2 only. Whatever else the test
        // runner inherited (a CI harness's pipes) must not look like the
        // agent's own descriptors leaking into commands.
        let oom = self.oom_score_adj;
        let leak_fd = self.leak_fd;
        // SAFETY: fcntl, open, write and close are async-signal-safe;
        // nothing is allocated.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                for fd in 3..4096 {
                    nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC);
                }
                if leak_fd {
                    let fd = nix::libc::open(c"/dev/null".as_ptr(), nix::libc::O_RDONLY);
                    if fd < 0 || nix::libc::dup2(fd, 9) != 9 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(v) = oom {
                    let fd = nix::libc::open(
                        c"/proc/self/oom_score_adj".as_ptr(),
                        nix::libc::O_WRONLY | nix::libc::O_CLOEXEC,
                    );
                    if fd >= 0 {
                        nix::libc::write(fd, v.as_ptr().cast(), v.to_bytes().len());
                        nix::libc::close(fd);
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("failed to start lab-agent");
        let mut agent = Agent {
            child,
            addr: "127.0.0.1:1".parse().unwrap(),
            dir,
            args: self.args,
            cloud_init: self.cloud_init,
            env: self.env,
        };
        match addr_file::wait(&addr_file, &mut agent.child, Duration::from_secs(20)) {
            Ok(addr) => agent.addr = addr,
            Err(e) => panic!("{e}: {}", agent.log()),
        }
        // The address file comes before the start-up log lines; a test
        // that measures what it adds to the log starts after them.
        eventually(20, "the agent's start-up log lines", || {
            agent.log().contains(" listening ").then_some(())
        });
        agent
    }
}

pub struct Agent {
    pub child: Child,
    pub addr: SocketAddr,
    pub dir: TempDir,
    args: Vec<String>,
    cloud_init: bool,
    env: Vec<(String, String)>,
}

impl Agent {
    pub fn builder(tag: &str) -> AgentBuilder {
        AgentBuilder {
            dir: TempDir::new(tag),
            args: Vec::new(),
            cloud_init: true,
            env: Vec::new(),
            oom_score_adj: None,
            accounts: None,
            leak_fd: false,
        }
    }

    /// An agent in local mode (no cloud-init) with nothing else set up.
    pub fn local(tag: &str) -> Agent {
        Agent::builder(tag).no_cloud_init().start()
    }

    /// SIGKILLs the agent and starts a new one on the same directory (token,
    /// state, cloud-init dir) with the same flags, as systemd would.
    pub fn kill_and_restart(mut self) -> Agent {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::replace(&mut self.dir, TempDir::new("restarted"));
        let _ = std::fs::remove_file(dir.join("addr"));
        AgentBuilder {
            dir,
            args: std::mem::take(&mut self.args),
            cloud_init: self.cloud_init,
            env: std::mem::take(&mut self.env),
            oom_score_adj: None,
            accounts: None,
            leak_fd: false,
        }
        .start()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    pub fn cloud_init_dir(&self) -> PathBuf {
        self.dir.join("cloud-init")
    }

    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, Some(TOKEN), None)
    }

    pub fn exec(&self, body: serde_json::Value) -> Resp {
        self.request(
            "POST",
            "/v1/exec",
            Some(TOKEN),
            Some(body.to_string().as_bytes()),
        )
    }

    /// The result of a successful exec.
    pub fn run(&self, body: serde_json::Value) -> serde_json::Value {
        let r = self.exec(body.clone());
        assert_eq!(r.status, 200, "{body}: {}", r.text());
        r.json()
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
    ) -> Resp {
        request_at(self.addr, method, path, token, body)
    }

    /// Sends raw bytes and reads one response; `None` if the agent closed
    /// the connection without answering.
    pub fn raw(&self, bytes: &[u8]) -> Option<Resp> {
        raw_at(self.addr, bytes)
    }

    /// Like [`Agent::raw`], then closes our sending side, so a truncated
    /// request ends instead of waiting for the body timeout.
    pub fn raw_eof(&self, bytes: &[u8]) -> Option<Resp> {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let _ = s.write_all(bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        read_response(&mut BufReader::new(s))
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args(["-s", sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    /// Waits for the agent to exit (panics after `secs`).
    pub fn wait_exit(&mut self, secs: u64) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "agent did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", self.log());
        }
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts an API error with this status and code; returns the message.
    pub fn error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "{}", self.text());
        let v = self.json();
        assert_eq!(v["error"]["code"], code, "{v}");
        v["error"]["message"].as_str().unwrap().to_owned()
    }
}

/// [`Agent::exec`] for threads, which cannot borrow the [`Agent`].
pub fn exec_at(addr: SocketAddr, body: &serde_json::Value) -> Resp {
    request_at(
        addr,
        "POST",
        "/v1/exec",
        Some(TOKEN),
        Some(body.to_string().as_bytes()),
    )
}

/// One request on a fresh connection (`Connection: close`).
pub fn request_at(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Resp {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body.unwrap_or_default());
    raw_at(addr, &raw).expect("no HTTP response")
}

/// See [`Agent::raw`].
pub fn raw_at(addr: SocketAddr, bytes: &[u8]) -> Option<Resp> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let _ = s.write_all(bytes);
    read_response(&mut BufReader::new(s))
}

pub fn read_response<R: BufRead>(r: &mut R) -> Option<Resp> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Resp {
        status,
        headers,
        body,
    })
}

/// Polls `f` until it returns `Some` (panics after `secs`).
pub fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|s| s != "Z"),
    }
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_owned()
}

/// Lets the agent's readiness cache expire, so the next `/v1/ready` looks
/// at the files afresh. The agent stamps a cached answer before sending it,
/// so one [`CACHE_TTL`](lab_agent::CACHE_TTL) after that answer
/// arrived is always enough: no margin to guess.
pub fn past_the_readiness_cache() {
    std::thread::sleep(lab_agent::CACHE_TTL);
}

/// Whether the agent has read everything sent on at least `n` established
/// connections to `port`, and on all of them: the receive queue of the
/// agent's side of each is empty (`/proc/net/tcp`). A head the agent has
/// read is parsed and its request marked busy in the same poll of the
/// connection's task, so this is the moment the probe may come.
pub fn heads_read(port: u16, n: usize) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!(":{port:04X}");
    let mut read = 0;
    for line in table.lines().skip(1) {
        // sl local_address rem_address st tx_queue:rx_queue …
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 4 && f[1].ends_with(&local) && f[3] == "01" {
            let rx = f[4].split(':').nth(1).unwrap_or("?");
            if u64::from_str_radix(rx, 16) != Ok(0) {
                return false;
            }
            read += 1;
        }
    }
    read >= n
}
