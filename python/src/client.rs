//! `Client`: one agent's URL and token over `lab_agent_client::Client`.
//!
//! Each call exists twice: `ready()` blocks the calling thread with the GIL
//! released (so other Python threads run, and one `Client` serves many
//! threads: the Rust client is a cloneable handle over one connection
//! pool), and `ready_async()` returns an asyncio awaitable driven by the
//! same runtime. Answers are JSON text; the package's Python modules
//! (`lab_agent/_*.py`) type them.

use crate::error::{client_error, plain, session_error};
use crate::lab::Lab;
use crate::runtime;
use crate::stream::ExecStream;
use crate::tasks::{self, Deliver, awaitable};
use lab_agent_client::client::DEFAULT_REQUEST_TIMEOUT;
use lab_agent_client::{Error, wait_all as rust_wait_all};
use lab_agent_proto::exec::ExecRequest;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Whether this build's `ExecRequest` has `profile` (the agent's
/// `login|system|none`): asked of the wire type itself, so the answer
/// follows `proto/`. When not, `exec(profile=...)` is refused (Python
/// says so) rather than dropped silently.
pub fn exec_has_profile() -> bool {
    serde_json::from_str::<ExecRequest>(r#"{"command":"true","profile":"login"}"#).is_ok()
}

/// The wire type's own parsing (defaults, unknown fields refused) and the
/// agent's request rules (`ExecRequest::validate`, as `labctl exec` checks
/// them), so a bad request is a `ValueError` before anything is sent.
fn parse_exec(py: Python<'_>, request: &str) -> PyResult<ExecRequest> {
    let invalid = |e: String| {
        plain(
            py,
            PyValueError::new_err(format!("invalid exec request: {e}")),
            None,
        )
    };
    let req: ExecRequest = serde_json::from_str(request).map_err(|e| invalid(e.to_string()))?;
    req.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(req)
}

#[pyclass(frozen, module = "lab_agent")]
#[derive(Debug)]
pub struct Client {
    pub(crate) inner: lab_agent_client::Client,
}

/// Runs `fut` to completion on the shared runtime with the GIL released,
/// Ctrl-C raising `KeyboardInterrupt` ([`tasks::block`]).
fn block<T: Send>(
    py: Python<'_>,
    fut: impl Future<Output = Result<T, Error>> + Send,
) -> PyResult<T> {
    tasks::block(py, fut)?.map_err(|e| client_error(py, e))
}

/// A call's JSON answer, or its error as the exception, for Python.
fn deliver_json(r: Result<String, Error>) -> Deliver {
    Box::new(move |py| match r {
        Ok(text) => Ok(text.into_pyobject(py)?.into_any().unbind()),
        Err(e) => Err(client_error(py, e)),
    })
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("a wire type serializes")
}

fn value_error(py: Python<'_>, message: String) -> PyErr {
    plain(py, PyValueError::new_err(message), None)
}

/// A timeout in seconds as a deadline from now.
pub(crate) fn deadline(py: Python<'_>, timeout: f64) -> PyResult<Instant> {
    let d = Duration::try_from_secs_f64(timeout).map_err(|_| {
        value_error(
            py,
            format!("timeout must be a number of seconds >= 0, not {timeout}"),
        )
    })?;
    // Finite and in range for a `Duration`, yet past what `Instant` can
    // hold (about 2.9e11 years): an error, not a panic in the addition.
    Instant::now().checked_add(d).ok_or_else(|| {
        value_error(
            py,
            format!("timeout of {timeout} seconds ends past what the clock can count: give fewer"),
        )
    })
}

/// The longest `request_timeout` taken. The client adds it to instants
/// and to what a request asks the agent to spend, which must not
/// overflow; and an answer awaited longer than a day is a hang (the one
/// bound every front end shares, `lab_agent_proto::guest::MAX_WAIT_SECS`).
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(lab_agent_proto::guest::MAX_WAIT_SECS);

/// `request_timeout` seconds as the client's request timeout: above 0 (a
/// zero would end every call before its answer) and at most
/// [`MAX_REQUEST_TIMEOUT`].
fn request_timeout(py: Python<'_>, secs: f64) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() && d <= MAX_REQUEST_TIMEOUT => Ok(d),
        _ => Err(value_error(
            py,
            format!(
                "request_timeout must be a number of seconds above 0 and at most {}, not {secs}",
                MAX_REQUEST_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// What `labctl grade` does without `--wait`, in the library
/// (`Client::grade_checked`): refuse a VM that is not ready (`NotReady`,
/// or `SetupFailed` for a failed one, nothing run), take the guest's
/// `LAB_DIR` from `/v1/info` unless given, grade, and give the report as
/// `--json` prints it.
async fn grade(
    client: lab_agent_client::Client,
    lab: lab_agent_proto::lab::Lab,
    lab_dir: Option<String>,
) -> Result<String, Error> {
    let report = client.grade_checked(&lab, lab_dir.as_deref()).await?;
    Ok(serde_json::to_string_pretty(&report).expect("a report serializes"))
}

impl Client {
    fn lab_for_grade(
        py: Python<'_>,
        lab: &Lab,
        checks: Option<Vec<String>>,
    ) -> PyResult<lab_agent_proto::lab::Lab> {
        let mut lab = lab.inner.clone();
        lab.select_checks(&checks.unwrap_or_default())
            .map_err(|e| plain(py, crate::error::LabError::new_err(e.to_string()), None))?;
        Ok(lab)
    }
}

#[pymethods]
impl Client {
    /// A client for the agent at `url`, with the token given or read from
    /// `token_file` (read by the agent's own rule: the owner's alone, trailing
    /// whitespace trimmed, a valid token). Exactly one of the two.
    /// `request_timeout` (seconds; default the Rust client's
    /// `DEFAULT_REQUEST_TIMEOUT`) is how long an answer is awaited beyond
    /// what the request asks the agent to spend. `instance` pins the client
    /// to that instance id (`ClientBuilder::instance`); one that is not 32
    /// lowercase hex digits is a `ValueError`. `kube_server`,
    /// `kube_token_file` and `kube_ca_file` (all three or none): the API
    /// server a `kubevirt://` URL goes through (`KubeApi::from_files`);
    /// none: the pod's own.
    #[new]
    #[pyo3(signature = (url, token=None, token_file=None, request_timeout=None, instance=None, kube_server=None, kube_token_file=None, kube_ca_file=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &str,
        token: Option<String>,
        token_file: Option<PathBuf>,
        request_timeout: Option<f64>,
        instance: Option<String>,
        kube_server: Option<String>,
        kube_token_file: Option<PathBuf>,
        kube_ca_file: Option<PathBuf>,
    ) -> PyResult<Client> {
        if let Some(id) = instance
            .as_deref()
            .filter(|id| !lab_agent_proto::lifecycle::is_instance_id(id))
        {
            let e = Error::InvalidInstanceId { id: id.to_owned() };
            return Err(value_error(py, e.to_string()));
        }
        let request_timeout = match request_timeout {
            Some(secs) => self::request_timeout(py, secs)?,
            None => DEFAULT_REQUEST_TIMEOUT,
        };
        let token = match (token, token_file) {
            (Some(t), None) => t,
            (None, Some(path)) => lab_agent_proto::token_file::read_token_file(&path)
                .map_err(|e| plain(py, PyValueError::new_err(e.to_string()), None))?,
            _ => {
                return Err(plain(
                    py,
                    PyValueError::new_err("give exactly one of `token` and `token_file`"),
                    None,
                ));
            }
        };
        // hyper-util's pool spawns its connection tasks: enter the runtime.
        let _guard = runtime().enter();
        let mut builder = lab_agent_client::Client::builder().request_timeout(request_timeout);
        if let Some(id) = instance {
            builder = builder.instance(id);
        }
        match (kube_server, kube_token_file, kube_ca_file) {
            (None, None, None) => {}
            (Some(server), Some(token), Some(ca)) => {
                let api = lab_agent_client::KubeApi::from_files(&server, token, &ca);
                builder = builder.kube_api(api.map_err(|e| value_error(py, e.to_string()))?);
            }
            _ => {
                return Err(value_error(
                    py,
                    "give `kube_server`, `kube_token_file` and `kube_ca_file` together, or none \
                     (in a pod: its own service account)"
                        .to_owned(),
                ));
            }
        }
        builder
            .build(url, &token)
            .map(|inner| Client { inner })
            .map_err(|e| match e {
                // A bad argument, as every other one.
                Error::InvalidUrl { .. } => plain(
                    py,
                    PyValueError::new_err(e.to_string()),
                    Some(
                        "give the agent's base URL with its scheme, e.g. `http://10.0.0.5:8899`"
                            .into(),
                    ),
                ),
                e => client_error(py, e),
            })
    }

    #[getter]
    fn url(&self) -> &str {
        self.inner.url()
    }

    /// The instance id the client is pinned to, or None.
    #[getter]
    fn instance(&self) -> Option<&str> {
        self.inner.instance()
    }

    fn __repr__(&self) -> String {
        format!("Client({:?})", self.inner.url())
    }

    fn ready(&self, py: Python<'_>) -> PyResult<String> {
        block(py, self.inner.ready()).map(|r| json(&r))
    }

    fn ready_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.inner.clone();
        awaitable(py, async move {
            deliver_json(c.ready().await.map(|r| json(&r)))
        })
    }

    /// The agent's `/v1/info` answer (JSON): version, OS, uptime, boot id,
    /// `lab_dir`, instance, root disk.
    fn info(&self, py: Python<'_>) -> PyResult<String> {
        block(py, self.inner.info()).map(|r| json(&r))
    }

    fn info_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.inner.clone();
        awaitable(
            py,
            async move { deliver_json(c.info().await.map(|r| json(&r))) },
        )
    }

    fn wait_ready(&self, py: Python<'_>, timeout: f64) -> PyResult<String> {
        let deadline = deadline(py, timeout)?;
        block(py, self.inner.wait_ready(deadline)).map(|r| json(&r))
    }

    fn wait_ready_async<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
        let deadline = deadline(py, timeout)?;
        let c = self.inner.clone();
        awaitable(py, async move {
            deliver_json(c.wait_ready(deadline).await.map(|r| json(&r)))
        })
    }

    /// `request` is the JSON of an `ExecRequest` (the Python side builds
    /// it from keyword arguments); an invalid one is a `ValueError`.
    fn exec(&self, py: Python<'_>, request: &str) -> PyResult<String> {
        let req = parse_exec(py, request)?;
        block(py, self.inner.exec(&req)).map(|r| json(&r))
    }

    fn exec_async<'py>(&self, py: Python<'py>, request: &str) -> PyResult<Bound<'py, PyAny>> {
        let req = parse_exec(py, request)?;
        let c = self.inner.clone();
        awaitable(py, async move {
            deliver_json(c.exec(&req).await.map(|r| json(&r)))
        })
    }

    /// `exec` with the output streamed: the request is sent now (errors
    /// before the command starts are raised here, as by `exec`), the
    /// events are read from the returned `ExecStream`.
    fn exec_stream(&self, py: Python<'_>, request: &str) -> PyResult<ExecStream> {
        let req = parse_exec(py, request)?;
        block(py, self.inner.exec_stream(&req)).map(ExecStream::open)
    }

    /// `exec_stream` for asyncio: nothing is sent until the first
    /// `next_async` (a plain method cannot await), whose errors are then
    /// the call's.
    fn exec_stream_unsent(&self, py: Python<'_>, request: &str) -> PyResult<ExecStream> {
        let req = parse_exec(py, request)?;
        Ok(ExecStream::unsent(self.inner.clone(), req))
    }

    /// The setup log from `offset`, long-polled up to `wait` seconds:
    /// `(bytes, next_offset, setup_state, restarted)`.
    #[pyo3(signature = (offset=0, wait=0))]
    fn setup_log(&self, py: Python<'_>, offset: u64, wait: u64) -> PyResult<Py<PyAny>> {
        let log = block(py, self.inner.setup_log(offset, wait))?;
        setup_log_tuple(py, log)
    }

    #[pyo3(signature = (offset=0, wait=0))]
    fn setup_log_async<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        wait: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.inner.clone();
        awaitable(py, async move {
            let r = c.setup_log(offset, wait).await;
            let deliver: Deliver = Box::new(move |py| match r {
                Ok(log) => setup_log_tuple(py, log),
                Err(e) => Err(client_error(py, e)),
            });
            deliver
        })
    }

    #[pyo3(signature = (lab, checks=None, lab_dir=None))]
    fn grade(
        &self,
        py: Python<'_>,
        lab: &Lab,
        checks: Option<Vec<String>>,
        lab_dir: Option<String>,
    ) -> PyResult<String> {
        let lab = Client::lab_for_grade(py, lab, checks)?;
        let c = self.inner.clone();
        block(py, grade(c, lab, lab_dir))
    }

    #[pyo3(signature = (lab, checks=None, lab_dir=None))]
    fn grade_async<'py>(
        &self,
        py: Python<'py>,
        lab: &Lab,
        checks: Option<Vec<String>>,
        lab_dir: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lab = Client::lab_for_grade(py, lab, checks)?;
        let c = self.inner.clone();
        awaitable(
            py,
            async move { deliver_json(grade(c, lab, lab_dir).await) },
        )
    }
}

