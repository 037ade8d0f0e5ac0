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
//!   service's cgroup with the `trusted.delegate` xattr. The agent runs in
//!   a leaf `agent/` (cgroup v2 forbids processes in a cgroup whose
//!   controllers its children use) and creates `exec-PID-N/` beside it for
//!   each command. systemd ≥ 254 puts it there itself (`DelegateSubgroup=
//!   agent`): only then are the `pids` and `memory` controllers enabled for
//!   the exec cgroups (see [`Cgroups::setup`] for why not otherwise). On
//!   older systemd (252) the agent moves itself into `agent/` and enables
//!   no controller;
//! - `--cgroup PATH` names a directory the operator (or a test) made for it;
//!   the controllers are enabled there when PATH has them;
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
//! a cgroup frozen or with child cgroups is removed, not reused, and the
//! limits are written again.
//!
//! Limits ([`Limits`]): each exec cgroup gets `pids.max` and `memory.max`
//! (and `memory.swap.max` 0) where those controllers are on. Whether a
//! command hit one is read from `pids.events` and `memory.events`, whose
//! counters only grow: a cgroup is recycled only while they are all 0, so
//! a taken cgroup starts at 0 and any count at the end is this command's.

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

/// A command's limits; `None`: none (`max`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub pids: Option<u64>,
    pub memory: Option<u64>,
}

/// Which limits a finished command ran into (from its cgroup's events).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hit {
    pub pids: bool,
    pub memory: bool,
}

/// The subtree the agent creates per-exec cgroups in.
#[derive(Debug)]
pub struct Cgroups {
    root: PathBuf,
    /// Enabled for the exec cgroups.
    pids: bool,
    memory: bool,
    /// What a command gets unless it asks otherwise; `memory` is also the
    /// most it may ask for.
    defaults: Limits,
    /// The most processes one command may have ([`pids_ceiling`]).
    pids_ceiling: Option<u64>,
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

/// What contains a command here, as [`Cgroups::setup`] finds it.
#[derive(Debug)]
pub enum Containment {
    /// Each command in a cgroup of its own.
    Cgroups(Cgroups),
    /// No cgroup: commands are killed by session; `why` is for the log.
    Sessions { why: String },
}

/// What the sweep does with a finished command's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reuse {
    /// Processes are still in it: looked at again by a later sweep.
    Busy,
    /// Empty and clean: back into the pool.
    Recycle,
    /// Empty, but a (root) command froze it, made cgroups below it or hit
    /// a limit in it, which the next command must not inherit; or it is
    /// unreadable (gone).
    Remove,
}

/// What an `rmdir` of a cgroup left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    Gone,
    /// Still there: not empty yet, or something else is wrong; a later
    /// sweep tries again.
    Remains,
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
    /// `pids.events` and `memory.events`, where those controllers are on.
    pids_events: Option<std::fs::File>,
    memory_events: Option<std::fs::File>,
    /// What its limit files hold now.
    limits: Limits,
}

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

impl Cgroups {
    /// Resolves `mode` at start: cgroups, or commands contained by session
    /// and why (for the log); an error only for an explicit `--cgroup PATH`
    /// that cannot work.
    ///
    /// `defaults`: the operator's `--pids-max` and `--memory-max`; a
    /// `memory` of `None` there means the guest's memory less a reserve
    /// ([`default_memory`]).
    pub fn setup(
        mode: &Mode,
        defaults: Limits,
        memory_auto: bool,
    ) -> Result<Containment, CgroupError> {
        let (root, controllers) = match mode {
            Mode::Off => {
                return Ok(Containment::Sessions {
                    why: "--cgroup off".into(),
                });
            }
            Mode::Path(p) => {
                check_cgroup2(p)?;
                (p.clone(), true)
            }
            // Controllers only when systemd placed the agent in its
            // subgroup: with one enabled in the unit cgroup's
            // `cgroup.subtree_control`, systemd before 254's
            // `DelegateSubgroup=` puts a restarted agent back into the unit
            // cgroup itself, which cgroup v2 forbids beside enabled
            // controllers (EBUSY), and the unit would fail to start.
            Mode::Auto => match delegated_self() {
                Ok(found) => found,
                Err(why) => return Ok(Containment::Sessions { why }),
            },
        };
        let pids = controllers && enable(&root, "pids", b"+pids");
        let memory = controllers && enable(&root, "memory", b"+memory");
        let mut defaults = defaults;
        if memory_auto {
            defaults.memory = default_memory();
        }
        // Also without the controller for the commands: then it bounds
        // their `RLIMIT_NPROC` (systemd sets the unit's own `pids.max`
        // whatever it delegates).
        let ceiling = std::fs::read_to_string(root.join("pids.max"))
            .ok()
            .and_then(|t| pids_ceiling(&t));
        defaults.pids = at_most(defaults.pids, ceiling);
        let mut cg = Cgroups::new(root, pids, memory, defaults);
        cg.pids_ceiling = ceiling;
        Ok(Containment::Cgroups(cg))
    }

