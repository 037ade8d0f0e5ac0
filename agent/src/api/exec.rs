//! `POST /v1/exec`: parse, validate, take an exec slot, run, answer.

use crate::api::command::{drive, finish, ids, reserve, respond, start};
use crate::app::App;
use crate::http::Response;
use crate::http::api_error::ApiError;
use crate::http::budget::PER_ANSWER;
use crate::process::capture::{Capped, pump};
use crate::process::identity::Identity;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_LENGTH;
use lab_agent_proto::{ExecRequest, MAX_BODY_BYTES};
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

/// How long a client may take to send a request body once its headers are in.
/// Together with hyper's header timeout this bounds a trickling client.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Execs that may wait for a slot, per slot of `--max-execs`: a burst of
/// up to five times the limit is served in turn instead of refused.
pub const QUEUED_PER_SLOT: usize = 4;
/// How long a queued exec waits for a slot before its 429 (its message
/// says 5 s). A slot held longer is a long command: the client's
/// `Retry-After` pause costs nothing next to it.
pub const QUEUE_WAIT: Duration = Duration::from_secs(5);

/// How much of a command the request line shows.
pub const COMMAND_LOG_CHARS: usize = 200;

/// What the request log line says about an exec.
#[derive(Debug, Default)]
pub struct ExecLog {
    pub user: String,
    /// Cut to [`COMMAND_LOG_CHARS`] already.
    pub command: String,
    pub profile: &'static str,
    pub stdin_bytes: usize,
    pub env_vars: usize,
    pub env_bytes: usize,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Not logged: what the exec closes once its answer is out, with the
    /// line (the pipes at their end, the reaped shell's pidfd), whose
    /// teardowns (out of epoll, closed: two system calls each) were
    /// between the shell's exit and the answer.
    pub spent: Option<Spent>,
}

/// See [`ExecLog::spent`].
pub type Spent = (
    (
        Option<tokio::net::unix::pipe::Receiver>,
        Option<tokio::net::unix::pipe::Receiver>,
    ),
    Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
);

pub async fn handle(
    app: &App,
    req: hyper::Request<Incoming>,
    log: &mut Option<ExecLog>,
) -> Result<Response, ApiError> {
    if app.is_shutting_down() {
        return Err(ApiError::ShuttingDown);
    }
    // The slot comes before the body is read: a client that opens many
    // requests and trickles (or holds) their bodies pins at most
    // `--max-execs` bodies, each also counted in the output budget.
    let slot = take_slot(app).await?;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(MAX_BODY_BYTES as u64)
        .min(MAX_BODY_BYTES as u64);
    let body_budget = reserve(app, declared)?;
    let body = read_body(req, MAX_BODY_BYTES).await?;
    let request = parse(&body)?;
    drop((body, body_budget));
    *log = Some(ExecLog {
        user: request.options.user.clone(),
        // Only what the line shows: a command may be 128 KiB.
        command: crate::logging::cut(&request.command, COMMAND_LOG_CHARS).into_owned(),
        profile: request.options.profile.as_str(),
        stdin_bytes: request.options.stdin.as_ref().map_or(0, String::len),
        env_vars: request.options.env.len(),
        env_bytes: request
            .options
            .env
            .iter()
            .map(|(k, v)| k.len() + 1 + v.len())
            .sum(),
        ..ExecLog::default()
    });
    if let Some(meant) = &request.instance_id {
        let found = ids(app).0;
        if found.as_ref() != Some(meant) {
            return Err(ApiError::InstanceChanged {
                meant: meant.clone(),
                found,
            });
        }
    }
    let identity = Identity::cached(&request.options.user)?;
    if request.stream {
        return crate::api::exec_stream::handle(app, request, &identity, slot);
    }
    // Both streams at their cap, and what sending the answer buffers.
    let mut output = reserve(app, 2 * request.options.max_output_bytes + PER_ANSWER)?;
    let mut job = start(app, &request, &identity)?;
    let cap = request.options.max_output_bytes as usize;
    let (mut out, mut err) = (Capped::new(cap), Capped::new(cap));
    let (stdout, stderr) = (job.stdout.take(), job.stderr.take());
    let mut ended = (None, None);
    let exit = {
        let pumps = async {
            ended = tokio::join!(capture(stdout, &mut out), capture(stderr, &mut err));
        };
        tokio::pin!(pumps);
        drive(&mut job, &request, pumps).await
    };
    let spent = (ended, job.take_pidfd());
    let mut result = finish(ids(app), job, exit?);
    let held = (out.held() + err.held()) as u64;
    (result.stdout_truncated, result.stderr_truncated) = (out.truncated(), err.truncated());
    (result.stdout, result.stderr) = (out.into_string(), err.into_string());
    drop(slot);
    output.shrink_to(held + PER_ANSWER);
    if let Some(l) = log.as_mut() {
        l.exit_code = result.exit_code;
        l.signal = result.signal;
        l.timed_out = result.timed_out;
        l.spent = Some(spent);
    }
    let mut resp = respond(result);
    // Given back once the answer is sent, or dropped with its connection.
    resp.body_mut().hold(output);
    Ok(resp)
}

