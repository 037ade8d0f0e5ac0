//! Spawning a shell as a user, in its own session (and cgroup, where the
//! agent has a subtree: [`crate::cgroup`]), and supervising it: on timeout
//! or when its request is abandoned, SIGTERM to everything it started — its
//! cgroup, or without one its session, process group and their descendants
//! — then SIGKILL after a grace.
//!
//! Both `/v1/exec` and the setup script run through here, so they share one
//! notion of "login shell", "clean environment" and "kill everything".

use crate::cgroup::{Cgroups, ExecCgroup, Hit, Limits};
use crate::identity::Identity;
use crate::spawn::{self, Spec};
use lab_agent_proto::Profile;
use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// Read before the command under `profile: system`.
const SYSTEM_PROFILE: &str = "if [ -r /etc/profile ]; then . /etc/profile; fi\n";
/// What an abandoned command (its client went away) gets between SIGTERM
/// and SIGKILL: the exec timeout's grace.
pub const ABANDON_GRACE: Duration = Duration::from_secs(2);
/// How long, after SIGKILL, to wait for the killed processes to be gone
/// before answering (a process in uninterruptible sleep dies late).
const KILL_SETTLE: Duration = Duration::from_secs(1);
/// Processes read between two yields of the `/proc` walk.
const WALK_BATCH: usize = 32;
/// How often a terminating group is checked for having emptied.
const GROUP_POLL: Duration = Duration::from_millis(20);
/// How often an exit is polled for on kernels without pidfds (before 5.2).
const REAP_POLL: Duration = Duration::from_millis(5);

/// Where a child's stdin, stdout or stderr comes from or goes.
#[derive(Debug)]
pub enum Stdio {
    Null,
    /// A pipe whose other end the [`Job`] holds.
    Piped,
    Fd(OwnedFd),
}

impl Stdio {
    pub fn null() -> Stdio {
        Stdio::Null
    }

    pub fn piped() -> Stdio {
        Stdio::Piped
    }
}

impl From<OwnedFd> for Stdio {
    fn from(fd: OwnedFd) -> Stdio {
        Stdio::Fd(fd)
    }
}

/// What the shell runs.
#[derive(Debug, Clone, Copy)]
pub enum Script<'a> {
    /// `bash --login -c COMMAND`.
    Command(&'a str),
    /// A script file: executed directly when it is executable (so its `#!`
    /// line counts), otherwise interpreted by the login shell.
    File(&'a Path),
}

/// Where the command starts.
#[derive(Debug, Clone, Copy)]
pub enum Cwd<'a> {
    /// The user's home, or `/` when it does not exist (as login(1) does).
    Home,
    /// Exactly this directory; an error if it cannot be entered.
    Dir(&'a Path),
}

#[derive(Debug)]
pub struct ShellCommand<'a> {
    pub identity: &'a Identity,
    pub script: Script<'a>,
    /// Which startup files a [`Script::Command`] reads (a script file
    /// always runs in a login shell).
    pub profile: Profile,
    pub cwd: Cwd<'a>,
    pub env: &'a BTreeMap<String, String>,
    pub stdin: Stdio,
    pub stdout: Stdio,
    pub stderr: Stdio,
    /// Keep what the command leaves running once its shell exits (the setup
    /// script, whose services are its job; a request that asks). Otherwise
    /// it is killed before the answer.
    pub leave_running: bool,
    /// The limits it asks for (`None` in a field: the agent's default);
    /// `None`: no limit at all (the setup script, the lab author's own).
    pub limits: Option<Limits>,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("{0}")]
    Invalid(String),
    #[error("cwd `{}` does not exist", .0.display())]
    CwdMissing(PathBuf),
    #[error("cwd `{}` is not a directory", .0.display())]
    CwdNotDir(PathBuf),
    #[error("failed to start `{shell} -c …` as user `{user}` in `{cwd}`: {source}")]
    Start {
        shell: String,
        user: String,
        cwd: String,
        source: io::Error,
    },
}

impl SpawnError {
    /// Caller's fault (400) or the guest's (500)?
    pub fn is_client_error(&self) -> bool {
        match self {
            SpawnError::Invalid(_) | SpawnError::CwdMissing(_) | SpawnError::CwdNotDir(_) => true,
            SpawnError::Start { source, .. } => {
                // What the request named does not work here: a cwd that is
                // missing, not a directory, too long or a symlink loop, or
                // values too big for execve.
                matches!(
                    source.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                ) || [
                    Errno::ENOTDIR,
                    Errno::ENAMETOOLONG,
                    Errno::ELOOP,
                    Errno::E2BIG,
                ]
                .iter()
                .any(|&e| source.raw_os_error() == Some(e as i32))
            }
        }
    }
}

