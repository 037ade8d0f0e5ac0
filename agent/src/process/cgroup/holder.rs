//! A pooled cgroup's holder: one idle process of the agent's (`lab-agent
//! hold-cgroup`) kept in the cgroup between commands, so that the cgroup
//! never empties.
//!
//! Why: an exec cgroup that fills and empties once per command costs the
//! kernel work on the command's path that a cgroup already in use does not.
//! Each populated ↔ empty change queues a kernfs notification (a kworker
//! that, on a 2-vCPU lab VM, runs where the shell or the agent would), and
//! the first process in an empty cgroup gets a css_set built for it (freed
//! again when the cgroup empties). Measured on the bench machine
//! (`bench/run.sh --diagnostic`, BENCHMARKS.md): `bash --login -c true`
//! started into an empty cgroup costs 1.008–1.040 × the same start without
//! one, into a cgroup holding an idle process 0.995–1.013 ×; the agent
//! with holders ÷ without, both with a per-exec cgroup, 0.979–0.996. With
//! one process already there, a command's start and end change nothing in
//! the cgroup's state but its process list.
//!
//! What it changes: "is anything of the command left?" is no longer
//! `cgroup.events`' `populated` but "anything in `cgroup.procs` besides
//! the holder, or any cgroup below" ([`super::ExecCgroup::populated`]),
//! asked only when the agent's adopted children do not already say
//! "nothing" (`crate::process::strays`, which sets the holders aside:
//! [`holder_pids`]); `pids.max` is one more than the command's limit (the
//! holder is a task of the cgroup). The holder is the agent's child: it
//! dies with the agent (`PR_SET_PDEATHSIG`). A cgroup whose holder was
//! killed (by a root command, or the OOM killer) is read as before and gets
//! a new holder when recycled; one killed whole (`cgroup.kill` on
//! leftovers) is removed ([`super::ExecCgroup::kill`]). It is the agent's own
//! binary, exec'd (no copy of the agent's memory, which a fork would keep
//! page by page as the agent writes), idle in `pause`, holding no file.

use nix::libc;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

/// The holders' pids, for the leftovers' check
/// ([`crate::process::strays`]): children of the agent's that no command
/// left. The housekeeping never reaps a listed pid, so while listed it is
/// the holder's (alive, or its zombie); it leaves the list when its
/// [`Holder`] is dropped.
static PIDS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

/// Appends the holders' pids to `to`.
pub fn holder_pids(to: &mut Vec<libc::pid_t>) {
    to.extend(PIDS.lock().unwrap_or_else(|e| e.into_inner()).iter());
}

/// The hidden command that makes `lab-agent` a holder.
pub const HOLD_COMMAND: &str = "hold-cgroup";

#[derive(Debug)]
pub struct Holder {
    pid: libc::pid_t,
    pidfd: OwnedFd,
}

impl Holder {
    /// Starts a holder in the cgroup `dir`. An error: none (a kernel
    /// without `clone3` or pidfds, or the spawn failed); the cgroup works
    /// as well without one, at the cost above.
    pub fn start(dir: BorrowedFd<'_>) -> io::Result<Holder> {
        use super::super::{Direction, dev_null, spawn};
        let parent = std::ffi::CString::new(std::process::id().to_string())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let hold = std::ffi::CString::new(HOLD_COMMAND)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let argv = [c"/proc/self/exe", hold.as_c_str(), parent.as_c_str()];
        let null_in = dev_null(Direction::In)?;
        let null_out = dev_null(Direction::Out)?;
        let spawned = spawn::spawn(&spawn::Spec {
            argv: &argv,
            envp: &[],
            stdio: [null_in, null_out, null_out],
            ids: None,
            cwd: c"/",
            cwd_fallback: None,
            cgroup: Some(dir),
            nproc: None,
            // Keeps the agent's low OOM score: in its cgroup, the OOM
            // killer picks a command's process first.
            oom_reset: false,
        })?;
        let pid = spawned.pid;
        let Some(pidfd) = spawned.pidfd else {
            kill_reap_pid(pid);
            return Err(io::Error::other("no pidfd for the cgroup holder"));
        };
        PIDS.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
        let holder = Holder { pid, pidfd };
        if !spawned.in_cgroup {
            return Err(io::Error::other(
                "the cgroup holder did not start in the cgroup",
            ));
        }
        Ok(holder)
    }

    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Whether it has not exited. A pidfd is readable once its process
    /// has exited, before its pid can be reused: a pid read from
    /// `cgroup.procs` before this says true was the holder's.
    pub fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 0
    }
}

impl Drop for Holder {
    /// Kills it and waits (briefly) until it has left its cgroup, so that
    /// the cgroup can be removed right after.
    fn drop(&mut self) {
        // SAFETY: a pidfd we own; SIGKILL, no siginfo.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd. A killed idle process exits within
        // microseconds; the bound is for a frozen cgroup's.
        unsafe { libc::poll(&mut p, 1, 200) };
        // Reaped through the pidfd. Left unreaped (not dead yet: a frozen
        // cgroup's; a kernel before 5.4), it is a stray like any other once
        // off the list, reaped by the housekeeping.
        // SAFETY: a zeroed siginfo is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: P_PIDFD (Linux 5.4+) on our pidfd, WNOHANG.
        unsafe {
            libc::waitid(
                libc::P_PIDFD,
                self.pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG,
            )
        };
        PIDS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != self.pid);
    }
}

/// A holder without a pidfd (a kernel before 5.2): killed and reaped at
/// once, while its pid is still surely its own (it is our unreaped child).
fn kill_reap_pid(pid: libc::pid_t) {
    // SAFETY: our own child, not yet reaped.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

/// The holder's life (`lab-agent hold-cgroup PARENT`): die with the agent
/// that started it, else wait for a signal forever.
pub fn hold(parent: u32) -> ! {
    // SAFETY: plain prctl and getppid.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // Started by an agent that died before the line above: gone too.
        if u32::try_from(libc::getppid()).ok() != Some(parent) {
            libc::_exit(0);
        }
        loop {
            libc::pause();
        }
    }
}