    fn new(root: PathBuf, pids: bool, memory: bool, defaults: Limits) -> Cgroups {
        let cg = Cgroups {
            root,
            pids,
            memory,
            defaults,
            pids_ceiling: None,
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

    /// Whether `pids.max` / `memory.max` are enforced per command.
    pub fn enforces(&self) -> Hit {
        Hit {
            pids: self.pids,
            memory: self.memory,
        }
    }

    pub fn defaults(&self) -> Limits {
        self.defaults
    }

    /// The limits a command gets: what it asks for (`None`: no limit at
    /// all, for the setup script), else the defaults; memory at most the
    /// default, which is what the guest can spare.
    pub fn resolve(&self, ask: Option<Limits>) -> Limits {
        let Some(ask) = ask else {
            return Limits::default();
        };
        let memory = match (ask.memory, self.defaults.memory) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, d) => a.or(d),
        };
        Limits {
            pids: at_most(ask.pids.or(self.defaults.pids), self.pids_ceiling),
            memory,
        }
    }

    /// An empty cgroup for one command, with `limits` in its limit files:
    /// from the pool, or made now when the pool is empty (the first exec,
    /// or one that came before the sweep after the previous answer). The
    /// pool's cgroups hold the defaults, so only a command that asks for
    /// other limits costs a write here.
    pub fn take(&self, limits: Limits) -> Result<ExecCgroup, CgroupError> {
        let mut cg = match lock(&self.free).pop() {
            Some(cg) => cg,
            None => self.create()?,
        };
        if let Err(source) = self.write_limits(&mut cg, limits, false) {
            let path = cg.path.clone();
            self.discard(cg);
            return Err(CgroupError::Io {
                what: "write the limits of",
                path,
                source,
            });
        }
        Ok(cg)
    }

