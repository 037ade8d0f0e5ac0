//! One cgroup v2 per command, where the agent has a subtree of its own.
//!
//! A process group or session is a promise the command can break (`setsid`,
//! `setpgid`, `timeout(1)`, a double fork); a cgroup is not: every process
//! a command starts is born in its cgroup and cannot leave it without
//! write access to another cgroup's `cgroup.procs`, which only root has. The
//! command starts inside it (`clone3` with `CLONE_INTO_CGROUP`, see
//! [`crate::spawn`]), so killing the cgroup (`cgroup.kill`) reaches all of
//! it, whatever it did to its process group.
//!
//! Where the subtree comes from ([`Mode`]):
//! - under systemd the unit sets `Delegate=yes`; systemd marks the
//!   service's cgroup with the `trusted.delegate` xattr. The agent then
//!   moves itself into a leaf (`agent/`, because cgroup v2 forbids
//!   processes in a cgroup whose controllers its children use) and creates
//!   `exec-PID-N/` beside it for each command;
//! - `--cgroup PATH` names a directory the operator (or a test) made for it;
//!   only there is `pids.max` set per exec (`--pids-max`), when the pids
//!   controller is available to PATH (see [`Cgroups::setup`] for why not in
//!   the unit's own cgroup);
//! - elsewhere (`labctl try` on a workstation, containers) there is none, and
//!   [`crate::process`] falls back to killing by session and ancestry.
//!
//! Creating a cgroup is a `mkdir` in cgroupfs and removing one an `rmdir`
//! (tens of µs each, more with controllers, and on a busy machine the
//! kernel's cgroup locks make them slower still). So cgroups are recycled:
//! a finished command's cgroup that is empty goes back into a small pool
//! ([`POOL`]) with its open directory and is handed to the next command; in
//! steady state an exec makes and removes none. One that still holds
//! processes the command left in the background is kept until they are
//! gone, then recycled or removed. Only [`Cgroups::sweep`] (the agent's
//! housekeeping, after the answer) looks at them: [`Cgroups::release`] on
//! the answer's path is a push onto a list.
//!
//! Why a recycled cgroup is empty when taken: the sweep saw `populated 0`
//! in its `cgroup.events`, which counts every process in it and below it,
//! and nothing can enter it afterwards but a process that can write its
//! `cgroup.procs` and the agent's root's (root-owned, mode 0644, so only
//! root) — the agent's own `clone3`, or a root command, which could as well
//! leave its own cgroup and is not what cgroups contain. What a root command
//! may have changed in its cgroup is checked too ([`Cgroups::reusable`]):
//! a cgroup frozen or with child cgroups is removed, not reused, and
//! `pids.max` is written again.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `--cgroup` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Use the agent's own cgroup when systemd delegated it, else none.
    Auto,
    /// Never: kill by session.
    Off,
    /// Create the per-exec cgroups in this directory.
    Path(PathBuf),
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "off" => Ok(Mode::Off),
            p if p.starts_with('/') => Ok(Mode::Path(PathBuf::from(p))),
            other => Err(format!(
                "`--cgroup {other}` is not `auto`, `off` or an absolute path"
            )),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("`{}` is not a cgroup v2 directory: {reason}", .path.display())]
    NotCgroup2 { path: PathBuf, reason: String },
    #[error("failed to {what} `{}`: {source}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// The subtree the agent creates per-exec cgroups in.
#[derive(Debug)]
pub struct Cgroups {
    root: PathBuf,
    /// `pids.max` written into each exec cgroup (when the controller is on).
    pids_max: Option<u64>,
    next: AtomicU64,
    /// Empty and ready for a command: made ahead of time or recycled.
    free: Mutex<Vec<ExecCgroup>>,
    /// Cgroups of finished commands: not yet looked at by the sweep, or
    /// still holding background processes.
    released: Mutex<Vec<ExecCgroup>>,
    /// Left by an earlier agent (a restart keeps what commands left
    /// running), or discarded: removed once empty, never reused.
    stale: Mutex<Vec<PathBuf>>,
}

/// How many empty cgroups are kept for reuse. Sequential execs need one
/// (the sweep after an answer returns it before the next request); the
/// second covers an exec that comes before the sweep ran, or two at once.
pub const POOL: usize = 2;