/// A slot to run in: a free one, or one that comes free within
/// [`QUEUE_WAIT`] while this exec holds a place in the queue (first come,
/// first served: tokio's semaphore hands permits out in order). No place,
/// no slot in time: 429; a slot that came after shutdown began: 429.
async fn take_slot(app: &App) -> Result<OwnedSemaphorePermit, ApiError> {
    let busy = |waited| ApiError::Busy {
        running: app.max_execs,
        waited,
    };
    if let Ok(slot) = app.exec_slots.clone().try_acquire_owned() {
        return Ok(slot);
    }
    let Ok(_place) = app.exec_queue.clone().try_acquire_owned() else {
        return Err(busy(false));
    };
    let slot = tokio::time::timeout(QUEUE_WAIT, app.exec_slots.clone().acquire_owned())
        .await
        .map_err(|_| busy(true))?
        .map_err(|_| busy(true))?;
    if app.is_shutting_down() {
        return Err(ApiError::ShuttingDown);
    }
    Ok(slot)
}

/// Reads the whole body, refusing more than `limit` bytes (by the declared
/// length before reading, by the bytes actually sent while reading) and a
/// client that does not finish within [`BODY_READ_TIMEOUT`].
async fn read_body(req: hyper::Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    if let Some(len) = req.headers().get(CONTENT_LENGTH)
        && let Some(len) = len.to_str().ok().and_then(|s| s.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let (parts, body) = req.into_parts();
    crate::http::recycle_headers(parts.headers);
    let body = Limited::new(body, limit);
    match tokio::time::timeout(BODY_READ_TIMEOUT, body.collect()).await {
        Err(_) => Err(ApiError::BadRequest(format!(
            "request body was not received within {} s",
            BODY_READ_TIMEOUT.as_secs()
        ))),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(ApiError::PayloadTooLarge { limit })
            } else {
                Err(ApiError::BadRequest(format!(
                    "failed to read the request body: {e}"
                )))
            }
        }
    }
}

/// Decodes and validates a request; every problem is a 400 that names it.
pub fn parse(body: &[u8]) -> Result<ExecRequest, ApiError> {
    let req: ExecRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid exec request: {e}")))?;
    req.validate()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(req)
}