/// The commands still running (their sessions, and cgroups where they have
/// one), so a shutting-down agent can kill what is left after its grace
/// period; and the lifecycle of their cgroups: taken for a command in
/// [`spawn`], given back (or discarded) when its [`Job`] ends, which rings
/// [`Jobs::ended`] for the housekeeping that sweeps and refills the pool
/// ([`Jobs::housekeep`]), and killed through [`crate::cgroup::kill`].
#[derive(Debug, Clone, Default)]
pub struct Jobs {
    /// A handful at most (`--max-execs`).
    running: Arc<Mutex<Vec<Running>>>,
    cgroups: Option<Arc<Cgroups>>,
    /// Rung when a command has ended and its cgroup was given back.
    ended: Arc<tokio::sync::Notify>,
    /// `--pids-max`: where no cgroup enforces it, `RLIMIT_NPROC` of a
    /// non-root command.
    pids_default: Option<u64>,
}

/// A running command: its process group, and its cgroup if it has one.
type Running = (i32, Option<PathBuf>);

impl Jobs {
    /// Commands started through these jobs each get their own cgroup.
    pub fn with_cgroups(cgroups: Option<Arc<Cgroups>>, pids_default: Option<u64>) -> Jobs {
        Jobs {
            running: Arc::default(),
            cgroups,
            ended: Arc::default(),
            pids_default,
        }
    }

    pub fn cgroups(&self) -> Option<&Arc<Cgroups>> {
        self.cgroups.as_ref()
    }

    /// Resolves once a command has ended since the last call (its cgroup
    /// is back for the sweep).
    pub async fn ended(&self) {
        self.ended.notified().await
    }

    /// Off every request's path: finished commands' emptied cgroups back
    /// into the pool (sweep first: a recycled cgroup makes the `mkdir`
    /// unneeded), then one made only if the pool is still empty.
    pub fn housekeep(&self) {
        if let Some(cg) = &self.cgroups {
            cg.sweep();
            cg.prepare();
        }
    }

    fn insert(&self, pgid: i32, cgroup: Option<PathBuf>) {
        let mut running = self.lock();
        running.retain(|(p, _)| *p != pgid);
        running.push((pgid, cgroup));
    }