/// One command's cgroup: its path, an open directory (for `clone3`), and
/// its `cgroup.events` and `cgroup.stat` kept open: the sweep reads both
/// after every exec, and a `pread` of an open cgroupfs file is one syscall
/// where opening it again is five (kernfs lookup and permission checks
/// included) — on a 2-vCPU lab VM that is CPU the next check wants.
#[derive(Debug)]
pub struct ExecCgroup {
    path: PathBuf,
    dir: OwnedFd,
    events: std::fs::File,
    stat: std::fs::File,
}

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

impl Cgroups {
    /// Resolves `mode` at start. `Ok(None)`: no cgroup, and why (for the
    /// log); an error only for an explicit `--cgroup PATH` that cannot work.
    pub fn setup(
        mode: &Mode,
        pids_max: Option<u64>,
    ) -> Result<Result<Cgroups, String>, CgroupError> {
        match mode {
            Mode::Off => Ok(Err("--cgroup off".into())),
            Mode::Path(p) => {
                check_cgroup2(p)?;
                let pids_max = pids_max.filter(|_| enable_pids(p));
                Ok(Ok(Cgroups::new(p.clone(), pids_max)))
            }
            // No controller in the unit's own cgroup: with one enabled in its
            // `cgroup.subtree_control`, systemd (before 254's
            // `DelegateSubgroup=`) could not put a restarted agent back into
            // it — cgroup v2 forbids processes beside enabled controllers —
            // and the unit would fail to start.
            Mode::Auto => Ok(delegated_self().map(|root| Cgroups::new(root, None))),
        }
    }

    fn new(root: PathBuf, pids_max: Option<u64>) -> Cgroups {
        let cg = Cgroups {
            root,
            pids_max,
            next: AtomicU64::new(0),
            free: Mutex::new(Vec::new()),
            released: Mutex::new(Vec::new()),
            stale: Mutex::new(Vec::new()),
        };
        // Leftovers of an earlier agent: remove the empty ones now, the
        // rest when empty.
        if let Ok(dir) = std::fs::read_dir(&cg.root) {
            let mut stale = lock(&cg.stale);
            for e in dir.flatten() {
                if e.file_name().as_bytes().starts_with(b"exec-") {
                    stale.push(e.path());
                }
            }
        }
        cg.sweep();
        cg
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn pids_max(&self) -> Option<u64> {
        self.pids_max
    }

    /// An empty cgroup for one command: from the pool, or made now when
    /// the pool is empty (the first exec, or one that came before the
    /// sweep after the previous answer).
    pub fn take(&self) -> Result<ExecCgroup, CgroupError> {
        if let Some(cg) = lock(&self.free).pop() {
            return Ok(cg);
        }
        self.create()
    }

    /// Makes a cgroup ahead of time when the pool is empty (call it off the
    /// request's critical path, after [`Self::sweep`], which refills the
    /// pool without a `mkdir`).
    pub fn prepare(&self) {
        if !lock(&self.free).is_empty() {
            return;
        }
        if let Ok(cg) = self.create() {
            let mut free = lock(&self.free);
            if free.len() < POOL {
                free.push(cg);
            } else {
                drop(free);
                let _ = std::fs::remove_dir(&cg.path);
            }
        }
    }

    fn create(&self) -> Result<ExecCgroup, CgroupError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.root.join(format!("exec-{}-{n}", std::process::id()));
        let io_err = |what, source| CgroupError::Io {
            what,
            path: path.clone(),
            source,
        };
        std::fs::create_dir(&path).map_err(|e| io_err("create the cgroup", e))?;
        if let Some(max) = self.pids_max {
            // Best effort: without it the command still runs contained.
            let _ = std::fs::write(path.join("pids.max"), max.to_string());
        }
        let (dir, events, stat) = open_parts(&path).map_err(|e| {
            let _ = std::fs::remove_dir(&path);
            io_err("open", e)
        })?;
        Ok(ExecCgroup {
            path,
            dir,
            events,
            stat,
        })
    }

    /// Hands a finished command's cgroup to the next [`Self::sweep`].
    /// Nothing else here: reading its `cgroup.events` or removing it costs
    /// more than the rest of the cgroup's part in an exec, and the answer
    /// need not wait for it.
    pub fn release(&self, cg: ExecCgroup) {
        lock(&self.released).push(cg);
    }

    /// Removes a cgroup that must not be reused (a failed spawn's), or
    /// leaves it to the sweep to remove once empty. An error path: the
    /// `rmdir` here costs nothing that matters.
    pub fn discard(&self, cg: ExecCgroup) {
        if remove(&cg.path) {
            lock(&self.stale).push(cg.path);
        }
    }

