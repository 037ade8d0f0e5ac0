//! How Rust work meets Python: asyncio futures resolved from the tokio
//! runtime, blocking waits that Ctrl-C interrupts, and the rule that keeps
//! both safe at interpreter exit.
//!
//! **At exit.** The runtime's threads are not Python's: at interpreter
//! exit nothing stops them, and a thread that takes the GIL (to resolve a
//! future, or to drop a Python object) while `Py_FinalizeEx` runs crashes
//! the process (SIGSEGV, or SIGABRT from "PyGILState_Release … finalizing").
//! A call abandoned by asyncio (a cancelled task, a loop closed at the end
//! of `asyncio.run`) ends later on a worker thread, often just then. So:
//! every async call is counted while it runs ([`awaitable`]); an `atexit`
//! hook ([`shutdown`], registered when the module loads, so it runs before
//! finalisation) ends every call still running (dropping its request, which
//! closes its connection), waits with the GIL released until each has let
//! go of Python, and then closes the gate: a call that reaches Python after
//! that leaks its few references ([`std::mem::forget`]) instead of taking
//! the GIL. No Python object is ever dropped off the GIL: they are
//! released inside `Python::attach`, or leaked once the interpreter is
//! going away.
//!
//! **Cancellation.** A cancelled asyncio future wakes its Rust call, which
//! is dropped at once: the request, and its connection, with it.
//!
//! **Ctrl-C.** A blocking call waits in slices of [`SIGNAL_POLL`] with the
//! GIL released and runs Python's signal handlers between them, so
//! `KeyboardInterrupt` comes within a slice; the call is then dropped.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What a finished call gives Python, made under the GIL.
pub type Deliver = Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Py<PyAny>> + Send>;

/// How often a blocking call looks for Ctrl-C.
pub const SIGNAL_POLL: Duration = Duration::from_millis(50);
/// The longest the exit hook waits for running calls to let go of Python.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Set by [`shutdown`]: no new call starts, running ones end.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
/// Wakes every running call at shutdown.
static SHUTDOWN: Notify = Notify::const_new();
/// Async calls running (counted from start until they let go of Python).
static IN_FLIGHT: Mutex<usize> = Mutex::new(0);
static IN_FLIGHT_DONE: Condvar = Condvar::new();
/// `true` once the interpreter is going away: nothing takes the GIL then.
/// Held for reading while a call resolves its future, so the exit hook
/// waits for any that is doing so.
static CLOSED: RwLock<bool> = RwLock::new(false);

/// One counted call; uncounted when dropped.
struct InFlight;

impl InFlight {
    fn enter() -> PyResult<InFlight> {
        let mut n = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        if SHUTTING_DOWN.load(Ordering::SeqCst) {
            return Err(PyRuntimeError::new_err(
                "lab_agent is shutting down with the interpreter",
            ));
        }
        *n += 1;
        Ok(InFlight)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut n = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        if *n == 0 {
            IN_FLIGHT_DONE.notify_all();
        }
    }
}

/// `fut` as an asyncio future of the running loop, driven by the tokio
/// runtime; see the module's notes on cancellation and exit.
pub fn awaitable<'py>(
    py: Python<'py>,
    fut: impl Future<Output = Deliver> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>> {
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let target = event_loop.call_method0("create_future")?;
    let cancel = Arc::new(Notify::new());
    target.call_method1(
        "add_done_callback",
        (CancelOnDone {
            cancel: cancel.clone(),
        },),
    )?;
    let guard = InFlight::enter()?;
    let (event_loop, py_target) = (event_loop.unbind(), target.clone().unbind());
    crate::runtime().spawn(async move {
        let outcome = until_cancelled(fut, &cancel).await;
        // The call (its request and connection) is dropped by now; Python
        // is touched on a blocking thread, never a runtime worker.
        tokio::task::spawn_blocking(move || {
            resolve(event_loop, py_target, outcome);
            drop(guard);
        });
    });
    Ok(target)
}

