//! Spawning a shell as a user, in its own session (and cgroup, where the
//! agent has a subtree: [`crate::process::cgroup`]), and supervising it: on timeout
//! or when its request is abandoned, SIGTERM to everything it started — its
//! cgroup, or without one its session, process group and their descendants
//! — then SIGKILL after a grace.
//!
//! Both `/v1/exec` and the setup script run through here, so they share one
//! notion of "login shell", "clean environment" and "kill everything".
//!
//! # Layout
//! - this file: what a command is ([`ShellCommand`]), the running commands
//!   and their cgroups' lifecycle ([`Jobs`]), and [`spawn`];
//! - `command`: the shell's argv, environment and working directory;
//! - [`job`]: a started command's life ([`Job`]): wait, timeout, terminate,
//!   leftovers, abandonment;
//! - [`session`]: the `/proc` walk for commands without a cgroup;
//! - [`strays`]: the agent as the subreaper of what commands leave, which
//!   spares that walk when nothing was left;
//! - [`oom`]: the agent's own `oom_score_adj` and its children's reset.

pub mod capture;
pub mod cgroup;
mod command;
pub mod identity;
pub mod job;
pub mod oom;
pub mod session;
pub mod spawn;
pub mod strays;

pub use crate::process::cgroup::Limits;
pub use job::{Exit, Job};
pub use oom::protect_from_oom;

pub use command::load_lab_env;
use command::{argv, cstr, envp, working_dir};
use oom::OOM_RESET;

use crate::process::cgroup::{Cgroups, ExecCgroup};
use crate::process::identity::Identity;
use lab_agent_proto::Profile;
use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use spawn::Spec;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
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
/// period; and the one owner of their cgroups' lifecycle: taken for a
/// command in `spawn`, discarded when the spawn fails in it, released
/// when its `Job` ends (which rings [`Jobs::ended`] for the housekeeping
/// that sweeps and refills the pool, [`Jobs::housekeep`]), and killed
/// through `crate::process::cgroup::kill`. Nothing else calls the pool
/// (`Cgroups`); `exec.rs` sees only the `Job`.
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

    /// A cgroup of its own for a command asking for `ask`, and the limits
    /// it gets (within the defaults and the unit's ceilings); no cgroup
    /// without a subtree, or when one cannot be made: the command is then
    /// contained by session instead.
    fn take_cgroup(&self, ask: Option<Limits>) -> (Option<ExecCgroup>, Option<Limits>) {
        let Some(cgs) = &self.cgroups else {
            return (None, None);
        };
        let limits = cgs.resolve(ask);
        match cgs.take(limits) {
            Ok(c) => (Some(c), Some(limits)),
            Err(e) => {
                tracing::warn!(error = %e, "failed to create a cgroup for the command: killing it by session");
                (None, Some(limits))
            }
        }
    }

    /// Whether a command's cgroup counts its processes (`pids.max`).
    fn cgroups_count_pids(&self) -> bool {
        self.cgroups.as_ref().is_some_and(|c| c.enforces().pids)
    }

    /// A cgroup the spawn failed in: removed, not back into the pool (if
    /// the cgroup is why, the next command would fail the same way).
    fn discard_cgroup(&self, cg: ExecCgroup) {
        if let Some(cgs) = &self.cgroups {
            cgs.discard(cg);
        }
    }

    /// A cgroup no process is meant to run in any more: back into the pool
    /// at the next sweep once it is empty.
    fn release_cgroup(&self, cg: ExecCgroup) {
        if let Some(cgs) = &self.cgroups {
            cgs.release(cg);
        }
    }

    /// The command `pgid` has ended: out of the running list, its cgroup
    /// released, and the housekeeping woken to return it to the pool (or
    /// make a new one) while the answer is sent.
    fn finished(&self, pgid: i32, cgroup: Option<ExecCgroup>) {
        self.remove(pgid);
        if let Some(cg) = cgroup {
            self.release_cgroup(cg);
        }
        self.ended.notify_one();
    }

    /// Resolves once a command has ended since the last call (its cgroup
    /// is back for the sweep).
    pub async fn ended(&self) {
        self.ended.notified().await
    }

    /// Off every request's path: finished commands' emptied cgroups back
    /// into the pool (sweep first: a recycled cgroup makes the `mkdir`
    /// unneeded), then one made only if the pool is still empty.
    ///
    /// True while a killed command's cgroup is still emptying (a fork bomb
    /// dies over seconds in a slow guest): its dying processes come to the
    /// agent as zombies, which hold pids until reaped, so the caller comes
    /// back soon rather than in 10 s.
    pub fn housekeep(&self) -> bool {
        self.reap_strays();
        match &self.cgroups {
            Some(cg) => {
                let dying = cg.sweep();
                cg.prepare();
                dying
            }
            None => false,
        }
    }

    /// Reaps what commands left that has exited ([`strays::reap`]).
    fn reap_strays(&self) {
        strays::reap(&self.running_pids());
    }

    fn insert(&self, pgid: i32, cgroup: Option<PathBuf>) {
        let mut running = self.lock();
        running.retain(|(p, _)| *p != pgid);
        running.push((pgid, cgroup));
    }

    /// The agent's children that are no command's leftovers: the running
    /// commands' shells (also their process groups) and the pooled
    /// cgroups' holders (not reaped by the housekeeping when they die, so
    /// that a holder's pid is never another process's while it is listed).
    fn running_pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self.lock().iter().map(|(p, _)| *p).collect();
        cgroup::holder_pids(&mut pids);
        pids
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
                crate::process::cgroup::kill(path);
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
/// Bash, once found, is remembered (a `stat` less on every exec): were it
/// removed later, the command fails to start and says so. Its absence is
/// not remembered, so a lab that installs bash gets it from then on.
fn login_shell() -> (&'static str, &'static str) {
    static BASH: OnceLock<&'static str> = OnceLock::new();
    if let Some(bash) = BASH.get() {
        return (bash, "--login");
    }
    for bash in ["/bin/bash", "/usr/bin/bash"] {
        if Path::new(bash).exists() {
            return (BASH.get_or_init(|| bash), "--login");
        }
    }
    ("/bin/sh", "-l")
}