    /// Returns released cgroups that are empty to the pool (removes them
    /// when it is full, or when they cannot be reused); keeps those that
    /// still hold processes for a later sweep; removes stale ones that have
    /// emptied. In steady state: one `cgroup.events` and one `cgroup.stat`
    /// read per exec, no `mkdir` or `rmdir`.
    pub fn sweep(&self) {
        let done = std::mem::take(&mut *lock(&self.released));
        let mut busy = Vec::new();
        for cg in done {
            match self.reusable(&cg) {
                None => busy.push(cg),
                Some(true) => {
                    let mut free = lock(&self.free);
                    if free.len() < POOL && self.recycle(&cg) {
                        free.push(cg);
                        continue;
                    }
                    drop(free);
                    if remove(&cg.path) {
                        busy.push(cg);
                    }
                }
                Some(false) => {
                    if remove(&cg.path) {
                        busy.push(cg);
                    }
                }
            }
        }
        lock(&self.released).extend(busy);
        lock(&self.stale).retain(|p| remove(p));
    }

    /// `None`: processes are still in it. `Some(false)`: empty, but a
    /// (root) command froze it or made cgroups below it, which the next
    /// command must not inherit, or it is unreadable (gone): it is removed
    /// instead.
    fn reusable(&self, cg: &ExecCgroup) -> Option<bool> {
        let mut buf = [0u8; 256];
        let Ok(events) = read_fresh(&cg.events, &mut buf) else {
            return Some(false);
        };
        if has_line(events, b"populated 1") {
            return None;
        }
        let frozen = has_line(events, b"frozen 1");
        let mut buf = [0u8; 1024];
        let nested = read_fresh(&cg.stat, &mut buf).map_or(true, |s| {
            s.split(|b| *b == b'\n')
                .any(|l| l.starts_with(b"nr_descendants ") && l != b"nr_descendants 0")
        });
        Some(!frozen && !nested)
    }

    /// Readies an empty cgroup for the next command: its `pids.max` again,
    /// in case a root command changed it. `false`: it cannot be reused.
    fn recycle(&self, cg: &ExecCgroup) -> bool {
        match self.pids_max {
            Some(max) => std::fs::write(cg.path.join("pids.max"), max.to_string()).is_ok(),
            None => true,
        }
    }
}

/// Removes an empty cgroup; `true` when it is still there (not empty yet,
/// or something else is wrong: a later sweep tries again).
fn remove(path: &Path) -> bool {
    match std::fs::remove_dir(path) {
        Ok(()) => false,
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for cg in lock(&self.free).drain(..) {
            let _ = std::fs::remove_dir(&cg.path);
        }
        // Removes those that are empty; what still holds processes stays
        // (as a restart finds it, see `new`).
        for cg in lock(&self.released).drain(..) {
            let _ = std::fs::remove_dir(&cg.path);
        }
        lock(&self.stale).retain(|p| remove(p));
    }
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
        if let Ok(text) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
            for pid in text.lines().filter_map(|l| l.parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            }
        }
    }

    /// SIGKILL to everything in the cgroup, atomically with respect to
    /// forks (`cgroup.kill`, Linux 5.14+; before it, one pass of kill(2)).
    pub fn kill(&self) {
        let _ = kill_path(&self.path);
    }

    /// Whether any process is left in it.
    pub fn populated(&self) -> bool {
        let mut buf = [0u8; 256];
        read_fresh(&self.events, &mut buf).is_ok_and(|t| has_line(t, b"populated 1"))
    }
}

/// The cgroup's directory, `cgroup.events` and `cgroup.stat`, all opened
/// through the directory (so all three are the same cgroup).
fn open_parts(path: &Path) -> io::Result<(OwnedFd, std::fs::File, std::fs::File)> {
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
    Ok((dir, events, stat))
}

/// The whole current content of a cgroupfs file kept open: reading from
/// offset 0 makes the kernel render it again (a seq file restarts when the
/// offset is not where the last read ended). Content longer than `buf` is
/// an error, not a silent cut.
fn read_fresh<'a>(f: &std::fs::File, buf: &'a mut [u8]) -> io::Result<&'a [u8]> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    loop {
        if n == buf.len() {
            return Err(io::Error::other("cgroup file larger than expected"));
        }
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => return Ok(&buf[..n]),
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn has_line(text: &[u8], line: &[u8]) -> bool {
    text.split(|b| *b == b'\n').any(|l| l == line)
}