    fn remove(&self, pgid: i32) {
        self.lock().retain(|(p, _)| *p != pgid);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SIGKILL to every running command: its cgroup where it has one, else
    /// its process group.
    pub fn kill_all(&self) -> usize {
        let running: Vec<Running> = self.lock().clone();
        for (pgid, cgroup) in &running {
            let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
            if let Some(path) = cgroup {
                crate::cgroup::kill(path);
            }
        }
        running.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Running>> {
        // A poisoned list of plain data is still a valid list.
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The login shell of this guest: bash when there is one, else sh.
fn login_shell() -> (&'static str, &'static str) {
    for bash in ["/bin/bash", "/usr/bin/bash"] {
        if Path::new(bash).exists() {
            return (bash, "--login");
        }
    }
    ("/bin/sh", "-l")
}

/// A running command in its own session and process group (its pid is
/// the group's id).
#[derive(Debug)]
pub struct Job {
    pid: i32,
    /// Readable once the shell has exited; `None` without pidfd support.
    exit: Option<AsyncFd<OwnedFd>>,
    /// The command's own cgroup; `None`: contained by session instead.
    cgroup: Option<ExecCgroup>,
    /// Whether what the shell leaves running is kept ([`ShellCommand`]).
    leave_running: bool,
    /// Set once reaped.
    status: Option<ExitStatus>,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    pub started: Instant,
    jobs: Jobs,
}

/// How a supervised command ended.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub status: ExitStatus,
    pub timed_out: bool,
    pub duration: Duration,
}

impl Exit {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    pub fn signal(&self) -> Option<i32> {
        self.status.signal()
    }
}

pub fn spawn(cmd: ShellCommand<'_>, jobs: &Jobs) -> Result<Job, SpawnError> {
    let (shell, login_flag) = login_shell();
    let id = cmd.identity;
    let cstr = |what: &str, bytes: &[u8]| {
        CString::new(bytes).map_err(|_| SpawnError::Invalid(format!("{what} contains a NUL byte")))
    };

    let mut argv = vec![cstr("the shell", shell.as_bytes())?];
    match cmd.script {
        Script::Command(command) => {
            let is_bash = login_flag == "--login";
            match cmd.profile {
                Profile::Login => {
                    argv.push(cstr("", login_flag.as_bytes())?);
                    argv.push(c"-c".to_owned());
                    argv.push(cstr("command", command.as_bytes())?);
                }
                Profile::System | Profile::None => {
                    // Not a login shell, so no ~/.bash_profile or ~/.profile;
                    // not interactive, so no ~/.bashrc (and --norc to be sure).
                    if is_bash {
                        argv.extend([c"--noprofile".to_owned(), c"--norc".to_owned()]);
                    }
                    argv.push(c"-c".to_owned());
                    let text = if cmd.profile == Profile::System {
                        // What a login shell reads before the user's own
                        // files: /etc/profile (root's, and what it sources).
                        // On its own line, so the command parses as it would
                        // alone.
                        [SYSTEM_PROFILE.as_bytes(), command.as_bytes()].concat()
                    } else {
                        command.as_bytes().to_vec()
                    };
                    argv.push(cstr("command", &text)?);
                }
            }
        }
        Script::File(path) => {
            argv.push(cstr("", login_flag.as_bytes())?);
            let executable = std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            let path = cstr("the script path", path.as_os_str().as_bytes())?;
            if executable {
                argv.extend([c"-c".to_owned(), c"exec \"$0\"".to_owned(), path]);
            } else {
                argv.push(path);
            }
        }
    }

    // The clean login environment plus the request's `env`, which may
    // override it (later entries win, as with std's Command).
    let mut env: BTreeMap<&[u8], &[u8]> = BTreeMap::new();
    env.insert(b"HOME", id.home.as_os_str().as_bytes());
    env.insert(b"USER", id.name.as_bytes());
    env.insert(b"LOGNAME", id.name.as_bytes());
    env.insert(b"SHELL", id.shell.as_os_str().as_bytes());
    env.insert(b"PATH", id.default_path().as_bytes());
    for (k, v) in cmd.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(SpawnError::Invalid(format!(
                "environment variable {k:?} is not valid: names must be non-empty without `=` or NUL, values without NUL"
            )));
        }
        env.insert(k.as_bytes(), v.as_bytes());
    }
    let envp: Vec<CString> = env
        .into_iter()
        .map(|(k, v)| cstr("the environment", &[k, b"=", v].concat()))
        .collect::<Result<_, _>>()?;

    let (cwd, cwd_is_default) = match cmd.cwd {
        Cwd::Home => (id.home.clone(), true),
        Cwd::Dir(dir) => {
            if !dir.is_absolute() {
                return Err(SpawnError::Invalid(format!(
                    "cwd `{}` is not an absolute path",
                    dir.display()
                )));
            }
            match std::fs::metadata(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(SpawnError::CwdMissing(dir.to_path_buf()));
                }
                Ok(m) if !m.is_dir() => return Err(SpawnError::CwdNotDir(dir.to_path_buf())),
                _ => {}
            }
            (dir.to_path_buf(), false)
        }
    };
    let cwd_c = cstr("cwd", cwd.as_os_str().as_bytes())?;
    let start_error = |source: io::Error| SpawnError::Start {
        shell: Path::new(shell)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| shell.to_owned()),
        user: id.name.clone(),
        cwd: cwd.display().to_string(),
        source,
    };

    let (stdin, stdin_parent) = child_end(cmd.stdin, Direction::In).map_err(start_error)?;
    let (stdout, stdout_parent) = child_end(cmd.stdout, Direction::Out).map_err(start_error)?;
    let (stderr, stderr_parent) = child_end(cmd.stderr, Direction::Out).map_err(start_error)?;

    let groups: Vec<libc::gid_t> = id.groups.iter().map(|g| g.as_raw()).collect();
    let argv_r: Vec<&CStr> = argv.iter().map(CString::as_c_str).collect();
    let envp_r: Vec<&CStr> = envp.iter().map(CString::as_c_str).collect();
    // A cgroup of its own where the agent has a subtree; without one (or
    // when it cannot be made) the command is contained by session instead.
    let resolved = jobs.cgroups.as_ref().map(|cg| cg.resolve(cmd.limits));
    let cgroup = jobs.cgroups.as_ref().zip(resolved).and_then(|(cg, limits)| match cg.take(limits) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "failed to create a cgroup for the command: killing it by session");
            None
        }
    });
    // Where no cgroup counts the command's processes: `RLIMIT_NPROC`, which
    // counts all of the user's (root ignores it: CAP_SYS_RESOURCE).
    let by_cgroup = cgroup.is_some() && jobs.cgroups.as_ref().is_some_and(|c| c.enforces().pids);
    let nproc = match cmd.limits {
        // Within the unit's ceiling where there is a cgroup (resolved).
        Some(l) if !by_cgroup && !id.uid.is_root() => {
            resolved.map_or(l.pids.or(jobs.pids_default), |r| r.pids)
        }
        _ => None,
    };
    let spec = Spec {
        argv: &argv_r,
        envp: &envp_r,
        stdio: [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()],
        ids: id.needs_switch().then_some(spawn::Ids {
            groups: &groups,
            gid: id.gid.as_raw(),
            uid: id.uid.as_raw(),
        }),
        cwd: &cwd_c,
        cwd_fallback: cwd_is_default.then_some(c"/" as &CStr),
        cgroup: cgroup.as_ref().map(ExecCgroup::dir),
        nproc,
        oom_reset: OOM_RESET.load(Ordering::Relaxed),
    };
    let started = Instant::now();
    let spawned = spawn::spawn(&spec);
    let spawned = match spawned {
        Ok(s) => s,
        Err(e) => {
            // Not back into the pool: if the cgroup is why the spawn failed
            // (a root command's background process changed it), the next
            // command would fail the same way.
            if let (Some(cgs), Some(c)) = (&jobs.cgroups, cgroup) {
                cgs.discard(c);
            }
            return Err(start_error(e));
        }
    };
    // The child's ends are its own now.
    drop((stdin, stdout, stderr));
    let exit = match spawned.pidfd {
        // SAFETY: an OwnedFd keeps its one descriptor open until dropped.
        Some(fd) => {
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
        }
        None => None,
    };
    let pid = spawned.pid;
    let cgroup = match cgroup {
        Some(c) if spawned.in_cgroup => Some(c),
        Some(c) => {
            // No clone3 on this kernel: the cgroup went unused.
            if let Some(cgs) = &jobs.cgroups {
                cgs.release(c);
            }
            None
        }
        None => None,
    };
    jobs.insert(pid, cgroup.as_ref().map(|c| c.path().to_path_buf()));
    let mut job = Job {
        pid,
        exit,
        cgroup,
        leave_running: cmd.leave_running,
        status: None,
        stdin: None,
        stdout: None,
        stderr: None,
        started,
        jobs: jobs.clone(),
    };
    // Registering with the reactor cannot fail for a fresh pipe; if it
    // does, the Job (dropped here) kills the command.
    job.stdin = stdin_parent
        .map(pipe::Sender::from_owned_fd)
        .transpose()
        .map_err(start_error)?;
    job.stdout = stdout_parent
        .map(pipe::Receiver::from_owned_fd)
        .transpose()
        .map_err(start_error)?;
    job.stderr = stderr_parent
        .map(pipe::Receiver::from_owned_fd)
        .transpose()
        .map_err(start_error)?;
    Ok(job)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Out,
}