pub fn spawn(cmd: ShellCommand<'_>, jobs: &Jobs) -> Result<Job, SpawnError> {
    let (shell, login_flag) = login_shell();
    let id = cmd.identity;

    let argv = argv(&cmd.script, cmd.profile, shell, login_flag)?;
    let envp = envp(id, cmd.env)?;
    let (cwd, cwd_is_default) = working_dir(&cmd.cwd, id)?;
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
    let argv_r = argv.as_cstrs();
    let envp_r = envp.as_cstrs();
    // A cgroup of its own where the agent has a subtree; without one (or
    // when it cannot be made) the command is contained by session instead.
    let (cgroup, resolved) = jobs.take_cgroup(cmd.limits);
    // Where no cgroup counts the command's processes: `RLIMIT_NPROC`, which
    // counts all of the user's (root ignores it: CAP_SYS_RESOURCE).
    let by_cgroup = cgroup.is_some() && jobs.cgroups_count_pids();
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
    // Before the clone: everything the command starts starts after it.
    let since = strays::now_ticks();
    let spawned = match spawn::spawn(&spec) {
        // Out of pids: perhaps zombies a killed command left the agent
        // hold them. Reaped, they are free for one more try.
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
            jobs.reap_strays();
            spawn::spawn(&spec)
        }
        spawned => spawned,
    };
    let spawned = match spawned {
        Ok(s) => s,
        Err(e) => {
            // Not back into the pool: if the cgroup is why the spawn failed
            // (a root command's background process changed it), the next
            // command would fail the same way.
            if let Some(c) = cgroup {
                jobs.discard_cgroup(c);
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
            jobs.release_cgroup(c);
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
        since,
        jobs: jobs.clone(),
    };
    // Registering with the reactor cannot fail for a fresh pipe; if it
    // does, the Job (dropped here) kills the command.
    job.stdin = stdin_parent
        .map(pipe::Sender::from_owned_fd_unchecked)
        .transpose()
        .map_err(start_error)?;
    job.stdout = stdout_parent
        .map(pipe::Receiver::from_owned_fd_unchecked)
        .transpose()
        .map_err(start_error)?;
    job.stderr = stderr_parent
        .map(pipe::Receiver::from_owned_fd_unchecked)
        .transpose()
        .map_err(start_error)?;
    Ok(job)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Out,
}

/// The child's end of one stdio stream: ours to close once the child has
/// it, or the agent's own `/dev/null`.
#[derive(Debug)]
enum ChildFd {
    Owned(OwnedFd),
    Null(BorrowedFd<'static>),
}

impl AsFd for ChildFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            ChildFd::Owned(fd) => fd.as_fd(),
            ChildFd::Null(fd) => *fd,
        }
    }
}

