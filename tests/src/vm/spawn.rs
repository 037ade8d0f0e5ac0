//! Starting qemu so that it never outlives the test process.
//!
//! `Drop` for [`super::Vm`] kills qemu, but `Drop` does not run when the test
//! process itself is killed (a CI timeout, Ctrl-C). The child therefore asks
//! the kernel for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`). That
//! signal follows the *thread* that forked, not the process, and test threads
//! end early; so every qemu is forked by one thread that lives as long as the
//! process.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

type Request = (Command, Sender<io::Result<Child>>);

static SPAWNER: Mutex<Option<Sender<Request>>> = Mutex::new(None);

/// Spawns `cmd` from the process-lifetime spawner thread, with SIGKILL as its
/// parent-death signal.
pub fn spawn(mut cmd: Command) -> io::Result<Child> {
    // SAFETY: the closure runs between fork and exec and only calls prctl(2),
    // which is async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(io::Error::from)
        });
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
        .name("vm-spawner".into())
        .spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
        })?;
    *guard = Some(tx.clone());
    Ok(tx)
}
