//! The exception hierarchy, mirroring `lab_agent_client::Error`'s
//! predicates: a backend catches `Unauthorized` where Rust code asks
//! `is_unauthorized()`. Every exception is an `AgentError` and carries
//! `status` (HTTP status, or None), `code` (the agent's error code, or
//! None), `hint`, `agent_message` (the agent's error message as sent, or
//! None), `may_have_started` (for `AgentWentAway`: whether the command
//! may have run; else None) and, when the agent reported one, `ready` (its
//! readiness answer as a `lab_agent.Ready`). Messages show the guest's text
//! escaped (`lab_agent_proto::text`); the attributes hold it raw. Hints
//! name what a Python caller changes (`request_timeout=`, `wait_ready`),
//! not `labctl`'s flags ([`python_hint`]).

use lab_agent_client::Error;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    lab_agent,
    AgentError,
    PyException,
    "Base of every lab_agent error."
);
create_exception!(
    lab_agent,
    Unauthorized,
    AgentError,
    "The agent refused the token (401); retrying will not help."
);
create_exception!(
    lab_agent,
    Unreachable,
    AgentError,
    "No answer from the agent: refused, reset, or a wait that never got one."
);
create_exception!(
    lab_agent,
    AgentWentAway,
    Unreachable,
    "The agent restarted, crashed or was reset between calls and an exec met its dead \
     kept-alive connection; may_have_started says whether the command may have run \
     (it was not sent again)."
);
create_exception!(
    lab_agent,
    Timeout,
    AgentError,
    "A deadline passed: connecting, an answer, or a wait for readiness."
);
create_exception!(
    lab_agent,
    WaitTimeout,
    Timeout,
    "wait_ready's deadline passed while the agent answered, not ready yet."
);
create_exception!(
    lab_agent,
    SetupFailed,
    AgentError,
    "The lab's setup failed (exit_code, log_tail, ready)."
);
create_exception!(
    lab_agent,
    NotReady,
    AgentError,
    "grade() or grade_all() found the VM not ready, so nothing was run (ready: its \
     answer, with the state and reason)."
);
create_exception!(
    lab_agent,
    InstanceChanged,
    AgentError,
    "The client is pinned to an instance and another one answered: the VM was reset \
     (expected, found, first_boot_at); the student's work inside it is gone. pinned_by \
     says whose pin it was: \"caller\" (the client's instance=) or \"grade\" (a grade \
     holds its checks to the instance it began on). Nothing was graded or run (an \
     agent older than pinned execs: the exec's answer is checked after it ran)."
);
create_exception!(
    lab_agent,
    InstanceUnknown,
    AgentError,
    "The client is pinned to an instance and the agent names none (an older agent): \
     which life of the VM answered cannot be told (expected)."
);
create_exception!(
    lab_agent,
    Rejected,
    AgentError,
    "The agent answered with an error (status and code say which)."
);
create_exception!(
    lab_agent,
    Busy,
    Timeout,
    "exec found the agent busy (429) until its deadline: the command never started."
);
create_exception!(
    lab_agent,
    TooLarge,
    AgentError,
    "The answer was larger than the request allows (a lab-agent never sends it)."
);
create_exception!(
    lab_agent,
    MalformedAnswer,
    AgentError,
    "The answer was not the JSON expected, whatever its status."
);
create_exception!(
    lab_agent,
    ProtocolError,
    AgentError,
    "The answer says what no lab-agent says: an exit code or signal out of range, \
     too much output, a relative lab_dir, a flood of interim (1xx) responses."
);
create_exception!(
    lab_agent,
    LabError,
    AgentError,
    "lab.toml or the lab's files are wrong, or a check name is unknown."
);
create_exception!(
    lab_agent,
    RenderError,
    AgentError,
    "The payload could not be rendered (agent binary, token, names, size)."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AgentError", py.get_type::<AgentError>())?;
    m.add("Unauthorized", py.get_type::<Unauthorized>())?;
    m.add("Unreachable", py.get_type::<Unreachable>())?;
    m.add("AgentWentAway", py.get_type::<AgentWentAway>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    m.add("WaitTimeout", py.get_type::<WaitTimeout>())?;
    m.add("SetupFailed", py.get_type::<SetupFailed>())?;
    m.add("NotReady", py.get_type::<NotReady>())?;
    m.add("InstanceChanged", py.get_type::<InstanceChanged>())?;
    m.add("InstanceUnknown", py.get_type::<InstanceUnknown>())?;
    m.add("Rejected", py.get_type::<Rejected>())?;
    m.add("Busy", py.get_type::<Busy>())?;
    m.add("TooLarge", py.get_type::<TooLarge>())?;
    m.add("MalformedAnswer", py.get_type::<MalformedAnswer>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add("LabError", py.get_type::<LabError>())?;
    m.add("RenderError", py.get_type::<RenderError>())?;
    Ok(())
}

/// The exception for `e`: the first predicate that holds picks the class,
/// in the order a backend decides (401 first: nothing else will work).
/// The message is the error's `Display`, where the guest's text is
/// escaped; the raw text is in `agent_message` (and `ready`, `log_tail`).
pub fn client_error(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    client_error_saying(py, e, message)
}

/// A session's error for Python: the VM's error as [`client_error`] makes
/// it, its message starting with the VM's name and its `vm` attribute set;
/// the session not being the lab's is a `ValueError`.
pub fn session_error(py: Python<'_>, e: lab_agent_client::SessionError) -> PyErr {
    match e {
        lab_agent_client::SessionError::Vm { vm, error } => {
            let message = format!("VM `{vm}`: {error}");
            let err = client_error_saying(py, *error, message);
            let vm = vm.into_pyobject(py).map(|o| o.into_any());
            with_attrs(py, err, [("vm", vm)])
        }
        e @ lab_agent_client::SessionError::Mismatch(_) => plain(
            py,
            pyo3::exceptions::PyValueError::new_err(e.to_string()),
            None,
        ),
    }
}

fn client_error_saying(py: Python<'_>, e: Error, message: String) -> PyErr {
    // Credentials that cannot be used: an argument's fault, as in Python.
    let err = if matches!(e, Error::Kube { .. }) {
        return plain(py, pyo3::exceptions::PyValueError::new_err(message), None);
    } else if e.is_unauthorized() {
        Unauthorized::new_err(message)
    } else if e.is_too_large() {
        TooLarge::new_err(message)
    } else if e.is_malformed() {
        MalformedAnswer::new_err(message)
    } else if e.is_protocol_error() {
        ProtocolError::new_err(message)
    } else if e.is_busy() {
        Busy::new_err(message)
    } else if e.is_agent_went_away() {
        AgentWentAway::new_err(message)
    } else if e.is_instance_changed() {
        InstanceChanged::new_err(message)
    } else if e.is_instance_unknown() {
        InstanceUnknown::new_err(message)
    } else if e.is_setup_failed() {
        SetupFailed::new_err(message)
    } else if e.is_not_ready() {
        NotReady::new_err(message)
    } else if matches!(e, Error::WaitTimeout { .. }) && !e.is_unreachable() {
        WaitTimeout::new_err(message)
    } else if e.is_timeout() {
        Timeout::new_err(message)
    } else if e.is_unreachable() {
        Unreachable::new_err(message)
    } else if e.status().is_some() {
        Rejected::new_err(message)
    } else {
        AgentError::new_err(message)
    };
    let err = match &e {
        Error::InstanceChanged {
            expected,
            found,
            first_boot_at,
            pinned_by,
            ..
        } => with_attrs(
            py,
            err,
            [
                (
                    "expected",
                    expected.as_str().into_pyobject(py).map(|o| o.into_any()),
                ),
                (
                    "found",
                    found.as_str().into_pyobject(py).map(|o| o.into_any()),
                ),
                ("first_boot_at", first_boot_at.as_deref().into_pyobject(py)),
                (
                    "pinned_by",
                    pinned_by.as_str().into_pyobject(py).map(|o| o.into_any()),
                ),
            ],
        ),
        Error::InstanceUnknown { expected, .. } => with_attrs(
            py,
            err,
            [(
                "expected",
                expected.as_str().into_pyobject(py).map(|o| o.into_any()),
            )],
        ),
        // Every `Unreachable`: KubeVirt's refusal's HTTP status, else None
        // (a TLS failure, or no relay at all).
        _ if err.is_instance_of::<Unreachable>(py) => with_attrs(
            py,
            err,
            [(
                "relay_status",
                e.relay_status().into_pyobject(py).map(|o| o.into_any()),
            )],
        ),
        _ => err,
    };
    let ready = e.ready_response();
    let setup = ready.map(|r| &r.setup);
    let agent_message = match &e {
        Error::Status { message, .. } | Error::Busy { message, .. } => Some(message.as_str()),
        _ => None,
    };
    let attrs = [
        ("agent_message", agent_message.into_pyobject(py)),
        ("status", e.status().map(|s| s.as_u16()).into_pyobject(py)),
        ("code", e.error_code().map(|c| c.as_str()).into_pyobject(py)),
        ("hint", python_hint(&e).into_pyobject(py)),
        ("may_have_started", e.may_have_started().into_pyobject(py)),
        ("ready", Ok(ready_object(py, ready))),
        (
            "exit_code",
            setup.and_then(|s| s.exit_code).into_pyobject(py),
        ),
        (
            "log_tail",
            setup.and_then(|s| s.log_tail.clone()).into_pyobject(py),
        ),
    ];
    with_attrs(py, err, attrs)
}

/// A readiness answer as Python's `Ready` (`lab_agent._ready`), None
/// without one; its JSON text only when that module cannot be imported
/// (the native module loaded without its package).
fn ready_object<'py>(
    py: Python<'py>,
    ready: Option<&lab_agent_proto::ReadyResponse>,
) -> Bound<'py, PyAny> {
    let Some(r) = ready else {
        return py.None().into_bound(py);
    };
    let text = serde_json::to_string(r).expect("a ReadyResponse serializes");
    py.import("lab_agent._ready")
        .and_then(|m| m.getattr("_ready")?.call1((text.as_str(),)))
        .unwrap_or_else(|_| pyo3::types::PyString::new(py, &text).into_any())
}

