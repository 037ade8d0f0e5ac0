//! One command's cgroup: its open files, its limits, what it hit, the kill.

use super::holder::Holder;
use super::*;
use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// One command's cgroup: its path, an open directory (for `clone3`), and
/// its `cgroup.events` and `cgroup.stat` kept open: the sweep reads both
/// after every exec, and a `pread` of an open cgroupfs file is one syscall
/// where opening it again is five (kernfs lookup and permission checks
/// included) — on a 2-vCPU lab VM that is CPU the next check wants.
#[derive(Debug)]
pub struct ExecCgroup {
    pub(super) path: PathBuf,
    pub(super) dir: OwnedFd,
    pub(super) events: std::fs::File,
    pub(super) stat: std::fs::File,
    /// `pids.events` and `memory.events`, where those controllers are on.
    pub(super) pids_events: Option<std::fs::File>,
    pub(super) memory_events: Option<std::fs::File>,
    /// `cgroup.procs`: with a holder, who is in it.
    pub(super) procs: std::fs::File,
    /// What its limit files hold now (`pids.max` one more with a holder).
    pub(super) limits: Limits,
    /// Keeps it populated between commands ([`super::holder`]).
    pub(super) holder: Option<Holder>,
    /// `cgroup.kill` was written: never used again (see [`Self::kill`]).
    pub(super) killed: AtomicBool,
    /// Its command ended and left nothing: found empty (its holder aside)
    /// before the answer, so the sweep does not read its process list again.
    pub(crate) settled: bool,
}

impl ExecCgroup {
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `sig` to every process in the cgroup. A process forking at
    /// that moment may miss it; the SIGKILL that follows ([`Self::kill`])
    /// does not.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let holder = self.holder.as_ref().map(Holder::pid);
        if let Ok(text) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
            for pid in text.lines().filter_map(|l| l.parse::<i32>().ok()) {
                if Some(pid) == holder {
                    continue;
                }
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            }
        }
    }

    /// SIGKILL to everything in the cgroup, atomically with respect to
    /// forks (`cgroup.kill`, Linux 5.14+; before it, one pass of kill(2)).
    ///
    /// A killed cgroup is not reused: on some kernels (Linux 6.18 here) a
    /// process started into a cgroup with `CLONE_INTO_CGROUP` after any
    /// `cgroup.kill` of it is killed at birth (the fork compares the kill
    /// count of the parent's cgroup with the target's), so every later
    /// command in it would die with SIGKILL before its first instruction.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        kill(&self.path);
    }

    /// Whether any process is left in it or below it, its holder aside.
    pub fn populated(&self) -> bool {
        if let Some(h) = &self.holder {
            let others = self.others_than(h.pid());
            // Read after the list: alive now, so the pid listed was its.
            if h.alive() {
                return others;
            }
        }
        let mut buf = [0u8; 256];
        read_fresh(&self.events, &mut buf).is_ok_and(|t| has_line(t, b"populated 1"))
    }

    /// Whether `cgroup.procs` lists a process other than `holder`, or a
    /// cgroup was made below (a root command's; its processes are not in
    /// the list, so it counts as populated until the holder is gone).
    fn others_than(&self, holder: i32) -> bool {
        // Room for the holder's pid alone: a list that fills it has more.
        let mut buf = [0u8; 32];
        let alone = read_fresh(&self.procs, &mut buf).is_ok_and(|t| {
            t.split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .all(|l| counter_value(l) == Some(holder as u64))
        });
        if !alone {
            return true;
        }
        let mut buf = [0u8; 1024];
        read_fresh(&self.stat, &mut buf).map_or(true, |s| counter(s, b"nr_descendants") != 0)
    }

    /// The limits its files hold.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Which limits were hit since it was taken (its counters were 0 then,
    /// see the module docs). `pids`: `pids.events`' `max`, a fork or clone
    /// refused at `pids.max`. `memory`: `memory.events`' `oom` (an
    /// allocation failed at `memory.max`) or `oom_kill` (a process killed
    /// for it, by any OOM killer). Not `max` alone: it counts every time
    /// usage touched the limit and the kernel reclaimed, which page cache
    /// does for a healthy `cp` of a large file.
    pub fn limits_hit(&self) -> Hit {
        // Keys as arguments, not a static table: every pointer in static
        // data is a relocation in the static-PIE agent (binary size).
        Hit {
            pids: counted(&self.pids_events, b"max", b"max"),
            memory: counted(&self.memory_events, b"oom", b"oom_kill"),
        }
    }
}