/// Reads `pipe` to its end into `sink`; returns the pipe once there (a pipe
/// dropped before, when the shell left it open, is closed at once).
async fn capture(
    pipe: Option<tokio::net::unix::pipe::Receiver>,
    sink: &mut Capped,
) -> Option<tokio::net::unix::pipe::Receiver> {
    let mut p = pipe?;
    pump(&mut p, sink).await.ok().map(|()| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_agent_proto::ExecResult;
    use lab_agent_proto::exec::MAX_COMMAND_BYTES;
    use lab_agent_proto::exec::{LIMIT_MEMORY, LIMIT_PIDS};

    fn bad(body: &str) -> String {
        match parse(body.as_bytes()) {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("{body}: expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn parse_rejects_with_reasons() {
        assert!(bad("").contains("invalid exec request"));
        assert!(bad("[]").contains("invalid exec request"));
        assert!(bad(r#"{"command":"x","bogus":1}"#).contains("unknown field `bogus`"));
        assert!(bad(r#"{"command":"  "}"#).contains("command is empty"));
        assert!(bad(r#"{"command":"x","timeout_secs":0}"#).contains("timeout_secs is 0"));
        assert!(bad(r#"{"command":"x","timeout_secs":3601}"#).contains("1 to 3600"));
        assert!(bad(r#"{"command":"x","timeout_secs":-1}"#).contains("invalid value"));
        assert!(bad(r#"{"command":"x","max_output_bytes":16777217}"#).contains("16 MiB"));
        assert!(bad(r#"{"command":1}"#).contains("invalid type"));
        assert!(bad(r#"{"command":"x","env":{"A":"1","A":"2"}}"#).contains("`A` is given twice"));
        let long = format!(r#"{{"command":"{}"}}"#, "x".repeat(MAX_COMMAND_BYTES + 1));
        assert!(bad(&long).contains("at most 131071 bytes"));
        assert!(bad(r#"{"timeout_secs":5}"#).contains("missing field `command`"));
        let big_env = format!(
            r#"{{"command":"x","env":{{"V":"{}"}}}}"#,
            "v".repeat(MAX_COMMAND_BYTES)
        );
        assert!(bad(&big_env).contains("environment variable `V` is 131073 bytes"));
    }

    #[test]
    fn parse_accepts_the_minimum() {
        let r = parse(br#"{"command":"true"}"#).unwrap();
        assert_eq!(r, ExecRequest::new("true"));
    }

    #[test]
    fn the_response_is_what_serde_writes() {
        let results = [
            ExecResult {
                exit_code: Some(0),
                signal: None,
                timed_out: false,
                duration_ms: 12,
                stdout: "active\n".into(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                limits_hit: Vec::new(),
                max_pids: None,
                max_memory_bytes: None,
                instance_id: None,
                boot_id: None,
            },
            ExecResult {
                exit_code: None,
                signal: Some(9),
                timed_out: true,
                duration_ms: u64::MAX,
                stdout: "\"q\" \\ \u{1} é\n".repeat(10_000),
                stderr: "\u{fffd}".into(),
                stdout_truncated: true,
                stderr_truncated: true,
                limits_hit: vec![LIMIT_PIDS.into(), LIMIT_MEMORY.into()],
                max_pids: Some(4096),
                max_memory_bytes: Some(1 << 30),
                instance_id: Some("0123456789abcdef0123456789abcdef".into()),
                boot_id: Some("6f1c0e1a-2b3c-4d5e-8f90-a1b2c3d4e5f6".into()),
            },
            ExecResult {
                exit_code: Some(1),
                signal: None,
                timed_out: false,
                duration_ms: 5,
                stdout: String::new(),
                stderr: "fork: retry".into(),
                stdout_truncated: false,
                stderr_truncated: false,
                limits_hit: vec![LIMIT_PIDS.into()],
                max_pids: Some(20),
                max_memory_bytes: None,
                instance_id: None,
                boot_id: None,
            },
            ExecResult {
                exit_code: Some(-1),
                signal: None,
                timed_out: false,
                duration_ms: 0,
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                limits_hit: Vec::new(),
                max_pids: None,
                max_memory_bytes: None,
                instance_id: None,
                boot_id: None,
            },
        ];
        for r in results {
            let want = serde_json::to_vec(&r).unwrap();
            let resp = respond(r);
            assert_eq!(resp.body().to_vec(), want);
            let hint = hyper::body::Body::size_hint(resp.body()).exact();
            assert_eq!(hint, Some(want.len() as u64));
        }
    }
}
