//! `ExecStream`: a streamed exec read one event at a time, from a blocking
//! iterator (`Client.exec_stream`) or an async one (`AsyncClient`).
//!
//! The Rust stream ([`lab_agent_client::ExecStream`]) keeps every bound (the
//! call's deadline, its bytes, the result last or a transport error); this
//! file only decides who holds it. A read takes it out of its slot and puts
//! it back when it succeeds; anything else — an error, Ctrl-C in a blocking
//! read, a cancelled asyncio task, the interpreter exiting — drops the read
//! and the stream with it, which closes the request's connection: the agent
//! then kills the command. Dropping the Python object (a `break` out of the
//! loop) or `close()` does the same between reads.

use crate::error::client_error;
use crate::tasks::{self, Deliver, awaitable};
use lab_agent_client::Error;
use lab_agent_proto::exec::{ExecRequest, StreamEvent};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex, MutexGuard};

/// Where the stream is between reads.
enum Slot {
    /// Not sent yet: `AsyncClient.exec_stream` sends it with the first
    /// `__anext__` (a plain method cannot await).
    Unsent(lab_agent_client::Client, Box<ExecRequest>),
    Open(Box<lab_agent_client::ExecStream>),
    /// Taken by the read running now.
    Reading,
    /// Read to its end, failed, interrupted or closed.
    Done,
}

type Shared = Arc<Mutex<Slot>>;

fn lock(slot: &Shared) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

#[pyclass(frozen, module = "lab_agent")]
pub struct ExecStream {
    slot: Shared,
}

impl std::fmt::Debug for ExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecStream")
            .field("closed", &matches!(*lock(&self.slot), Slot::Done))
            .finish_non_exhaustive()
    }
}

impl ExecStream {
    pub fn open(stream: lab_agent_client::ExecStream) -> ExecStream {
        ExecStream {
            slot: Arc::new(Mutex::new(Slot::Open(Box::new(stream)))),
        }
    }

    pub fn unsent(client: lab_agent_client::Client, req: ExecRequest) -> ExecStream {
        ExecStream {
            slot: Arc::new(Mutex::new(Slot::Unsent(client, Box::new(req)))),
        }
    }

    /// What the next read starts from, or `None` when the stream is over.
    /// Two reads at once (two threads, or an `__anext__` not awaited before
    /// the next) would interleave events: refused.
    fn take(&self) -> PyResult<Option<Slot>> {
        let mut slot = lock(&self.slot);
        match &*slot {
            Slot::Done => Ok(None),
            Slot::Reading => Err(PyRuntimeError::new_err(
                "another call is reading this exec stream: read it from one place at a time",
            )),
            _ => Ok(Some(std::mem::replace(&mut *slot, Slot::Reading))),
        }
    }
}

/// A read in progress: puts the stream back on success; dropped otherwise
/// (an error, or the read itself dropped), the slot is `Done` and the
/// stream, with its connection, is gone. A `close()` meanwhile wins.
struct Reading {
    slot: Shared,
    back: Option<Box<lab_agent_client::ExecStream>>,
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut slot = lock(&self.slot);
        if matches!(*slot, Slot::Reading) {
            *slot = match self.back.take() {
                Some(s) => Slot::Open(s),
                None => Slot::Done,
            };
        }
    }
}

/// The next event from `from` (sending the request first when unsent).
async fn advance(slot: Shared, from: Slot) -> Result<Option<StreamEvent>, Error> {
    let mut reading = Reading { slot, back: None };
    let mut stream = match from {
        Slot::Unsent(client, req) => Box::new(client.exec_stream(&req).await?),
        Slot::Open(s) => s,
        Slot::Reading | Slot::Done => unreachable!("take() hands out only these two"),
    };
    let ev = stream.next_event().await?;
    if ev.is_some() {
        reading.back = Some(stream);
    }
    Ok(ev)
}

/// An event as Python gets it: `("stdout"|"stderr", text)`, or
/// `("result", the result's JSON)`; `None` at the end.
fn event(py: Python<'_>, ev: Option<StreamEvent>) -> PyResult<Py<PyAny>> {
    let pair = match ev {
        None => return Ok(py.None()),
        Some(StreamEvent::Stdout(s)) => ("stdout", s),
        Some(StreamEvent::Stderr(s)) => ("stderr", s),
        Some(StreamEvent::Result(r)) => (
            "result",
            serde_json::to_string(&r).expect("a wire type serializes"),
        ),
    };
    Ok(pair.into_pyobject(py)?.into_any().unbind())
}

#[pymethods]
impl ExecStream {
    /// The next event, blocking with the GIL released; Ctrl-C raises
    /// `KeyboardInterrupt` and ends the stream.
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let Some(from) = self.take()? else {
            return Ok(py.None());
        };
        let ev = tasks::block(py, advance(self.slot.clone(), from))?;
        event(py, ev.map_err(|e| client_error(py, e))?)
    }

    /// `next` as an asyncio awaitable; a cancelled one ends the stream.
    fn next_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let from = self.take()?;
        let slot = self.slot.clone();
        awaitable(py, async move {
            let ev = match from {
                Some(from) => advance(slot, from).await,
                None => Ok(None),
            };
            let deliver: Deliver = Box::new(move |py| match ev {
                Ok(ev) => event(py, ev),
                Err(e) => Err(client_error(py, e)),
            });
            deliver
        })
    }

    /// Ends the stream: its connection closes, and the agent kills the
    /// command if it still runs. A read running meanwhile finishes, and the
    /// stream is dropped after it.
    fn close(&self) {
        let old = std::mem::replace(&mut *lock(&self.slot), Slot::Done);
        drop(old);
    }

    /// Whether the stream is over (read to its end, failed or closed).
    #[getter]
    fn closed(&self) -> bool {
        matches!(*lock(&self.slot), Slot::Done)
    }
}