fn kill_path(path: &Path) -> io::Result<()> {
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn check_cgroup2(p: &Path) -> Result<(), CgroupError> {
    let not = |reason: String| CgroupError::NotCgroup2 {
        path: p.to_path_buf(),
        reason,
    };
    let fs = nix::sys::statfs::statfs(p).map_err(|e| not(e.to_string()))?;
    if fs.filesystem_type().0 as i64 != CGROUP2_SUPER_MAGIC {
        return Err(not("it is not on a cgroup2 file system".into()));
    }
    if !p.join("cgroup.procs").exists() {
        return Err(not("it has no `cgroup.procs`".into()));
    }
    Ok(())
}

/// The agent's own cgroup when systemd delegated it (`Delegate=yes` sets
/// `trusted.delegate=1` on it, systemd 251+), after moving the agent into
/// its leaf `agent/`. `Err`: why not, for the log.
fn delegated_self() -> Result<PathBuf, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("failed to read /proc/self/cgroup: {e}"))?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 hierarchy")?
        .to_owned();
    if rel == "/" {
        return Err("the agent runs in the root cgroup".into());
    }
    let mount = cgroup2_mount().ok_or("no cgroup2 mount")?;
    let root = mount.join(rel.trim_start_matches('/'));
    if !has_delegate_xattr(&root) {
        return Err(format!(
            "`{}` is not delegated to the agent (the unit needs `Delegate=yes`)",
            root.display()
        ));
    }
    let leaf = root.join("agent");
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("failed to create `{}`: {e}", leaf.display())),
    }
    // Writing "0" moves the writing process, every thread of it.
    std::fs::write(leaf.join("cgroup.procs"), b"0")
        .map_err(|e| format!("failed to move the agent into `{}`: {e}", leaf.display()))?;
    Ok(root)
}

/// Turns on the pids controller for the exec cgroups, if it is available.
fn enable_pids(root: &Path) -> bool {
    let available = std::fs::read_to_string(root.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
    available && std::fs::write(root.join("cgroup.subtree_control"), b"+pids").is_ok()
}

fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        // `id parent maj:min root mountpoint opts... - fstype source superopts`
        let (pre, post) = l.split_once(" - ")?;
        if post.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        Some(PathBuf::from(pre.split_whitespace().nth(4)?))
    })
}

fn has_delegate_xattr(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    let mut buf = [0u8; 8];
    // SAFETY: NUL-terminated strings; the kernel writes at most buf.len().
    let n = unsafe {
        nix::libc::getxattr(
            c.as_ptr(),
            c"trusted.delegate".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n > 0 && &buf[..n as usize] == b"1"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("auto".parse::<Mode>(), Ok(Mode::Auto));
        assert_eq!("off".parse::<Mode>(), Ok(Mode::Off));
        assert_eq!(
            "/sys/fs/cgroup/x".parse::<Mode>(),
            Ok(Mode::Path("/sys/fs/cgroup/x".into()))
        );
        assert!("relative".parse::<Mode>().is_err());
    }

    /// The sweep reads `cgroup.events` through one fd for the cgroup's
    /// whole life: each read must show the state now, not the first one.
    #[test]
    fn a_kept_open_events_file_shows_each_change() {
        let Some(mount) = cgroup2_mount() else {
            eprintln!("skipped: no cgroup2 mount");
            return;
        };
        let path = mount.join(format!("lab-agent-unit-{}", std::process::id()));
        if std::fs::create_dir(&path).is_err() {
            eprintln!("skipped: cannot create a cgroup under {}", mount.display());
            return;
        }
        let (_dir, events, _stat) = open_parts(&path).unwrap();
        let populated = || {
            let mut buf = [0u8; 256];
            has_line(read_fresh(&events, &mut buf).unwrap(), b"populated 1")
        };
        assert!(!populated());
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        std::fs::write(path.join("cgroup.procs"), child.id().to_string()).unwrap();
        let in_it = populated();
        child.kill().unwrap();
        child.wait().unwrap();
        // The kernel updates `populated` once the exit is complete.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while populated() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let after = populated();
        std::fs::remove_dir(&path).unwrap();
        assert!(in_it, "a process in the cgroup read as not populated");
        assert!(!after, "an emptied cgroup still read as populated");
    }
}
