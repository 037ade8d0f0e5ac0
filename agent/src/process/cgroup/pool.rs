//! The per-exec cgroups' lifecycle: where the subtree is ([`Cgroups::setup`]),
//! taking one for a command, the sweep that recycles, keeps or removes them.

use super::discover::*;
use super::exec_cgroup::*;
use super::holder::Holder;
use super::*;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    /// A holder failed to start: none is tried again (each try would cost
    /// a spawn after every exec).
    no_holders: AtomicBool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reuse {
    /// Processes are still in it: looked at again by a later sweep.
    Busy,
    /// Empty and clean: back into the pool.
    Recycle,
    /// Empty, but a (root) command froze it, made cgroups below it or hit
    /// a limit in it, which the next command must not inherit; or it was
    /// killed ([`ExecCgroup::kill`]); or it is unreadable (gone).
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
            no_holders: AtomicBool::new(false),
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
            // The holder is one of the cgroup's tasks: not the command's.
            let holder = u64::from(cg.holder.is_some());
            let pids = want.pids.map(|p| p.saturating_add(holder));
            std::fs::write(cg.path.join("pids.max"), max(pids))?;
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
    /// Also gives each pooled cgroup without a holder one (a new cgroup).
    pub fn prepare(&self) {
        if lock(&self.free).is_empty() {
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
        for cg in lock(&self.free).iter_mut() {
            // Room for it in `pids.max`; else the cgroup goes without.
            if cg.holder.is_none() && self.hold(cg) {
                let limits = cg.limits;
                if self.write_limits(cg, limits, true).is_err() {
                    cg.holder = None;
                }
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
        let (dir, events, stat, procs, pids_events, memory_events) = parts.map_err(|e| {
            let _ = std::fs::remove_dir(&path);
            io_err("open", e)
        })?;
        let mut cg = ExecCgroup {
            path: path.clone(),
            dir,
            events,
            stat,
            procs,
            pids_events,
            memory_events,
            limits: Limits::default(),
            holder: None,
            killed: AtomicBool::new(false),
            settled: false,
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
    pub fn discard(&self, mut cg: ExecCgroup) {
        if remove_cgroup(&mut cg) == Removal::Remains {
            lock(&self.stale).push(cg.path);
        }
    }

    /// Returns released cgroups that are empty to the pool (removes them
    /// when it is full, or when they cannot be reused); keeps those that
    /// still hold processes for a later sweep; removes stale ones that have
    /// emptied. In steady state: one `cgroup.events` and one `cgroup.stat`
    /// read per exec, no `mkdir` or `rmdir`. True when a killed cgroup
    /// still holds processes (they are dying).
    pub fn sweep(&self) -> bool {
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
                    if remove_cgroup(&mut cg) == Removal::Remains {
                        busy.push(cg);
                    }
                }
                Reuse::Remove => {
                    if remove_cgroup(&mut cg) == Removal::Remains {
                        busy.push(cg);
                    }
                }
            }
        }
        let dying = busy.iter().any(|cg| cg.killed.load(Ordering::Relaxed));
        lock(&self.released).extend(busy);
        lock(&self.stale).retain(|p| remove(p) == Removal::Remains);
        dying
    }

    /// Whether a finished command's cgroup can serve the next command.
    fn reusable(&self, cg: &ExecCgroup) -> Reuse {
        if !cg.settled && cg.populated() {
            return Reuse::Busy;
        }
        if cg.killed.load(Ordering::Relaxed) {
            return Reuse::Remove;
        }
        let mut buf = [0u8; 256];
        let Ok(events) = read_fresh(&cg.events, &mut buf) else {
            return Reuse::Remove;
        };
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
        cg.settled = false;
        if cg.holder.as_ref().is_some_and(|h| !h.alive()) {
            cg.holder = None;
        }
        if cg.holder.is_none() {
            // Its room in `pids.max` comes with the limits below.
            self.hold(cg);
        }
        self.write_limits(cg, self.defaults, true)
    }

    /// Starts a holder in an empty pooled cgroup (the caller then makes
    /// room for it in `pids.max`); false: none (it could not start), and
    /// the cgroup serves as well, at the cost [`super::holder`] describes.
    fn hold(&self, cg: &mut ExecCgroup) -> bool {
        if self.no_holders.load(Ordering::Relaxed) {
            return false;
        }
        match Holder::start(cg.dir()) {
            Ok(h) => {
                cg.holder = Some(h);
                true
            }
            Err(e) => {
                self.no_holders.store(true, Ordering::Relaxed);
                tracing::info!(error = %e, "pooled cgroups get no holder: each command's start and end cost the kernel more");
                false
            }
        }
    }
}

/// Removes a cgroup no command will use again, its holder first.
fn remove_cgroup(cg: &mut ExecCgroup) -> Removal {
    cg.holder = None;
    remove(&cg.path)
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
        for mut cg in lock(&self.free).drain(..) {
            remove_cgroup(&mut cg);
        }
        // Removes those that are empty; what still holds processes stays
        // (as a restart finds it, see `new`).
        for mut cg in lock(&self.released).drain(..) {
            remove_cgroup(&mut cg);
        }
        lock(&self.stale).retain(|p| remove(p) == Removal::Remains);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
            no_holders: AtomicBool::new(false),
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