/// [`Error::hint`] in a Python caller's terms where the Rust one names a
/// `labctl` flag or a builder method.
pub fn python_hint(e: &Error) -> Option<String> {
    use std::io::ErrorKind;
    let hint = match e {
        Error::InvalidInstanceId { .. } => {
            "give the id recorded from the VM's first ready \
             answer (`Ready.instance.id`, from `wait_ready`, `wait_all` or `wait_each`)"
        }
        Error::Connect { source, .. } if source.kind() == ErrorKind::ConnectionRefused => {
            "nothing listens there yet: is `lab-agent` running on that address and port? A \
             VM's agent starts some seconds into boot; `wait_ready(timeout)` (or `wait_each`) \
             retries until it answers"
        }
        Error::Timeout { .. } => {
            "the agent or the VM is overloaded or paused: allow more \
             time for the answer (`request_timeout=` when making the client)"
        }
        Error::Status { status, .. } if status.as_u16() == 401 => {
            "the token does not match \
             the agent's: use the token the VM's payload was made with (`render_secret(...).token`)"
        }
        Error::InstanceUnknown { .. } => {
            "update the VM's lab-agent to one that reports its \
             `instance` (and check its state dir is writable), or make the client without \
             `instance=`"
        }
        Error::NotReady { ready, .. } if ready.state != lab_agent_proto::ReadyState::Failed => {
            "grade once it is ready: wait for it first (`wait_ready(timeout)`, or `wait_each` \
             for many VMs)"
        }
        _ => return e.hint(),
    };
    Some(hint.to_owned())
}

/// `err` with attributes set on its value; an attribute that cannot be
/// made is left out (it would only hide the error itself).
pub fn with_attrs<'py, E>(
    py: Python<'py>,
    err: PyErr,
    attrs: impl IntoIterator<Item = (&'static str, Result<Bound<'py, PyAny>, E>)>,
) -> PyErr {
    let value = err.value(py);
    for (name, v) in attrs {
        if let Ok(v) = v {
            let _ = value.setattr(name, v);
        }
    }
    err
}

/// A failure that is not the agent's: bad arguments, a lab, a render.
pub fn plain(py: Python<'_>, err: PyErr, hint: Option<String>) -> PyErr {
    let none = py.None().into_bound(py);
    let attrs: [(&str, PyResult<Bound<'_, PyAny>>); 8] = [
        ("agent_message", Ok(none.clone())),
        ("status", Ok(none.clone())),
        ("code", Ok(none.clone())),
        ("hint", hint.into_pyobject(py).map_err(PyErr::from)),
        ("may_have_started", Ok(none.clone())),
        ("ready", Ok(none.clone())),
        ("exit_code", Ok(none.clone())),
        ("log_tail", Ok(none)),
    ];
    with_attrs(py, err, attrs)
}
