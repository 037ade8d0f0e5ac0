//! Starting qemu so that it never outlives its parent process, unless
//! asked to.
//!
//! A [`super::Machine`] kills qemu when dropped, but `Drop` does not run
//! when the process itself is killed (a CI timeout, `kill -9`). The child
//! therefore asks the kernel for SIGKILL when its parent dies
//! (`PR_SET_PDEATHSIG`). That signal follows the *thread* that forked, not
//! the process, and threads (test threads, runtime workers) end early; so
//! every qemu is forked by one thread that lives as long as the process.
//!
//! qemu also gets a process group of its own: a Ctrl-C at the terminal
//! reaches the parent alone, which then stops qemu in order (or, for
//! `labctl try --keep`, leaves it running).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

type Request = (Command, Sender<io::Result<Child>>);

static SPAWNER: Mutex<Option<Sender<Request>>> = Mutex::new(None);

/// Spawns `cmd` in a process group of its own from the process-lifetime
/// spawner thread; unless `detached`, with SIGKILL as its parent-death
/// signal.
pub fn spawn(mut cmd: Command, detached: bool) -> io::Result<Child> {
    cmd.process_group(0);
    if !detached {
        // SAFETY: the closure runs between fork and exec and only calls
        // prctl(2), which is async-signal-safe; it allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(io::Error::from)
            });
        }
    }
    let (reply_tx, reply_rx) = channel();
    spawner()?
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("the qemu spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the qemu spawner thread is gone"))?
}

fn spawner() -> io::Result<Sender<Request>> {
    let mut guard = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = guard.as_ref() {
        return Ok(tx.clone());
    }
    let (tx, rx) = channel::<Request>();
    std::thread::Builder::new()
        .name("qemu-spawner".into())
        .spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
        })?;
    *guard = Some(tx.clone());
    Ok(tx)
}