/// A `/v1/setup/log` answer for Python: the bytes as the setup wrote
/// them, where the next read starts, the setup's state, and whether the
/// log started over (a new setup run: the bytes are from 0).
fn setup_log_tuple(py: Python<'_>, log: lab_agent_client::SetupLog) -> PyResult<Py<PyAny>> {
    let bytes = pyo3::types::PyBytes::new(py, &log.bytes);
    let t = (bytes, log.next_offset, log.state.as_str(), log.restarted);
    Ok(t.into_pyobject(py)?.into_any().unbind())
}

/// One wait's outcome as Python sees it: the readiness JSON, or the
/// exception (not raised) that `wait_ready` would have raised.
pub(crate) fn outcome(
    py: Python<'_>,
    result: Result<lab_agent_proto::ReadyResponse, Error>,
) -> Py<PyAny> {
    match result {
        Ok(r) => json(&r)
            .into_pyobject(py)
            .expect("a str converts")
            .into_any()
            .unbind(),
        Err(e) => client_error(py, e).into_value(py).into_any(),
    }
}

fn outcomes(py: Python<'_>, results: Vec<lab_agent_client::WaitOutcome>) -> Vec<Py<PyAny>> {
    results.into_iter().map(|o| outcome(py, o.result)).collect()
}

fn rust_clients(clients: &[PyRef<'_, Client>]) -> Vec<lab_agent_client::Client> {
    clients.iter().map(|c| c.inner.clone()).collect()
}

/// Waits for every client until ready, failed or `timeout` seconds; one
/// outcome per client, in order.
#[pyfunction]
pub fn wait_all(
    py: Python<'_>,
    clients: Vec<PyRef<'_, Client>>,
    timeout: f64,
) -> PyResult<Vec<Py<PyAny>>> {
    let deadline = deadline(py, timeout)?;
    let clients = rust_clients(&clients);
    let results = tasks::block(py, rust_wait_all(&clients, deadline, |_, _| {}))?;
    Ok(outcomes(py, results))
}

/// `wait_all` as an awaitable.
#[pyfunction]
pub fn wait_all_async<'py>(
    py: Python<'py>,
    clients: Vec<PyRef<'py, Client>>,
    timeout: f64,
) -> PyResult<Bound<'py, PyAny>> {
    let deadline = deadline(py, timeout)?;
    let clients = rust_clients(&clients);
    awaitable(py, async move {
        let results = rust_wait_all(&clients, deadline, |_, _| {}).await;
        let deliver: Deliver =
            Box::new(move |py| Ok(outcomes(py, results).into_pyobject(py)?.into_any().unbind()));
        deliver
    })
}

