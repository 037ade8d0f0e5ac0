//! An exec's command, whichever way its answer goes (the plain JSON of
//! `exec` or the stream of `exec_stream`): reserving its output from the
//! budget, starting it, driving it to its end or its timeout and kill,
//! finishing it into an [`ExecResult`], and writing that answer.

use crate::app::App;
use crate::http::Response;
use crate::http::api_error::ApiError;
use crate::http::body::Body;
use crate::http::budget::Reservation;
use crate::http::json_body;
use crate::process::identity::Identity;
use crate::process::{self, Cwd, Exit, Job, Limits, Script, ShellCommand, Stdio};
use hyper::StatusCode;
use lab_agent_proto::ExecRequest;
use lab_agent_proto::ExecResult;
use lab_agent_proto::exec::{LIMIT_MEMORY, LIMIT_PIDS};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Grace between SIGTERM and SIGKILL when a command times out.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long to keep reading output after the shell exited: a background
/// process it left holding the pipes must not hold up the answer.
pub const OUTPUT_LINGER: Duration = Duration::from_millis(200);

pub(crate) fn reserve(app: &App, bytes: u64) -> Result<Reservation, ApiError> {
    app.output
        .try_reserve(bytes)
        .ok_or_else(|| ApiError::OutputBudget {
            limit: app.output.limit(),
        })
}