/// Whether `a` or `b` is non-zero in the kept-open event file `f`.
pub(super) fn counted(f: &Option<std::fs::File>, a: &[u8], b: &[u8]) -> bool {
    let mut buf = [0u8; 256];
    f.as_ref()
        .and_then(|f| read_fresh(f, &mut buf).ok())
        .is_some_and(|t| counter(t, a) > 0 || counter(t, b) > 0)
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines);
/// 0 when absent or not a number.
pub(super) fn counter(text: &[u8], key: &[u8]) -> u64 {
    text.split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(b" "))
        .and_then(counter_value)
        .unwrap_or(0)
}

/// A decimal number, digits only.
fn counter_value(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &d in v {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
    }
    Some(n)
}

type Parts = (
    OwnedFd,
    std::fs::File,
    std::fs::File,
    std::fs::File,
    Option<std::fs::File>,
    Option<std::fs::File>,
);

/// The cgroup's directory, `cgroup.events`, `cgroup.stat` and
/// `cgroup.procs` (and the
/// `pids.events` and `memory.events` of the controllers that are on), all
/// opened through the directory (so all are the same cgroup).
pub(super) fn open_parts(path: &Path, pids: bool, memory: bool) -> io::Result<Parts> {
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let dir = nix::fcntl::open(
        c.as_c_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let file = |name: &str| -> io::Result<std::fs::File> {
        let fd = nix::fcntl::openat(
            dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )?;
        Ok(std::fs::File::from(fd))
    };
    let events = file("cgroup.events")?;
    let stat = file("cgroup.stat")?;
    let procs = file("cgroup.procs")?;
    let pids_events = if pids {
        Some(file("pids.events")?)
    } else {
        None
    };
    let memory_events = if memory {
        Some(file("memory.events")?)
    } else {
        None
    };
    Ok((dir, events, stat, procs, pids_events, memory_events))
}

/// The whole current content of a cgroupfs file kept open, in one `pread`
/// at offset 0: that makes the kernel render the file again (a seq file
/// restarts when the offset is not where the last read ended), and renders
/// it whole, every line, copying as much as `buf` takes. So a read shorter
/// than `buf` is all of it (no second read to see the end: one system call
/// less per file, three per exec with a cgroup); one that fills `buf` may
/// not be, and is an error rather than a silent cut.
pub(super) fn read_fresh<'a>(f: &std::fs::File, buf: &'a mut [u8]) -> io::Result<&'a [u8]> {
    use std::os::unix::fs::FileExt;
    loop {
        match f.read_at(buf, 0) {
            Ok(n) if n < buf.len() => return Ok(&buf[..n]),
            Ok(_) => return Err(io::Error::other("cgroup file larger than expected")),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

pub(super) fn has_line(text: &[u8], line: &[u8]) -> bool {
    text.split(|b| *b == b'\n').any(|l| l == line)
}

/// SIGKILL to everything in the cgroup at `path`: the one kill path for a
/// command's cgroup, whether the command's [`ExecCgroup`] is at hand or
/// only its path (the agent's shutdown, [`crate::process::Jobs::kill_all`]).
pub fn kill(path: &Path) {
    let _ = kill_path(path);
}

pub(super) fn kill_path(path: &Path) -> io::Result<()> {
    match std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("cgroup.kill"))
        .and_then(|mut f| f.write_all(b"1"))
    {
        Ok(()) => Ok(()),
        Err(_) => {
            let text = std::fs::read_to_string(path.join("cgroup.procs"))?;
            for pid in text.lines().filter_map(|l| l.parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_cgroup_file_is_read_whole_in_one_read_or_refused() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"populated 0\nfrozen 0\n").unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(
            read_fresh(&f, &mut buf).unwrap(),
            b"populated 0\nfrozen 0\n"
        );
        // A read that fills the buffer may have been cut: refused.
        let mut exact = [0u8; 21];
        assert!(read_fresh(&f, &mut exact).is_err());
        // cgroupfs itself, where this machine has it: whole, again and again.
        for p in [
            "/sys/fs/cgroup/cgroup.stat",
            "/sys/fs/cgroup/unified/cgroup.stat",
        ] {
            let Ok(f) = std::fs::File::open(p) else {
                continue;
            };
            for _ in 0..2 {
                let mut buf = [0u8; 1024];
                let text = read_fresh(&f, &mut buf).unwrap();
                assert!(text.starts_with(b"nr_descendants "), "{p}");
                assert!(text.ends_with(b"\n") && text.len() > 30, "{p}");
            }
        }
    }
}
