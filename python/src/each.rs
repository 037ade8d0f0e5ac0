//! `WaitEach`: a fleet's waits, each VM's outcome read as it ends
//! (`lab_agent_client::wait_each`), from a blocking iterator
//! (`lab_agent.wait_each`) or an async one (`wait_each_async`).
//!
//! The waits run on the runtime from the moment the object is made, each
//! to its own deadline; a read only takes the next outcome to have ended.
//! Dropping the object (leaving the loop, the iterator collected) ends the
//! waits still running.

use crate::client::{Client, deadline, outcome};
use crate::runtime;
use crate::tasks::{self, Deliver, awaitable};
use pyo3::prelude::*;
use std::sync::Arc;
use tokio::sync::Mutex;

#[pyclass(frozen, module = "lab_agent")]
#[derive(Debug)]
pub struct WaitEach {
    each: Arc<Mutex<lab_agent_client::WaitEach>>,
}

/// The next outcome as Python gets it: `(index, readiness JSON or the
/// exception wait_ready would have raised)`, or None at the end.
fn pair(
    py: Python<'_>,
    next: Option<(usize, lab_agent_client::WaitOutcome)>,
) -> PyResult<Py<PyAny>> {
    match next {
        None => Ok(py.None()),
        Some((i, o)) => Ok((i, outcome(py, o.result))
            .into_pyobject(py)?
            .into_any()
            .unbind()),
    }
}

#[pymethods]
impl WaitEach {
    /// Starts waiting for every client until ready, failed or `timeout`
    /// seconds (a bad timeout: `ValueError`, nothing started).
    #[new]
    fn new(py: Python<'_>, clients: Vec<PyRef<'_, Client>>, timeout: f64) -> PyResult<WaitEach> {
        let deadline = deadline(py, timeout)?;
        let clients: Vec<_> = clients.iter().map(|c| c.inner.clone()).collect();
        let _guard = runtime().enter();
        let each = lab_agent_client::wait_each(&clients, deadline);
        Ok(WaitEach {
            each: Arc::new(Mutex::new(each)),
        })
    }

    /// The next outcome to end, blocking with the GIL released (Ctrl-C
    /// raises `KeyboardInterrupt`; the waits go on); None when all ended.
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let each = self.each.clone();
        let next = tasks::block(py, async move { each.lock().await.next().await })?;
        pair(py, next)
    }

    /// `next` as an asyncio awaitable.
    fn next_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let each = self.each.clone();
        awaitable(py, async move {
            let next = each.lock().await.next().await;
            let deliver: Deliver = Box::new(move |py| pair(py, next));
            deliver
        })
    }

    /// How many waits have not ended yet.
    #[getter]
    fn remaining(&self) -> usize {
        self.each.try_lock().map_or(0, |e| e.remaining())
    }
}
