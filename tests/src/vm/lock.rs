//! How many VMs run at once on this machine: a few slots, taken one per VM,
//! or all of them by a test that measures time side by side.
//!
//! Under TCG a guest keeps about one host core busy, so two guests on two
//! cores each run at nearly the speed of one alone, and independent
//! scenarios (one per guest OS) can overlap: that is what keeps the VM
//! suite's time flat with two guests. A test whose figures are ratios
//! between boots (the boot cost) takes every slot, so nothing else runs
//! beside it.
//!
//! Test binaries run as separate processes (and tests within one binary as
//! threads), so a slot is an advisory `flock` on a machine-wide file: each
//! holder opens its own file description, which serialises threads and
//! processes alike, and the kernel drops it when the holder dies. Slot 0 is
//! `/tmp/lab-agent-vm.lock` (what a person takes with `flock` to keep the
//! tests off a VM of their own), slot N `/tmp/lab-agent-vm.lock.N`.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::VmError;

/// How long a test waits for other tests' VMs before giving up.
const WAIT_LIMIT: Duration = Duration::from_secs(40 * 60);

/// Held for a VM's whole life (or a side-by-side measurement's); released on
/// drop.
#[derive(Debug)]
pub struct VmLock {
    _slots: Vec<Flock<File>>,
}

impl VmLock {
    /// Slot `n`'s lock file: about the machine's CPU, so not under a cache
    /// dir that a run may override.
    pub fn path(n: usize) -> PathBuf {
        Locks::machine().slot(n)
    }

    /// How many VMs may run at once: `LAB_AGENT_VM_SLOTS`, else 2 on a
    /// machine with at least two cores, else 1.
    pub fn slots() -> usize {
        if let Ok(v) = std::env::var("LAB_AGENT_VM_SLOTS") {
            return v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=8).contains(&n))
                .unwrap_or_else(|| panic!("LAB_AGENT_VM_SLOTS={v:?} is not a number from 1 to 8"));
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores >= 2 { 2 } else { 1 }
    }

    /// Waits (up to 40 min, saying so on stderr) for a free slot: one VM.
    pub fn acquire(who: &str) -> Result<VmLock, VmError> {
        Locks::machine().acquire(who, Self::slots())
    }

    /// Waits until no other VM runs and keeps it so, for a test whose
    /// figures compare boots.
    pub fn acquire_all(who: &str) -> Result<VmLock, VmError> {
        Locks::machine().acquire_all(who, Self::slots())
    }
}

/// The lock files: the machine's in `/tmp`, or a test's own.
#[derive(Debug, Clone)]
pub struct Locks {
    base: PathBuf,
}

impl Locks {
    pub fn machine() -> Locks {
        Locks {
            base: PathBuf::from("/tmp/lab-agent-vm.lock"),
        }
    }

    /// Lock files under another name (tests of the lock itself).
    pub fn at(base: PathBuf) -> Locks {
        Locks { base }
    }

    fn slot(&self, n: usize) -> PathBuf {
        match n {
            0 => self.base.clone(),
            n => PathBuf::from(format!("{}.{n}", self.base.display())),
        }
    }

    /// Whoever takes slots passes through it first. A single-slot taker
    /// holds it only while it looks for a free slot; a whole-machine taker
    /// holds it until it has every slot, so no newcomer can take a slot
    /// that is freed meanwhile (without it, tests queued on one slot each
    /// kept taking the freed slot first, and the measurement waited until
    /// every other VM test had run, one at a time).
    fn turnstile(&self) -> PathBuf {
        PathBuf::from(format!("{}.turnstile", self.base.display()))
    }

    pub fn acquire(&self, who: &str, slots: usize) -> Result<VmLock, VmError> {
        let started = Instant::now();
        let mut said = false;
        let _turn = self.wait_for(&self.turnstile(), who, started, &mut said)?;
        loop {
            for n in 0..slots {
                if let Some(lock) = try_lock(&self.slot(n))? {
                    if said {
                        eprintln!("vm[{who}]: got VM slot {n} after {:.1?}", started.elapsed());
                    }
                    return Ok(VmLock { _slots: vec![lock] });
                }
            }
            if !said {
                eprintln!("vm[{who}]: {slots} VM(s) already running, waiting for a slot");
                said = true;
            }
            give_up_after(started, "a VM slot")?;
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn acquire_all(&self, who: &str, slots: usize) -> Result<VmLock, VmError> {
        let started = Instant::now();
        let mut said = false;
        let _turn = self.wait_for(&self.turnstile(), who, started, &mut said)?;
        let mut held = Vec::with_capacity(slots);
        for n in 0..slots {
            held.push(self.wait_for(&self.slot(n), who, started, &mut said)?);
        }
        if said {
            eprintln!(
                "vm[{who}]: alone on the machine after {:.1?}",
                started.elapsed()
            );
        }
        Ok(VmLock { _slots: held })
    }

    fn wait_for(
        &self,
        path: &Path,
        who: &str,
        started: Instant,
        said: &mut bool,
    ) -> Result<Flock<File>, VmError> {
        loop {
            if let Some(lock) = try_lock(path)? {
                return Ok(lock);
            }
            if !*said {
                eprintln!("vm[{who}]: waiting for the VMs that run now");
                *said = true;
            }
            give_up_after(started, "the VM slots")?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn try_lock(path: &Path) -> Result<Option<Flock<File>>, VmError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| VmError::io(format!("open the VM lock `{}`", path.display()), e))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(VmError::io(
            format!("lock `{}`", path.display()),
            std::io::Error::from(errno),
        )),
    }
}

fn give_up_after(started: Instant, what: &str) -> Result<(), VmError> {
    if started.elapsed() > WAIT_LIMIT {
        return Err(VmError::io(
            format!("wait for {what}"),
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("other VMs held it for over {WAIT_LIMIT:?}"),
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    /// Two "tests" that take one slot each, back to back, for as long as
    /// the whole-machine taker waits: it gets every slot as soon as the two
    /// running ones end, not after the queue has drained. (Without the
    /// turnstile the freed slot went to the next single taker every time.)
    #[test]
    fn a_whole_machine_taker_is_not_starved_by_single_slot_takers() {
        let dir = tempfile::tempdir().unwrap();
        let locks = Locks::at(dir.path().join("vm.lock"));
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(Barrier::new(3));
        let takers: Vec<_> = (0..2)
            .map(|i| {
                let (locks, stop, rounds, started) =
                    (locks.clone(), stop.clone(), rounds.clone(), started.clone());
                std::thread::spawn(move || {
                    let mut first = true;
                    while !stop.load(Ordering::SeqCst) {
                        let held = locks.acquire(&format!("single-{i}"), 2).unwrap();
                        if first {
                            started.wait();
                            first = false;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                        rounds.fetch_add(1, Ordering::SeqCst);
                        drop(held);
                    }
                })
            })
            .collect();
        started.wait();
        let t = Instant::now();
        let all = locks.acquire_all("whole", 2).unwrap();
        let waited = t.elapsed();
        let during = rounds.load(Ordering::SeqCst);
        // Alone: no single taker holds a slot now.
        assert!(try_lock(&locks.slot(0)).unwrap().is_none());
        assert!(try_lock(&locks.slot(1)).unwrap().is_none());
        stop.store(true, Ordering::SeqCst);
        drop(all);
        for t in takers {
            t.join().unwrap();
        }
        assert!(
            during <= 4 && waited < Duration::from_secs(2),
            "the whole-machine taker waited {waited:?}, {during} single rounds ran meanwhile"
        );
    }
}