/// Each VM's report (`--json` text) or its exception (not raised).
fn grade_outcomes(py: Python<'_>, results: Vec<lab_agent_client::GradeOutcome>) -> Vec<Py<PyAny>> {
    results
        .into_iter()
        .map(|o| match o.result {
            Ok(r) => serde_json::to_string_pretty(&r)
                .expect("a report serializes")
                .into_pyobject(py)
                .expect("a str converts")
                .into_any()
                .unbind(),
            Err(e) => client_error(py, e).into_value(py).into_any(),
        })
        .collect()
}

/// Grades `lab` on every client, at most `concurrency` at once; one
/// outcome per client, in order (`lab_agent_client::grade_all`).
#[pyfunction]
pub fn grade_all(
    py: Python<'_>,
    clients: Vec<PyRef<'_, Client>>,
    lab: &Lab,
    concurrency: usize,
) -> PyResult<Vec<Py<PyAny>>> {
    let clients = rust_clients(&clients);
    let lab = lab.inner.clone();
    let results = tasks::block(py, lab_agent_client::grade_all(&clients, &lab, concurrency))?;
    Ok(grade_outcomes(py, results))
}

/// `grade_all` as an awaitable.
#[pyfunction]
pub fn grade_all_async<'py>(
    py: Python<'py>,
    clients: Vec<PyRef<'py, Client>>,
    lab: &Lab,
    concurrency: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let clients = rust_clients(&clients);
    let lab = lab.inner.clone();
    awaitable(py, async move {
        let results = lab_agent_client::grade_all(&clients, &lab, concurrency).await;
        let deliver: Deliver = Box::new(move |py| {
            Ok(grade_outcomes(py, results)
                .into_pyobject(py)?
                .into_any()
                .unbind())
        });
        deliver
    })
}

