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
use std::path::PathBuf;
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
        match n {
            0 => PathBuf::from("/tmp/lab-agent-vm.lock"),
            n => PathBuf::from(format!("/tmp/lab-agent-vm.lock.{n}")),
        }
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
        let slots = Self::slots();
        let started = Instant::now();
        let mut said = false;
        loop {
            for n in 0..slots {
                if let Some(lock) = try_slot(n)? {
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
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until no other VM runs and keeps it so: every slot, taken in
    /// order (so two such takers cannot deadlock), for a test whose figures
    /// compare boots.
    pub fn acquire_all(who: &str) -> Result<VmLock, VmError> {
        let slots = Self::slots();
        let started = Instant::now();
        let mut held = Vec::with_capacity(slots);
        let mut said = false;
        for n in 0..slots {
            loop {
                if let Some(lock) = try_slot(n)? {
                    held.push(lock);
                    break;
                }
                if !said {
                    eprintln!("vm[{who}]: waiting until no other VM runs (it measures time)");
                    said = true;
                }
                give_up_after(started, "every VM slot")?;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if said {
            eprintln!(
                "vm[{who}]: alone on the machine after {:.1?}",
                started.elapsed()
            );
        }
        Ok(VmLock { _slots: held })
    }
}

fn try_slot(n: usize) -> Result<Option<Flock<File>>, VmError> {
    let path = VmLock::path(n);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
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
