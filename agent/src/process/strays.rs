//! What commands leave behind comes to the agent: `lab-agent serve` is a
//! child subreaper (`PR_SET_CHILD_SUBREAPER`), so a process whose parent
//! exits is re-parented to the agent, not to init.
//!
//! That turns "did this command leave anything running?" into one read of
//! the agent's own children (`/proc/PID/task/PID/children`, a few µs)
//! instead of a walk of all of `/proc` after every exec that has no cgroup
//! ([`super::session`]; ~50 µs with 70 processes, more with more). Once a
//! command's shell is reaped, each process it started either is one of the
//! agent's children or hangs below one — every ancestor between it and the
//! agent that exited handed it up — and each of those was started after the
//! shell was. So when no child of the agent other than the running
//! commands' shells started at or after that moment, nothing of the
//! command is alive. Otherwise (something it left, a concurrent command's
//! orphan, a kernel without the children file) the walk decides, as before.
//!
//! Adopted processes are the agent's to reap: [`reap`], while a kill of
//! what a command left settles (before its answer), from the housekeeping
//! after every command's end and every 10 s (every 100 ms and more while
//! a killed cgroup still empties), and before a start that failed for
//! want of pids is tried again. A zombie holds no memory, but a pid: the
//! unit's `TasksMax` counts it until it is reaped.

use nix::libc::{self, c_int};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the agent is a subreaper: only then does the children list
/// hold everything a command left.
static ADOPTING: AtomicBool = AtomicBool::new(false);

/// Makes the agent the subreaper of everything its commands start. False
/// when the kernel refuses (then every leftovers check walks `/proc`).
pub fn adopt() -> bool {
    // SAFETY: prctl with integer arguments only.
    let ok = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0;
    ADOPTING.store(ok, Ordering::Relaxed);
    ok
}

/// Now, in the unit of a process's start time (`/proc/PID/stat` field 22:
/// clock ticks since boot, suspend included). Taken before a command is
/// started, every process it starts has a start time at or after it.
pub fn now_ticks() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; sysconf has no preconditions.
    let (ok, hz) = unsafe {
        (
            libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) == 0,
            libc::sysconf(libc::_SC_CLK_TCK),
        )
    };
    (ok && hz > 0 && ts.tv_sec >= 0).then(|| {
        let hz = hz as u64;
        ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000
    })
}

/// Whether nothing that started at or after `since` (from [`now_ticks`])
/// is alive below the agent, other than the shells in `running`. False
/// means "perhaps": ask the `/proc` walk. Reaps the strays that have
/// exited on the way (a `(cmd &)` that already ended is no leftover).
pub fn none_since(since: u64, running: &[i32]) -> bool {
    let Some(strays) = strays(running) else {
        return false;
    };
    strays
        .into_iter()
        .all(|pid| reaped(pid) || start_ticks(pid).is_some_and(|t| t < since))
}

/// Reaps the adopted processes that have exited: one `waitid` when none
/// has (the common case), no `/proc` read.
///
/// `waitid` shows one exited child at a time, the kernel's first: when
/// that one is in `running` (a shell its Job reaps, or a listed holder
/// that a `cgroup.kill` or a root command killed, whose zombie stays
/// until its cgroup goes), it would hide every zombie behind it. Then
/// each stray is asked in turn instead. Without that, a killed fork
/// bomb's zombies stayed until the next 10 s housekeeping, each holding
/// its pid in the unit's `TasksMax`: the next command could not start
/// (EAGAIN), and `/etc/profile` spun on `fork: retry`.
pub fn reap(running: &[i32]) {
    if !ADOPTING.load(Ordering::Relaxed) {
        return;
    }
    loop {
        // SAFETY: a zeroed siginfo is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // Peek (WNOWAIT) at whichever child has exited: it may be a
        // running command's shell, which is its Job's to reap.
        // SAFETY: a valid out-pointer.
        let peeked = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: waitid filled in a child's siginfo, or left it zeroed.
        let pid = unsafe { info.si_pid() };
        if peeked != 0 || pid <= 0 {
            return;
        }
        if running.contains(&pid) {
            for stray in strays(running).unwrap_or_default() {
                reaped(stray);
            }
            return;
        }
        if !reaped(pid) {
            return;
        }
    }
}

/// Whether `pid`, an adopted process, had exited (and is now reaped).
fn reaped(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: WNOHANG on our own child, which no one else waits for
    // (the running commands' shells are never passed here).
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
}

/// The agent's children other than `running`; `None` when the agent is
/// not a subreaper or its children cannot be listed (a kernel without
/// `CONFIG_PROC_CHILDREN`).
///
/// One list is enough: the main thread's. The agent runs on that one
/// thread, which makes every command's shell, and the kernel hands an
/// orphan to the subreaper's first live thread, the main one. The list
/// may change while it is read, but only by growing at its tail (an orphan
/// handed up, a shell started elsewhere): entries leave it only when this
/// thread reaps them. So every child present when the read began is in it.
fn strays(running: &[i32]) -> Option<Vec<i32>> {
    // Opened once and read from offset 0 each time (a seq file renders
    // itself again then, as `read_fresh` relies on for cgroup files): the
    // path walk through /proc and the close are not paid per command.
    static CHILDREN: OnceLock<Option<OwnedFd>> = OnceLock::new();
    if !ADOPTING.load(Ordering::Relaxed) {
        return None;
    }
    let fd = CHILDREN
        .get_or_init(|| {
            let me = std::process::id();
            let path = CString::new(format!("/proc/{me}/task/{me}/children")).ok()?;
            // Raw: `std::fs` would add musl's `fcntl` and an `fstat`.
            // SAFETY: a NUL-terminated path; the fd is owned below.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            } as c_int;
            // SAFETY: a new fd of ours, owned from here on.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        })
        .as_ref()?
        .as_raw_fd();
    let mut text = Vec::new();
    let mut buf = [0u8; 1024];
    let complete = loop {
        // SAFETY: reads into our buffer, within its length.
        let n = unsafe {
            libc::pread(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                text.len() as libc::off_t,
            )
        };
        match n {
            0 => break true,
            n if n > 0 => text.extend_from_slice(&buf[..n as usize]),
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => break false,
        }
    };
    complete.then(|| {
        text.split(u8::is_ascii_whitespace)
            .filter_map(|p| std::str::from_utf8(p).ok()?.parse::<i32>().ok())
            .filter(|p| !running.contains(p))
            .collect()
    })
}

/// When `pid` started, in clock ticks since boot; `None` if it is gone.
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid … starttime …`: comm may hold spaces and
    // parens; starttime is the 20th field after it.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_started_now_starts_at_or_after_now() {
        let before = now_ticks().unwrap();
        let child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let started = start_ticks(child.id() as i32).unwrap();
        let me = start_ticks(std::process::id() as i32).unwrap();
        let mut child = child;
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(started >= before, "{started} < {before}");
        assert!(
            me <= before,
            "the test process started after now? {me} > {before}"
        );
    }
}