/// The [`ExecResult`] document as serde would write it, with the output
/// escaped while it is sent rather than copied into a serialized body
/// first: with 8 commands at the default 1 MiB cap that copy was another
/// ~1 MiB at the peak (BENCHMARKS.md, memory).
pub(crate) fn respond(r: ExecResult) -> Response {
    // Exhaustive, so a new field cannot be forgotten here.
    let ExecResult {
        exit_code,
        signal,
        timed_out,
        duration_ms,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        limits_hit,
        max_pids,
        max_memory_bytes,
        instance_id,
        boot_id,
    } = r;
    let opt = |v: Option<i32>| v.map_or_else(|| "null".to_owned(), |n| n.to_string());
    // Room for every piece below, with both ids and a limit: the queue
    // the last answer left (`Body`'s `Drop`), never grown.
    let mut body = Body::with_parts(16);
    body.push_bytes(format!(
        r#"{{"exit_code":{},"signal":{},"timed_out":{timed_out},"duration_ms":{duration_ms},"stdout":""#,
        opt(exit_code),
        opt(signal)
    ));
    body.push_json_str(stdout);
    body.push_bytes(&br#"","stderr":""#[..]);
    body.push_json_str(stderr);
    body.push_bytes(format!(
        r#"","stdout_truncated":{stdout_truncated},"stderr_truncated":{stderr_truncated}"#
    ));
    // Only when a limit was hit (as serde skips them): the usual answer is
    // unchanged. The names are the agent's own constants: no escaping.
    for (i, name) in limits_hit.iter().enumerate() {
        body.push_bytes(if i == 0 {
            r#","limits_hit":[""#
        } else {
            r#"",""#
        });
        body.push_bytes(name.clone());
        if i + 1 == limits_hit.len() {
            body.push_bytes(r#""]"#);
        }
    }
    // Pieces, not `format!`: its static template is a relocation apiece.
    if let Some(n) = max_pids {
        body.push_bytes(r#","max_pids":"#);
        body.push_bytes(n.to_string());
    }
    if let Some(n) = max_memory_bytes {
        body.push_bytes(r#","max_memory_bytes":"#);
        body.push_bytes(n.to_string());
    }
    // Ids the agent made or the kernel gave (hex, a UUID): no escaping.
    if let Some(id) = instance_id {
        body.push_bytes(r#","instance_id":""#);
        body.push_bytes(id);
        body.push_bytes("\"");
    }
    if let Some(id) = boot_id {
        body.push_bytes(r#","boot_id":""#);
        body.push_bytes(id);
        body.push_bytes("\"");
    }
    body.push_bytes("}");
    json_body(StatusCode::OK, body)
}

/// Starts the command (a 400 when it cannot start: unknown user, bad cwd).
pub(crate) fn start(app: &App, req: &ExecRequest, identity: &Identity) -> Result<Job, ApiError> {
    let cwd = match &req.options.cwd {
        Some(dir) => Cwd::Dir(Path::new(dir)),
        None => Cwd::Home,
    };
    Ok(process::spawn(
        ShellCommand {
            identity,
            script: Script::Command(&req.command),
            profile: req.options.profile,
            cwd,
            env: &req.options.env,
            stdin: if req.options.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            },
            stdout: Stdio::piped(),
            stderr: Stdio::piped(),
            leave_running: req.options.leave_running,
            limits: Some(Limits {
                pids: req.options.max_pids.map(u64::from),
                memory: req.options.max_memory_bytes,
            }),
        },
        &app.jobs,
    )?)
}

/// Runs a started command to its end (or its timeout and kill) while
/// `output` reads its pipes and its stdin is written; then gives `output`
/// [`OUTPUT_LINGER`] to finish. One body for the plain answer and the
/// streamed one (`exec_stream`), behind a `dyn` so it is compiled once.
pub(crate) async fn drive(
    job: &mut Job,
    req: &ExecRequest,
    mut output: Pin<&mut (dyn Future<Output = ()> + Send + '_)>,
) -> Result<Exit, ApiError> {
    let stdin = job.stdin.take();
    // A command that never reads its stdin must not block anything:
    // this future is simply dropped when the command is done.
    let in_f = async {
        if let (Some(mut pipe), Some(data)) = (stdin, req.options.stdin.as_deref()) {
            let _ = pipe.write_all(data.as_bytes()).await;
        }
    };
    let waited = job.wait(Duration::from_secs(req.options.timeout_secs), KILL_GRACE);
    tokio::pin!(in_f, waited);
    let (mut out_done, mut in_done) = (false, false);
    let exit = loop {
        tokio::select! {
            e = &mut waited => break e,
            _ = &mut output, if !out_done => out_done = true,
            _ = &mut in_f, if !in_done => in_done = true,
        }
    };
    if !out_done {
        let _ = tokio::time::timeout(OUTPUT_LINGER, output).await;
    }
    exit.map_err(|e| ApiError::Internal(format!("failed to wait for the command: {e}")))
}

/// The result of an ended command, without its output (the caller's), and
/// the end of its job: what it left is killed (unless asked to leave it).
pub(crate) fn finish(ids: Ids, job: Job, exit: Exit) -> ExecResult {
    // Read before the job ends; with the values, so a report can say
    // which limit (a timed-out bomb hit pids.max too).
    let (mut limits_hit, mut max_pids, mut max_memory_bytes) = (Vec::new(), None, None);
    if let Some((hit, limits)) = job.limits_hit() {
        if hit.pids {
            limits_hit.push(LIMIT_PIDS.to_owned());
            max_pids = limits.pids.map(|n| n as u32);
        }
        if hit.memory {
            limits_hit.push(LIMIT_MEMORY.to_owned());
            max_memory_bytes = limits.memory;
        }
    }
    // Ended: what it held is given back while the answer is sent.
    drop(job);
    ExecResult {
        exit_code: exit.code(),
        signal: exit.signal(),
        timed_out: exit.timed_out,
        duration_ms: exit.duration.as_millis() as u64,
        stdout_truncated: false,
        stderr_truncated: false,
        stdout: String::new(),
        stderr: String::new(),
        limits_hit,
        max_pids,
        max_memory_bytes,
        instance_id: ids.0,
        boot_id: ids.1,
    }
}

/// The instance and boot ids every exec answer carries.
pub(crate) type Ids = (Option<String>, Option<String>);

pub(crate) fn ids(app: &App) -> Ids {
    (
        app.readiness.instance_id(),
        app.readiness.config().boot_id.clone(),
    )
}