/// `fut`'s output, or `None` when its future was cancelled or the
/// interpreter is exiting (then `fut` is dropped unfinished).
async fn until_cancelled<T>(fut: impl Future<Output = T>, cancel: &Notify) -> Option<T> {
    let mut fut = pin!(fut);
    let mut cancelled = pin!(cancel.notified());
    let mut shutdown = pin!(SHUTDOWN.notified());
    // Registered before the flag is read, so a shutdown in between wakes it.
    shutdown.as_mut().enable();
    if SHUTTING_DOWN.load(Ordering::SeqCst) {
        return None;
    }
    std::future::poll_fn(|cx| {
        if cancelled.as_mut().poll(cx).is_ready() || shutdown.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        fut.as_mut().poll(cx).map(Some)
    })
    .await
}

/// Sets `target`'s result through its loop (`call_soon_threadsafe`: the
/// future belongs to the loop's thread), unless it was cancelled, the loop
/// is closed, or the interpreter is going away.
fn resolve(event_loop: Py<PyAny>, target: Py<PyAny>, outcome: Option<Deliver>) {
    let closed = CLOSED.read().unwrap_or_else(|e| e.into_inner());
    if *closed {
        // Taking the GIL now could crash the process: leak instead.
        std::mem::forget((event_loop, target));
        return;
    }
    Python::attach(move |py| {
        if let Some(deliver) = outcome {
            let (ok, value) = match deliver(py) {
                Ok(v) => (true, v),
                Err(e) => (false, e.into_value(py).into_any()),
            };
            let setter = Resolve;
            // A loop already closed (the program moved on) refuses: fine.
            let _ = event_loop.call_method1(
                py,
                "call_soon_threadsafe",
                (setter, target.clone_ref(py), ok, value),
            );
        }
        drop((event_loop, target));
    });
    drop(closed);
}

/// Called by asyncio when the future is done; a cancelled one wakes (and
/// so drops) its Rust call.
#[pyclass(frozen)]
struct CancelOnDone {
    cancel: Arc<Notify>,
}

#[pymethods]
impl CancelOnDone {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            self.cancel.notify_one();
        }
        Ok(())
    }
}

/// Run on the loop's thread: sets a result or an exception on a future
/// that is not done yet (a cancelled one is left alone).
#[pyclass(frozen)]
struct Resolve;

#[pymethods]
impl Resolve {
    fn __call__(&self, fut: &Bound<'_, PyAny>, ok: bool, value: Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("done")?.is_truthy()? {
            return Ok(());
        }
        if ok {
            fut.call_method1("set_result", (value,))?;
        } else {
            fut.call_method1("set_exception", (value,))?;
        }
        Ok(())
    }
}

/// Runs `fut` on the runtime with the GIL released, in slices of
/// [`SIGNAL_POLL`], running Python's signal handlers between them: Ctrl-C
/// raises `KeyboardInterrupt` within a slice and drops the call (and its
/// connection).
pub fn block<T: Send>(py: Python<'_>, fut: impl Future<Output = T> + Send) -> PyResult<T> {
    let mut fut = pin!(fut);
    loop {
        // The timer is made inside the runtime (it needs its clock).
        let slice = py.detach(|| {
            crate::runtime()
                .block_on(async { tokio::time::timeout(SIGNAL_POLL, fut.as_mut()).await })
        });
        match slice {
            Ok(v) => return Ok(v),
            Err(_) => py.check_signals()?,
        }
    }
}

/// The `atexit` hook: ends every running async call and waits (GIL
/// released, at most [`SHUTDOWN_GRACE`]) until each has let go of Python,
/// then closes the gate so that none takes the GIL again.
#[pyfunction]
#[pyo3(name = "_shutdown")]
pub fn shutdown(py: Python<'_>) {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    SHUTDOWN.notify_waiters();
    py.detach(|| {
        let end = Instant::now() + SHUTDOWN_GRACE;
        let mut n = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        while *n > 0 {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            n = IN_FLIGHT_DONE
                .wait_timeout(n, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(n);
        // Waits for any call resolving its future right now.
        *CLOSED.write().unwrap_or_else(|e| e.into_inner()) = true;
    });
}

/// Registers [`shutdown`] with `atexit`, which runs it before the
/// interpreter finalises.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(shutdown, m)?;
    m.add_function(hook.clone())?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}