/// `/dev/null` for reading (`In`) or writing, opened once (above 0–2,
/// close-on-exec) and shared by every command, as each one's `open` and
/// `close` were two system calls of the path before its `clone3`. Sharing
/// one open file is harmless here: `/dev/null` has no offset to share, and
/// a flag a command sets on it (`O_NONBLOCK`) changes nothing it does.
fn dev_null(dir: Direction) -> io::Result<BorrowedFd<'static>> {
    static READ: OnceLock<OwnedFd> = OnceLock::new();
    static WRITE: OnceLock<OwnedFd> = OnceLock::new();
    let (cell, flags) = match dir {
        Direction::In => (&READ, nix::fcntl::OFlag::O_RDONLY),
        Direction::Out => (&WRITE, nix::fcntl::OFlag::O_WRONLY),
    };
    if let Some(fd) = cell.get() {
        return Ok(fd.as_fd());
    }
    let fd = spawn::above_stdio(nix::fcntl::open(
        c"/dev/null",
        flags | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?)?;
    // Two first execs at once (the runtime has one thread, but tests
    // spawn from several): the loser's descriptor is closed.
    Ok(cell.get_or_init(|| fd).as_fd())
}

/// The child's end of one stdio stream (above 0–2, close-on-exec), and for
/// a pipe our end.
fn child_end(stdio: Stdio, dir: Direction) -> io::Result<(ChildFd, Option<OwnedFd>)> {
    let (child, ours) = match stdio {
        Stdio::Null => return Ok((ChildFd::Null(dev_null(dir)?), None)),
        Stdio::Piped => {
            // Made non-blocking, as tokio wants our end, and the child's
            // end made blocking again, as a command expects its stdio: one
            // `fcntl` instead of tokio's `fstat` and two for our end.
            use nix::fcntl::{FcntlArg, OFlag, fcntl};
            let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
            let (child, ours) = match dir {
                Direction::In => (r, w),
                Direction::Out => (w, r),
            };
            fcntl(&child, FcntlArg::F_SETFL(OFlag::empty()))?;
            (child, Some(ours))
        }
        Stdio::Fd(fd) => (fd, None),
    };
    Ok((ChildFd::Owned(spawn::above_stdio(child)?), ours))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::ExitStatus;
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

    /// A command's null stdin is the agent's one read-only `/dev/null`
    /// (nothing to read, a write to it refused as on any read-only stdin),
    /// its null output the one write-only one: no descriptor per command.
    #[tokio::test]
    async fn null_stdio_is_one_shared_dev_null_each_way() {
        use std::os::fd::AsRawFd;
        let (status, out, err) = run("cat; echo x >&0 || echo refused", "root", Cwd::Home)
            .await
            .unwrap();
        assert!(status.success(), "{err}");
        assert_eq!(out, "refused\n");
        assert!(err.contains("Bad file descriptor"), "{err}");
        let fds = |dir| dev_null(dir).unwrap().as_raw_fd();
        let (r, w) = (fds(Direction::In), fds(Direction::Out));
        run("true", "root", Cwd::Home).await.unwrap();
        assert_eq!((fds(Direction::In), fds(Direction::Out)), (r, w));
        assert!(r > 2 && w > 2 && r != w);
        let mode = |fd| unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_ACCMODE;
        assert_eq!((mode(r), mode(w)), (libc::O_RDONLY, libc::O_WRONLY));
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
