//! Ctrl-C and SIGTERM during a run: the work stops, the caller's cleanup
//! runs (the agent or VM stopped, its files removed), and the front end
//! exits 130 (143), as a shell would report the signal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signal that ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted {
    /// As a person says it: "Ctrl-C", "SIGTERM".
    pub signal: &'static str,
    /// The exit status that reports it: 128 + the signal's number.
    pub code: u8,
}

/// Runs `work` unless SIGINT or SIGTERM comes first.
pub async fn interruptible<T>(work: impl Future<Output = T>) -> Result<T, Interrupted> {
    // Each on its own: a signal that cannot be watched (SIGINT is ignored in
    // a shell's background job) must not leave the other one caught and
    // then unheard, which would swallow it.
    async fn arrived(signal: &mut Option<Signal>) {
        match signal {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::select! {
        out = work => Ok(out),
        () = arrived(&mut int) => Err(Interrupted { signal: "Ctrl-C", code: 130 }),
        () = arrived(&mut term) => Err(Interrupted { signal: "SIGTERM", code: 143 }),
    }
}

/// A blocking `start` (a VM's: a KVM trial can take seconds) on a thread of
/// its own while this one watches for signals. On one, `start` sees its
/// `cancelled` turn true, and what it started anyway goes to `undo`: an
/// interrupted start stops its qemu and removes its run dir (it holds the
/// token) like an interrupted wait does.
pub fn start_watched<T: Send, E: Send>(
    rt: &tokio::runtime::Runtime,
    start: impl FnOnce(&dyn Fn() -> bool) -> Result<T, E> + Send,
    undo: impl FnOnce(T),
) -> Result<Result<T, E>, Interrupted> {
    let cancel = AtomicBool::new(false);
    std::thread::scope(|s| {
        let starting = s.spawn(|| start(&|| cancel.load(Ordering::Relaxed)));
        let waited = rt.block_on(interruptible(async {
            while !starting.is_finished() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
        if waited.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        let started = starting
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match waited {
            Ok(()) => Ok(started),
            Err(interrupted) => {
                if let Ok(target) = started {
                    undo(target);
                }
                Err(interrupted)
            }
        }
    })
}