/// A session of `names[i]` → `clients[i]`; a bad one is a `ValueError`.
fn rust_session(
    py: Python<'_>,
    names: Vec<String>,
    clients: &[PyRef<'_, Client>],
) -> PyResult<lab_agent_client::Session> {
    if names.len() != clients.len() {
        return Err(value_error(
            py,
            format!("{} names for {} clients", names.len(), clients.len()),
        ));
    }
    lab_agent_client::Session::new(names.into_iter().zip(rust_clients(clients)))
        .map_err(|e| session_error(py, e))
}

/// Each VM's name and readiness JSON, in the session's order.
async fn session_wait(
    session: lab_agent_client::Session,
    deadline: Instant,
) -> Result<Vec<(String, String)>, lab_agent_client::SessionError> {
    let ready = session.wait_ready(deadline).await?;
    Ok(ready.into_iter().map(|(n, r)| (n, json(&r))).collect())
}

/// The session's report, as `labctl grade --vm … --json` prints it.
async fn session_grade(
    session: lab_agent_client::Session,
    lab: lab_agent_proto::lab::Lab,
    lab_dir: Option<String>,
) -> Result<String, lab_agent_client::SessionError> {
    let report = session.grade(&lab, lab_dir.as_deref()).await?;
    Ok(serde_json::to_string_pretty(&report).expect("a report serializes"))
}

/// `Session.wait_ready`: every VM ready, or the first that fails raised
/// with its `vm` (`lab_agent_client::Session::wait_ready`).
#[pyfunction]
pub fn session_wait_ready(
    py: Python<'_>,
    names: Vec<String>,
    clients: Vec<PyRef<'_, Client>>,
    timeout: f64,
) -> PyResult<Vec<(String, String)>> {
    let deadline = deadline(py, timeout)?;
    let session = rust_session(py, names, &clients)?;
    tasks::block(py, session_wait(session, deadline))?.map_err(|e| session_error(py, e))
}

/// `session_wait_ready` as an awaitable.
#[pyfunction]
pub fn session_wait_ready_async<'py>(
    py: Python<'py>,
    names: Vec<String>,
    clients: Vec<PyRef<'py, Client>>,
    timeout: f64,
) -> PyResult<Bound<'py, PyAny>> {
    let deadline = deadline(py, timeout)?;
    let session = rust_session(py, names, &clients)?;
    awaitable(py, async move {
        let r = session_wait(session, deadline).await;
        let deliver: Deliver = Box::new(move |py| match r {
            Ok(v) => Ok(v.into_pyobject(py)?.into_any().unbind()),
            Err(e) => Err(session_error(py, e)),
        });
        deliver
    })
}

