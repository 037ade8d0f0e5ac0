//! A started command's life: waiting for it with a timeout, terminating
//! everything it started (its cgroup, or its session), killing what it
//! leaves, and what happens when its request is abandoned ([`Job`]'s
//! `Drop`).

use super::session::session_members;
use super::{ABANDON_GRACE, GROUP_POLL, Jobs, KILL_SETTLE, REAP_POLL};
use crate::process::cgroup::{ExecCgroup, Hit, Limits};
use nix::libc;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// A running command in its own session and process group (its pid is
/// the group's id).
#[derive(Debug)]
pub struct Job {
    pub(super) pid: i32,
    /// Readable once the shell has exited; `None` without pidfd support.
    pub(super) exit: Option<AsyncFd<OwnedFd>>,
    /// The command's own cgroup; `None`: contained by session instead.
    pub(super) cgroup: Option<ExecCgroup>,
    /// Whether what the shell leaves running is kept ([`ShellCommand`]).
    pub(super) leave_running: bool,
    /// Set once reaped.
    pub(super) status: Option<ExitStatus>,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    pub started: Instant,
    /// When it started, as [`super::strays::now_ticks`] counts.
    pub(super) since: Option<u64>,
    pub(super) jobs: Jobs,
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

impl Job {
    /// Waits for the shell to exit and reaps it. Cancel-safe.
    pub async fn wait_exit(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.status {
                return Ok(s);
            }
            // With a pidfd, `waitpid` only once it says the shell exited
            // (a pidfd registered after the exit is readable at once): no
            // system call right after the spawn, while the new shell,
            // often on this same CPU, waits for the agent to sleep.
            let ready = match &self.exit {
                Some(fd) => Some(fd.readable().await?),
                None => None,
            };
            if let Some(s) = try_reap(self.pid)? {
                self.status = Some(s);
                return Ok(s);
            }
            match ready {
                Some(mut r) => r.clear_ready(),
                None => tokio::time::sleep(REAP_POLL).await,
            }
        }
    }

    /// The reaped shell's pidfd, for the caller to close once the answer
    /// is out (leaving epoll and closing are two system calls that need
    /// not come before it). `None` before the shell is reaped.
    pub fn take_pidfd(&mut self) -> Option<AsyncFd<OwnedFd>> {
        // Not `status.and(exit.take())`: that takes it whatever the status.
        if self.status.is_some() {
            self.exit.take()
        } else {
            None
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
        self.settle().await;
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
            None => !self.none_adopted() && !session_members(self.pid).await.is_empty(),
        }
    }

    /// Waits (at most [`KILL_SETTLE`]) for what was killed to be gone,
    /// reaping what comes to the agent as it dies: an unreaped zombie still
    /// counts in the unit's `TasksMax`, so the answer comes once the pids
    /// of a killed fork bomb are free for the next command.
    async fn settle(&self) {
        let settle = tokio::time::Instant::now() + KILL_SETTLE;
        while tokio::time::Instant::now() < settle && self.anything_left().await {
            self.jobs.reap_strays();
            tokio::time::sleep(GROUP_POLL).await;
        }
        self.jobs.reap_strays();
    }

    /// Whether the agent's adopted processes show nothing of this command
    /// alive (see [`super::strays`]); false: perhaps, walk `/proc`.
    fn none_adopted(&self) -> bool {
        // The other commands' shells; this one's is reaped already.
        let mut others = self.jobs.running_pids();
        others.retain(|p| *p != self.pid);
        self.since
            .is_some_and(|t| super::strays::none_since(t, &others))
    }

    /// SIGKILL, no grace, to what the exited shell left: the command is
    /// over, and what it started in the background (a fork bomb, a
    /// spinner, a forgotten server) must not outlive it and take the VM.
    /// When nothing was left (the common case), one read of the agent's
    /// adopted children says so ([`super::strays`]: whatever the command
    /// left is one of them or below one), with a cgroup or without. Else,
    /// with a cgroup, its process list decides, and `cgroup.kill` reaches
    /// all of it; without one, a `/proc` walk, which misses what left the
    /// session and lost its parent (see [`session_members`]).
    ///
    /// Why not the cgroup first: with its holder in it, "anything but the
    /// holder?" is two cgroupfs reads and a poll (~15 µs cold, measured
    /// on the bench machine) where the children list is one (~3 µs).
    async fn kill_leftovers(&mut self) {
        if let Some(cg) = &self.cgroup {
            if self.none_adopted() || !cg.populated() {
                // Nothing can enter it now but what root moves there: the
                // sweep need not ask again.
                if let Some(cg) = &mut self.cgroup {
                    cg.settled = true;
                }
                return;
            }
            cg.kill();
        } else {
            if self.none_adopted() {
                return;
            }
            let left = session_members(self.pid).await;
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
            if left.is_empty() {
                return;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        self.settle().await;
    }

    /// Which limits the command hit, with the limits its cgroup had;
    /// `None` without a cgroup (then nothing counts them).
    pub fn limits_hit(&self) -> Option<(Hit, Limits)> {
        let cg = self.cgroup.as_ref()?;
        Some((cg.limits_hit(), cg.limits()))
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.pid <= 0 {
            return;
        }
        if self.status.is_some() {
            // Ended (or was terminated): its cgroup goes now, or once what
            // it left in the background has ended.
            self.jobs.finished(self.pid, self.cgroup.take());
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
            since: self.since,
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