/// The child's end of one stdio stream (above 0–2, close-on-exec), and for
/// a pipe our end.
fn child_end(stdio: Stdio, dir: Direction) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
    let (child, ours) = match stdio {
        Stdio::Null => {
            let flags = if dir == Direction::In {
                nix::fcntl::OFlag::O_RDONLY
            } else {
                nix::fcntl::OFlag::O_WRONLY
            };
            let fd = nix::fcntl::open(
                c"/dev/null",
                flags | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )?;
            (fd, None)
        }
        Stdio::Piped => {
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
            match dir {
                Direction::In => (r, Some(w)),
                Direction::Out => (w, Some(r)),
            }
        }
        Stdio::Fd(fd) => (fd, None),
    };
    Ok((spawn::above_stdio(child)?, ours))
}

impl Job {
    pub fn pgid(&self) -> i32 {
        self.pid
    }

    /// Waits for the shell to exit and reaps it. Cancel-safe.
    pub async fn wait_exit(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.status {
                return Ok(s);
            }
            if let Some(s) = try_reap(self.pid)? {
                self.status = Some(s);
                return Ok(s);
            }
            match &self.exit {
                Some(fd) => fd.readable().await?.clear_ready(),
                None => tokio::time::sleep(REAP_POLL).await,
            }
        }
    }

    /// Waits for the shell to exit. When `timeout` expires the whole group
    /// gets SIGTERM, then SIGKILL once `grace` has passed; processes that
    /// ignore SIGTERM or that the shell left behind are killed as well.
    /// When the shell exits by itself, what it left is killed too unless
    /// the command asked to leave it running.
    pub async fn wait(&mut self, timeout: Duration, grace: Duration) -> io::Result<Exit> {
        match tokio::time::timeout(timeout, self.wait_exit()).await {
            Ok(status) => {
                let status = status?;
                let duration = self.started.elapsed();
                if !self.leave_running {
                    self.kill_leftovers().await;
                }
                Ok(Exit {
                    status,
                    timed_out: false,
                    duration,
                })
            }
            Err(_) => {
                let status = self.terminate(grace).await?;
                Ok(Exit {
                    status,
                    timed_out: true,
                    duration: self.started.elapsed(),
                })
            }
        }
    }

    /// SIGTERM to everything the command started; SIGKILL to whatever is
    /// left once `grace` has passed. Returns when the shell is reaped and
    /// the rest is gone (or, for a process stuck in the kernel, after
    /// [`KILL_SETTLE`] more).
    pub async fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        let deadline = tokio::time::Instant::now() + grace;
        self.signal_all(Signal::SIGTERM).await;
        loop {
            if self.status.is_none() {
                tokio::select! {
                    s = self.wait_exit() => { s?; }
                    _ = tokio::time::sleep(GROUP_POLL) => {}
                }
            } else {
                tokio::time::sleep(GROUP_POLL).await;
            }
            if self.status.is_some() && !self.anything_left().await {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                self.signal_all(Signal::SIGKILL).await;
                break;
            }
        }
        let status = self.wait_exit().await?;
        let settle = tokio::time::Instant::now() + KILL_SETTLE;
        while tokio::time::Instant::now() < settle && self.anything_left().await {
            tokio::time::sleep(GROUP_POLL).await;
        }
        Ok(status)
    }

    /// `sig` to the command's cgroup, or without one to its session, its
    /// process group and their descendants (found by walking `/proc`, see
    /// [`session_members`]).
    async fn signal_all(&self, sig: Signal) {
        match &self.cgroup {
            Some(cg) if sig == Signal::SIGKILL => cg.kill(),
            Some(cg) => cg.signal(sig),
            None => {
                // Find them all before signalling any: once the shell dies,
                // what it started in a new session is re-parented to init
                // and no longer linked to the command.
                let sid = self.pid;
                let members = session_members(sid).await;
                let reached = members.len();
                for pid in members {
                    let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
                }
                let _ = killpg(Pid::from_raw(self.pid), sig);
                if sig == Signal::SIGTERM {
                    // Said once per termination, so an operator knows what
                    // containment this command had.
                    tracing::info!(
                        session = sid,
                        processes = reached as u64,
                        "terminating a command by session (no cgroup): what left its session and lost its parent (setsid -f, a double fork) is out of reach"
                    );
                }
            }
        }
    }

    /// Whether anything the command started is still alive (zombies aside).
    async fn anything_left(&self) -> bool {
        match &self.cgroup {
            Some(cg) => cg.populated(),
            None => !session_members(self.pid).await.is_empty(),
        }
    }

    /// Whether the command runs in a cgroup of its own.
    pub fn contained_by_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    /// SIGKILL, no grace, to what the exited shell left: the command is
    /// over, and what it started in the background (a fork bomb, a
    /// spinner, a forgotten server) must not outlive it and take the VM.
    /// With a cgroup, one `cgroup.events` read when nothing was left (the
    /// common case); without one, a `/proc` walk, which misses what left
    /// the session and lost its parent (see [`session_members`]).
    async fn kill_leftovers(&mut self) {
        if let Some(cg) = &self.cgroup {
            if !cg.populated() {
                return;
            }
            cg.kill();
        } else {
            let left = session_members(self.pid).await;
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
            if left.is_empty() {
                return;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        let settle = tokio::time::Instant::now() + KILL_SETTLE;
        while tokio::time::Instant::now() < settle && self.anything_left().await {
            tokio::time::sleep(GROUP_POLL).await;
        }
    }

    /// Which limits the command hit, with the limits its cgroup had;
    /// `None` without a cgroup (then nothing counts them).
    pub fn limits_hit(&self) -> Option<(Hit, Limits)> {
        let cg = self.cgroup.as_ref()?;
        Some((cg.limits_hit(), cg.limits()))
    }
}

/// Set when the agent's own `oom_score_adj` is not 0 (lowered by
/// [`protect_from_oom`], or inherited): every command's child then sets its
/// own back to 0 before exec. Not unconditionally: three system calls per
/// exec that a guest where the agent runs at 0 does not need.
static OOM_RESET: AtomicBool = AtomicBool::new(false);

/// The agent's own `oom_score_adj`: -900. When the guest runs out of
/// memory the kernel kills the process with the highest badness (its share
/// of memory, shifted by this value in thousandths of the total): at -900
/// the agent, a few MiB, is never picked while a command holds more than
/// ~10 % less of the guest than it would need to outrank it — the hog goes
/// first. Not -1000 (never killed): an agent that itself leaked without
/// bound must still be killable, and systemd restarts it. Its children get
/// 0 back (in [`crate::spawn`]), or they would inherit the protection.
///
/// The agent is the one owner (not the unit's `OOMScoreAdjust=`): it runs
/// outside systemd too (`labctl try`, tests), and the lowering is only safe
/// paired with the reset that only the agent's spawn can do.
pub const AGENT_OOM_SCORE_ADJ: i32 = -900;

/// Lowers the agent's own `oom_score_adj`. Needs `CAP_SYS_RESOURCE`
/// (root); otherwise the error says what is not protected. Either way the
/// commands start at 0 if the agent is not at 0.
pub fn protect_from_oom() -> io::Result<()> {
    const FILE: &str = "/proc/self/oom_score_adj";
    let lowered = std::fs::write(FILE, AGENT_OOM_SCORE_ADJ.to_string());
    let own = std::fs::read_to_string(FILE).unwrap_or_default();
    OOM_RESET.store(own.trim() != "0", Ordering::Relaxed);
    lowered
}

/// The exit status of `pid` if it has exited (and reaps it).
fn try_reap(pid: i32) -> io::Result<Option<ExitStatus>> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child, WNOHANG.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 => return Ok(None),
            p if p == pid => return Ok(Some(ExitStatus::from_raw(status))),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// The live processes of session `sid` (whose leader is the shell we
/// started), of process group `sid`, and every descendant of those — which
/// catches `setsid`, `setpgid` and `timeout(1)` children as long as their
/// parent lives. Zombies do not count: their reaping is up to their parent
/// or init.
///
/// It reads all of `/proc` — with 3 000 processes a good part of a second
/// when done in one go, during which the single-threaded agent answered
/// nothing. So it yields to the runtime every [`WALK_BATCH`] processes
/// (each `stat` read is a few µs), rather than taking a thread pool into
/// a binary whose size every lab VM pays for.
pub async fn session_members(sid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    // (pid, ppid, in the session or group, alive). Vectors and sorting
    // rather than hash maps: the same work, less code in the binary.
    let mut procs: Vec<(i32, i32, bool, bool)> = Vec::new();
    for (n, entry) in dir.flatten().enumerate() {
        if n % WALK_BATCH == WALK_BATCH - 1 {
            tokio::task::yield_now().await;
        }
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp session …`; comm may hold spaces and parens.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().take(4).collect();
        if f.len() < 4 {
            continue;
        }
        let num = |s: &str| s.parse::<i32>().unwrap_or(-1);
        let (ppid, pgrp, session) = (num(f[1]), num(f[2]), num(f[3]));
        procs.push((pid, ppid, session == sid || pgrp == sid, f[0] != "Z"));
    }
    // Sorted by parent, so a process's children are one contiguous run.
    procs.sort_unstable_by_key(|p| p.1);
    let mut found: Vec<i32> = vec![sid];
    found.extend(procs.iter().filter(|p| p.2).map(|p| p.0));
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        let start = procs.partition_point(|p| p.1 < parent);
        for p in procs[start..].iter().take_while(|p| p.1 == parent) {
            if !found.contains(&p.0) {
                found.push(p.0);
            }
        }
        i += 1;
    }
    let me = std::process::id() as i32;
    found.sort_unstable();
    found.dedup();
    found.retain(|pid| *pid != me && procs.iter().any(|p| p.0 == *pid && p.3));
    found
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.pid <= 0 {
            return;
        }
        if self.status.is_some() {
            self.jobs.remove(self.pid);
            // Ended (or was terminated): its cgroup goes now, or once what
            // it left in the background has ended.
            if let (Some(cgs), Some(cg)) = (self.jobs.cgroups.clone(), self.cgroup.take()) {
                cgs.release(cg);
            }
            // The housekeeping returns it to the pool (or makes a new one)
            // while the answer is sent.
            self.jobs.ended.notify_one();
            return;
        }
        // Dropped before the shell was reaped: the request was abandoned
        // (client gone, agent stopping). Everything the command started
        // gets what a timeout gives it — SIGTERM, SIGKILL after the grace —
        // in the background, and the shell is reaped so it leaves no zombie.
        // It stays in the running list (for the agent's shutdown) until
        // then: this second Job's drop takes it out.
        let mut job = Job {
            pid: self.pid,
            exit: self.exit.take(),
            cgroup: self.cgroup.take(),
            leave_running: false,
            status: None,
            stdin: None,
            stdout: None,
            stderr: None,
            started: self.started,
            jobs: self.jobs.clone(),
        };
        self.pid = 0;
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if job.terminate(ABANDON_GRACE).await.is_err() {
                        // Not ours to reap after all: do not try again.
                        job.status = Some(ExitStatus::from_raw(libc::SIGKILL));
                    }
                    drop(job);
                });
            }
            // No runtime (the process is exiting): no grace either.
            Err(_) => {
                let _ = killpg(Pid::from_raw(job.pid), Signal::SIGKILL);
                if let Some(cg) = &job.cgroup {
                    cg.kill();
                }
                let mut status = 0;
                // SAFETY: blocking waitpid on our own, killed child.
                unsafe { libc::waitpid(job.pid, &mut status, 0) };
                job.status = Some(ExitStatus::from_raw(status));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn run(
        command: &str,
        user: &str,
        cwd: Cwd<'_>,
    ) -> Result<(ExitStatus, String, String), SpawnError> {
        let id = Identity::lookup(user).unwrap();
        let env = BTreeMap::new();
        let mut job = spawn(
            ShellCommand {
                identity: &id,
                script: Script::Command(command),
                profile: Profile::Login,
                cwd,
                env: &env,
                stdin: Stdio::null(),
                stdout: Stdio::piped(),
                stderr: Stdio::piped(),
                leave_running: false,
                limits: Some(Limits::default()),
            },
            &Jobs::default(),
        )?;
        let (mut out, mut err) = (String::new(), String::new());
        let mut so = job.stdout.take().unwrap();
        let mut se = job.stderr.take().unwrap();
        let (a, b) = tokio::join!(so.read_to_string(&mut out), se.read_to_string(&mut err));
        a.unwrap();
        b.unwrap();
        Ok((job.wait_exit().await.unwrap(), out, err))
    }

    /// What std's Command guarantees a child, the vfork path must too: an
    /// empty signal mask and SIGPIPE at its default.
    #[tokio::test]
    async fn the_child_starts_clean() {
        let (status, out, err) = run(
            "grep -E '^SigBlk' /proc/self/status; yes | head -c 1 >/dev/null",
            "root",
            Cwd::Home,
        )
        .await
        .unwrap();
        assert!(status.success(), "{err}");
        assert_eq!(out, "SigBlk:\t0000000000000000\n");
        // `yes` died of SIGPIPE quietly instead of reporting EPIPE.
        assert_eq!(err, "");
    }

    #[tokio::test]
    async fn switches_user_and_falls_back_to_root_dir() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let Ok(nobody) = Identity::lookup("nobody") else {
            return;
        };
        let (status, out, _) = run("id -u; id -G; pwd; ps -o sid= -p $$", "nobody", Cwd::Home)
            .await
            .unwrap();
        assert!(status.success());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], nobody.uid.to_string());
        assert_eq!(lines[1], nobody.gid.to_string());
        // nobody's home (/nonexistent) cannot be entered: `/`, as login(1).
        if !nobody.home.is_dir() {
            assert_eq!(lines[2], "/");
        }
        let err = run("true", "nobody", Cwd::Dir(Path::new("/root")))
            .await
            .unwrap_err();
        assert!(err.is_client_error(), "{err}");
        assert!(err.to_string().contains("Permission denied"), "{err}");
    }
}