/// `Session.grade`: one report for the session, nothing run when a VM is
/// not ready (`lab_agent_client::Session::grade`).
#[pyfunction]
#[pyo3(signature = (names, clients, lab, checks=None, lab_dir=None))]
pub fn session_grade_json(
    py: Python<'_>,
    names: Vec<String>,
    clients: Vec<PyRef<'_, Client>>,
    lab: &Lab,
    checks: Option<Vec<String>>,
    lab_dir: Option<String>,
) -> PyResult<String> {
    let lab = Client::lab_for_grade(py, lab, checks)?;
    let session = rust_session(py, names, &clients)?;
    tasks::block(py, session_grade(session, lab, lab_dir))?.map_err(|e| session_error(py, e))
}

/// `session_grade_json` as an awaitable.
#[pyfunction]
#[pyo3(signature = (names, clients, lab, checks=None, lab_dir=None))]
pub fn session_grade_json_async<'py>(
    py: Python<'py>,
    names: Vec<String>,
    clients: Vec<PyRef<'py, Client>>,
    lab: &Lab,
    checks: Option<Vec<String>>,
    lab_dir: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let lab = Client::lab_for_grade(py, lab, checks)?;
    let session = rust_session(py, names, &clients)?;
    awaitable(py, async move {
        let r = session_grade(session, lab, lab_dir).await;
        let deliver: Deliver = Box::new(move |py| match r {
            Ok(text) => Ok(text.into_pyobject(py)?.into_any().unbind()),
            Err(e) => Err(session_error(py, e)),
        });
        deliver
    })
}

/// For `python/bench/exec_overhead.py` only: `n` exec round trips of
/// `command` by the Rust client itself (same runtime, same connection pool
/// as `client`'s Python calls), each one's seconds. What Python adds per
/// call is the difference to `client.exec` timed from Python.
#[pyfunction]
pub fn _rust_exec_timings(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    command: String,
    user: String,
    cwd: String,
    n: usize,
) -> PyResult<Vec<f64>> {
    let c = client.inner.clone();
    let req = ExecRequest::new(command).user(user).cwd(cwd);
    block(py, async move {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            c.exec(&req).await?;
            out.push(t.elapsed().as_secs_f64());
        }
        Ok(out)
    })
}
