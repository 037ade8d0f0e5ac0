//! One VM at a time on this machine.
//!
//! TCG keeps both cores busy; two guests at once would double every timing
//! and make the figures meaningless. Test binaries run as separate processes
//! (and tests within one binary as threads), so the lock is an advisory
//! `flock` on a machine-wide file: each holder opens its own file
//! description, which serialises threads and processes alike, and the kernel
//! drops it when the holder dies.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::VmError;

/// How long a test waits for another test's VM before giving up.
const WAIT_LIMIT: Duration = Duration::from_secs(30 * 60);

/// Held for a VM's whole life; released on drop.
#[derive(Debug)]
pub struct VmLock {
    _lock: Flock<File>,
}

impl VmLock {
    /// The lock file: about the machine's CPU, so not under a cache dir that
    /// a run may override.
    pub fn path() -> PathBuf {
        PathBuf::from("/tmp/lab-agent-vm.lock")
    }

    /// Waits (up to 30 min, saying so on stderr) until no other VM runs.
    pub fn acquire(who: &str) -> Result<VmLock, VmError> {
        let path = Self::path();
        let started = Instant::now();
        let mut said = false;
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| VmError::io(format!("open the VM lock `{}`", path.display()), e))?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => {
                    if said {
                        eprintln!("vm[{who}]: got the VM lock after {:.1?}", started.elapsed());
                    }
                    return Ok(VmLock { _lock: lock });
                }
                Err((_, Errno::EWOULDBLOCK)) => {}
                Err((_, errno)) => {
                    return Err(VmError::io(
                        format!("lock `{}`", path.display()),
                        std::io::Error::from(errno),
                    ));
                }
            }
            if !said {
                eprintln!(
                    "vm[{who}]: another VM is running, waiting for `{}`",
                    path.display()
                );
                said = true;
            }
            if started.elapsed() > WAIT_LIMIT {
                return Err(VmError::io(
                    format!("lock `{}`", path.display()),
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("another VM held it for over {WAIT_LIMIT:?}"),
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