    /// Writes what differs from what `cg` holds. `memory.swap.max` 0: a
    /// command past its memory must be stopped, not swap the whole guest
    /// into a crawl (only where swap accounting exists; best effort).
    /// `all`: also what it holds already (a recycled cgroup).
    fn write_limits(&self, cg: &mut ExecCgroup, want: Limits, all: bool) -> io::Result<()> {
        fn max(v: Option<u64>) -> String {
            v.map_or_else(|| "max".to_owned(), |v| v.to_string())
        }
        if self.pids && (all || cg.limits.pids != want.pids) {
            std::fs::write(cg.path.join("pids.max"), max(want.pids))?;
            cg.limits.pids = want.pids;
        }
        if self.memory && (all || cg.limits.memory != want.memory) {
            std::fs::write(cg.path.join("memory.max"), max(want.memory))?;
            let _ = std::fs::write(cg.path.join("memory.swap.max"), b"0");
            cg.limits.memory = want.memory;
        }
        Ok(())
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
        let parts = open_parts(&path, self.pids, self.memory);
        let (dir, events, stat, pids_events, memory_events) = parts.map_err(|e| {
            let _ = std::fs::remove_dir(&path);
            io_err("open", e)
        })?;
        let mut cg = ExecCgroup {
            path: path.clone(),
            dir,
            events,
            stat,
            pids_events,
            memory_events,
            limits: Limits::default(),
        };
        // A new cgroup's limits are `max`: the pool holds the defaults.
        if let Err(e) = self.write_limits(&mut cg, self.defaults, false) {
            let _ = std::fs::remove_dir(&cg.path);
            return Err(io_err("write the limits of", e));
        }
        Ok(cg)
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
        if remove(&cg.path) == Removal::Remains {
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
        for mut cg in done {
            match self.reusable(&cg) {
                Reuse::Busy => busy.push(cg),
                Reuse::Recycle => {
                    let mut free = lock(&self.free);
                    if free.len() < POOL && self.recycle(&mut cg).is_ok() {
                        free.push(cg);
                        continue;
                    }
                    drop(free);
                    if remove(&cg.path) == Removal::Remains {
                        busy.push(cg);
                    }
                }
                Reuse::Remove => {
                    if remove(&cg.path) == Removal::Remains {
                        busy.push(cg);
                    }
                }
            }
        }
        lock(&self.released).extend(busy);
        lock(&self.stale).retain(|p| remove(p) == Removal::Remains);
    }

    /// Whether a finished command's cgroup can serve the next command.
    fn reusable(&self, cg: &ExecCgroup) -> Reuse {
        let mut buf = [0u8; 256];
        let Ok(events) = read_fresh(&cg.events, &mut buf) else {
            return Reuse::Remove;
        };
        if has_line(events, b"populated 1") {
            return Reuse::Busy;
        }
        let frozen = has_line(events, b"frozen 1");
        let mut buf = [0u8; 1024];
        let nested = read_fresh(&cg.stat, &mut buf).map_or(true, |s| {
            s.split(|b| *b == b'\n')
                .any(|l| l.starts_with(b"nr_descendants ") && l != b"nr_descendants 0")
        });
        // A limit was hit in it (by the command, or by what it left): its
        // counters would be the next command's starting point.
        let hit = cg.limits_hit() != Hit::default();
        if frozen || nested || hit {
            Reuse::Remove
        } else {
            Reuse::Recycle
        }
    }

    /// Readies an empty cgroup for the next command: the default limits
    /// again, written whatever we think it holds, in case a root command
    /// changed them. An error: it cannot be reused.
    fn recycle(&self, cg: &mut ExecCgroup) -> io::Result<()> {
        self.write_limits(cg, self.defaults, true)
    }
}

/// Removes an empty cgroup.
fn remove(path: &Path) -> Removal {
    match std::fs::remove_dir(path) {
        Ok(()) => Removal::Gone,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Removal::Gone,
        Err(_) => Removal::Remains,
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
        lock(&self.stale).retain(|p| remove(p) == Removal::Remains);
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
        kill(&self.path);
    }

    /// Whether any process is left in it.
    pub fn populated(&self) -> bool {
        let mut buf = [0u8; 256];
        read_fresh(&self.events, &mut buf).is_ok_and(|t| has_line(t, b"populated 1"))
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
fn counted(f: &Option<std::fs::File>, a: &[u8], b: &[u8]) -> bool {
    let mut buf = [0u8; 256];
    f.as_ref()
        .and_then(|f| read_fresh(f, &mut buf).ok())
        .is_some_and(|t| counter(t, a) > 0 || counter(t, b) > 0)
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines);
/// 0 when absent or not a number.
fn counter(text: &[u8], key: &[u8]) -> u64 {
    let Some(v) = text
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(b" "))
    else {
        return 0;
    };
    let mut n: u64 = 0;
    for &d in v {
        if !d.is_ascii_digit() {
            return 0;
        }
        n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
    }
    n
}

type Parts = (
    OwnedFd,
    std::fs::File,
    std::fs::File,
    Option<std::fs::File>,
    Option<std::fs::File>,
);

/// The cgroup's directory, `cgroup.events` and `cgroup.stat` (and the
/// `pids.events` and `memory.events` of the controllers that are on), all
/// opened through the directory (so all are the same cgroup).
fn open_parts(path: &Path, pids: bool, memory: bool) -> io::Result<Parts> {
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
    Ok((dir, events, stat, pids_events, memory_events))
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

/// SIGKILL to everything in the cgroup at `path`: the one kill path for a
/// command's cgroup, whether the command's [`ExecCgroup`] is at hand or
/// only its path (the agent's shutdown, [`crate::process::Jobs::kill_all`]).
pub fn kill(path: &Path) {
    let _ = kill_path(path);
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
/// `trusted.delegate=1` on it, systemd 251+), with the agent in its leaf
/// `agent/`, and whether controllers may be enabled there: only when
/// systemd itself put the agent in `agent/` (`DelegateSubgroup=agent`,
/// systemd ≥ 254), so a restart goes there too. Otherwise (252) the agent
/// moves itself. `Err`: why not, for the log.
fn delegated_self() -> Result<(PathBuf, bool), String> {
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
    let own = mount.join(rel.trim_start_matches('/'));
    // A unit's own cgroup is `NAME.service`, never `agent`: in `agent/`
    // under a delegated cgroup, systemd put us there (whether it also
    // marks the subgroup delegated is not relied on).
    if let Some(unit) = own.parent()
        && own.file_name() == Some("agent".as_ref())
        && has_delegate_xattr(unit)
    {
        return Ok((unit.to_path_buf(), true));
    }
    let root = own;
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
    Ok((root, false))
}

/// Turns on `controller` for the exec cgroups, if it is available to
/// `root`; detected by the write succeeding, not by the systemd version.
/// Tasks left to the agent itself under its unit's limit: its thread, the
/// shells of the next commands, housekeeping.
const AGENT_TASKS: u64 = 64;

/// The most processes one command may have, from the `pids.max` of the
/// subtree the commands share (the unit's `TasksMax=`; systemd's default is
/// 15 % of the guest's threads: ~1,170 on a 1 GiB VM, ~2,350 on 2 GiB): a
/// quarter of it after the agent's share. A command that reached the
/// unit's own limit would leave the agent unable to start the next
/// command and slow to end this one (measured on Debian 13: a 20 s
/// timeout answered after 45 s); at a quarter, three runaways at once
/// still leave room. `max` (no unit limit): no ceiling.
fn pids_ceiling(unit_pids_max: &str) -> Option<u64> {
    let n: u64 = unit_pids_max.trim().parse().ok()?;
    Some((n.saturating_sub(AGENT_TASKS) / 4).max(16))
}

fn at_most(v: Option<u64>, ceiling: Option<u64>) -> Option<u64> {
    match (v, ceiling) {
        (Some(v), Some(c)) => Some(v.min(c)),
        (v, c) => v.or(c),
    }
}

fn enable(root: &Path, controller: &str, plus: &[u8]) -> bool {
    let available = std::fs::read_to_string(root.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == controller));
    available && std::fs::write(root.join("cgroup.subtree_control"), plus).is_ok()
}

/// The default `memory.max` of a command: the guest's memory less a
/// reserve of max(256 MiB, 1/8 of it). What the reserve keeps alive: the
/// kernel's own growth (slab, page tables, the hog's kernel stacks are
/// charged to it but the rest of the guest's are not), systemd, journald,
/// sshd and the serial getty (~50–80 MiB on a minimal Debian), and the
/// agent (2 MiB idle, ~20 MiB with 8 execs at the default output cap). A
/// floor for small VMs, a share for large ones, whose lab services
/// (a kubelet, a database) grow with them. One command may then take all
/// the rest; the OOM killer stops it at its own limit, and `oom_score_adj`
/// (see `serve`) makes sure that, should the guest run out anyway, it is
/// the command that goes, not the agent.
fn default_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    let total = kib * 1024;
    let reserve = (256 << 20u64).max(total / 8);
    Some(
        total
            .saturating_sub(reserve)
            .max(lab_agent_proto::exec::MIN_MEMORY_BYTES),
    )
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
    fn counters_are_read_from_cgroup_event_files() {
        let pids = b"max 0\n";
        assert_eq!(counter(pids, b"max"), 0);
        assert_eq!(counter(b"max 17\n", b"max"), 17);
        let memory = b"low 0\nhigh 3\nmax 120\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(counter(memory, b"max"), 120);
        assert_eq!(counter(memory, b"oom"), 2);
        assert_eq!(counter(memory, b"oom_kill"), 1);
        assert_eq!(counter(memory, b"oom_group_kill"), 0);
        // A key is a whole word: `oom` is not `oom_kill`'s prefix match.
        assert_eq!(counter(b"oom_kill 5\n", b"oom"), 0);
        assert_eq!(counter(b"", b"max"), 0);
        assert_eq!(counter(b"max x\n", b"max"), 0);
    }

    #[test]
    fn requests_get_their_limits_within_the_defaults() {
        let cg = Cgroups {
            root: PathBuf::from("/nonexistent"),
            pids: true,
            memory: true,
            defaults: Limits {
                pids: Some(4096),
                memory: Some(1 << 30),
            },
            pids_ceiling: None,
            next: AtomicU64::new(0),
            free: Mutex::default(),
            released: Mutex::default(),
            stale: Mutex::default(),
        };
        let ask = |pids, memory| cg.resolve(Some(Limits { pids, memory }));
        assert_eq!(ask(None, None), cg.defaults);
        assert_eq!(
            ask(Some(10), Some(64 << 20)),
            Limits {
                pids: Some(10),
                memory: Some(64 << 20)
            }
        );
        // Above the default memory is the default: it is what the guest can spare.
        assert_eq!(
            ask(Some(9000), Some(8 << 30)),
            Limits {
                pids: Some(9000),
                memory: Some(1 << 30)
            }
        );
        // The setup script: no limit.
        assert_eq!(cg.resolve(None), Limits::default());
    }

    /// What an earlier agent left (`exec-*`) is the agent's to remove;
    /// nothing else in its subtree is: systemd 257 runs a delegated unit's
    /// helper commands in `.control`, and the agent's own leaf is `agent`.
    #[test]
    fn only_exec_cgroups_are_swept() {
        let root = std::env::temp_dir().join(format!("lab-agent-sweep-{}", std::process::id()));
        for d in [".control", "agent", "exec-9-0", "exec-9-1"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("exec-9-1/held"), b"").unwrap();
        let cg = Cgroups::new(root.clone(), false, false, Limits::default());
        let mut left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // exec-9-1 cannot be removed yet (here: not empty; in cgroupfs: a
        // process in it) and stays on the list for later sweeps.
        assert_eq!(left, [".control", "agent", "exec-9-1"]);
        assert_eq!(lock(&cg.stale).len(), 1);
        drop(cg);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// One command never gets the unit's whole task limit (systemd's
    /// default `TasksMax=` on a 2 GiB Debian 13 guest is 2346): asked or
    /// default, it gets at most a quarter after the agent's share.
    #[test]
    fn a_command_gets_at_most_a_quarter_of_the_units_tasks() {
        assert_eq!(pids_ceiling("2346\n"), Some(570));
        assert_eq!(pids_ceiling("1170\n"), Some(276));
        assert_eq!(pids_ceiling("100\n"), Some(16));
        assert_eq!(pids_ceiling("max\n"), None);
        let mut cg = Cgroups::new(PathBuf::from("/nonexistent"), true, true, Limits::default());
        cg.defaults.pids = at_most(Some(4096), pids_ceiling("2346"));
        cg.pids_ceiling = pids_ceiling("2346");
        let ask = |pids| cg.resolve(Some(Limits { pids, memory: None })).pids;
        assert_eq!(ask(None), Some(570));
        assert_eq!(ask(Some(100)), Some(100));
        assert_eq!(ask(Some(16384)), Some(570));
    }

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
    /// Needs a cgroup2 mount and root to write under it, as CI has: without
    /// them it fails saying which is missing.
    #[test]
    fn a_kept_open_events_file_shows_each_change() {
        let mount = cgroup2_mount().expect("no cgroup2 mount on this machine: this test needs one");
        let path = mount.join(format!("lab-agent-unit-{}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&path) {
            panic!(
                "cannot create a cgroup under {} ({e})\nhint: run the tests as root, as CI does",
                mount.display()
            );
        }
        let (_dir, events, ..) = open_parts(&path, false, false).unwrap();
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
