//! Output as it happens: a streamed exec ([`Client::exec_stream`]) and the
//! setup log from an offset ([`Client::setup_log`]).
//!
//! Bounded like every call: one deadline for the whole stream (the
//! command's timeout plus the client's request timeout), at most the bytes
//! a plain answer may have, each event's text within what the agent can
//! send for `max_output_bytes`. A stream that ends without its `result`
//! line is [`Error::Transport`], never a success.

use crate::Client;
use crate::client::{
    Limits, busy_resume, check_exec_result, collect, deadline_after, exec_body,
    exec_response_limit, exec_stream_limit, status_error, transport,
};
use crate::error::{Error, Request};
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_TYPE;
use hyper::{Method, StatusCode};
use lab_agent_proto::{
    ExecRequest, LOG_OFFSET_HEADER, LOG_RESTARTED_HEADER, MAX_LOG_CHUNK_BYTES, MAX_READY_WAIT_SECS,
    SETUP_STATE_HEADER, SetupState, StreamEvent, paths,
};
use std::time::Duration;
use tokio::time::Instant;

/// A streamed exec's answer, read one event at a time with
/// [`ExecStream::next_event`].
pub struct ExecStream {
    /// `None` once a plain answer was read whole (`queued`).
    body: Option<Incoming>,
    /// A plain answer's result, given as the one event.
    queued: Option<StreamEvent>,
    request: Request,
    req: ExecRequest,
    deadline: Instant,
    budget: Duration,
    /// Bytes not yet split into lines.
    pending: Vec<u8>,
    /// Bytes read in all, against `limit`.
    read: usize,
    limit: usize,
    /// Text received per stream, against `exec_stream_limit`.
    stdout: u64,
    stderr: u64,
    ended: bool,
    got_result: bool,
    /// The client that sent it: its pin holds the result's instance.
    client: Client,
}

impl std::fmt::Debug for ExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecStream")
            .field("request", &self.request)
            .field("got_result", &self.got_result)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Runs a command with its output streamed (`"stream": true`): the
    /// events come as the command writes, the result last (then `None`).
    /// Errors before the command starts (400, busy past the retries) come
    /// from this call, as from [`Client::exec`]; a 429 is retried the same
    /// way. The request is never sent twice once it may have started. A
    /// pinned client's is pinned as [`Client::exec`]'s.
    pub async fn exec_stream(&self, req: &ExecRequest) -> Result<ExecStream, Error> {
        let (mut req, mut pinned) = self.pin_request(req);
        req.stream = true;
        let mut body = exec_body(&req);
        let budget =
            Duration::from_secs(req.options.timeout_secs).saturating_add(self.request_timeout());
        let start = Instant::now();
        let deadline = deadline_after(start, budget);
        let request = self.request(Method::POST, paths::EXEC);
        let timeout = || Error::Timeout {
            request: request.clone(),
            after: budget,
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let opened = self.open(Method::POST, paths::EXEC, Some(body.clone()), &request);
            let resp = tokio::time::timeout_at(deadline, opened)
                .await
                .map_err(|_| timeout())??;
            if resp.status() == StatusCode::OK {
                // Something between (or a stand-in) that answers the plain
                // way: the same answer, read whole under the plain limits.
                let ndjson = resp
                    .headers()
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with(lab_agent_proto::exec::STREAM_CONTENT_TYPE));
                let (body, queued) = if ndjson {
                    (Some(resp.into_body()), None)
                } else {
                    let limit = exec_response_limit(req.options.max_output_bytes);
                    let raw = tokio::time::timeout_at(deadline, collect(resp, &request, limit))
                        .await
                        .map_err(|_| timeout())??;
                    let r = serde_json::from_slice(&raw.body).map_err(|source| Error::Decode {
                        request: request.clone(),
                        status: raw.status,
                        source,
                    })?;
                    let r = check_exec_result(request.clone(), &req, r)?;
                    self.check_instance(r.instance_id.as_deref(), None)?;
                    (None, Some(StreamEvent::Result(r)))
                };
                return Ok(ExecStream {
                    body,
                    queued,
                    request: request.clone(),
                    deadline,
                    budget,
                    pending: Vec::new(),
                    read: 0,
                    limit: exec_response_limit(req.options.max_output_bytes),
                    req,
                    stdout: 0,
                    stderr: 0,
                    ended: false,
                    got_result: false,
                    client: self.clone(),
                });
            }
            let limit = crate::client::ERROR_RESPONSE_LIMIT;
            let resp = tokio::time::timeout_at(deadline, collect(resp, &request, limit))
                .await
                .map_err(|_| timeout())??;
            match resp.status {
                StatusCode::TOO_MANY_REQUESTS => {}
                StatusCode::BAD_REQUEST if pinned && self.refuses_pin(&resp) => {
                    (req, pinned) = self.pin_request(&req);
                    body = exec_body(&req);
                    continue;
                }
                StatusCode::CONFLICT => return Err(self.pin_refusal(request, &req, &resp)),
                _ => return Err(status_error(request, &resp)),
            }
            let resume = busy_resume(request.clone(), &resp, attempts, start, deadline)?;
            tokio::time::sleep_until(resume).await;
        }
    }

    /// The setup log's bytes from `offset`, waiting up to `wait` seconds
    /// (≤ 60) while the setup runs and nothing new was written.
    pub async fn setup_log(&self, offset: u64, wait: u64) -> Result<SetupLog, Error> {
        let path = format!("{}?offset={offset}&wait={wait}", paths::SETUP_LOG);
        let request = self.request(Method::GET, &path);
        if wait > MAX_READY_WAIT_SECS {
            return Err(Error::Protocol {
                request,
                problem: format!("wait={wait}: the agent waits at most {MAX_READY_WAIT_SECS} s"),
            });
        }
        let budget = Duration::from_secs(wait).saturating_add(self.request_timeout());
        let limits = Limits {
            ok: MAX_LOG_CHUNK_BYTES as usize + 64 * 1024,
            other: crate::client::ERROR_RESPONSE_LIMIT,
        };
        let resp = self
            .request_limited(
                Method::GET,
                &path,
                None,
                deadline_after(Instant::now(), budget),
                budget,
                limits,
                &[StatusCode::OK],
            )
            .await?;
        if resp.status != StatusCode::OK {
            return Err(status_error(request, &resp));
        }
        let header = |name| resp.headers.get(name).and_then(|v| v.to_str().ok());
        let bad = |problem: String| Error::Protocol {
            request: request.clone(),
            problem,
        };
        let restarted = header(LOG_RESTARTED_HEADER).is_some();
        let next_offset: u64 = header(LOG_OFFSET_HEADER)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(format!("no valid `{LOG_OFFSET_HEADER}` header")))?;
        let start = if restarted { 0 } else { offset };
        if next_offset != start + resp.body.len() as u64 {
            return Err(bad(format!(
                "`{LOG_OFFSET_HEADER}` {next_offset} is not {start} + the {} bytes sent",
                resp.body.len()
            )));
        }
        let state = header(SETUP_STATE_HEADER).unwrap_or_default();
        let state = [
            SetupState::Pending,
            SetupState::Running,
            SetupState::Succeeded,
            SetupState::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == state)
        .ok_or_else(|| {
            bad(format!(
                "`{SETUP_STATE_HEADER}` is `{}`, not a setup state",
                lab_agent_proto::text::escape(state)
            ))
        })?;
        Ok(SetupLog {
            bytes: resp.body,
            next_offset,
            state,
            restarted,
        })
    }
}

/// One answer of `/v1/setup/log`.
#[derive(Debug, Clone)]
pub struct SetupLog {
    /// The log's bytes as the setup wrote them: escape before showing
    /// (`lab_agent_proto::text`).
    pub bytes: Bytes,
    /// Where the next call starts.
    pub next_offset: u64,
    pub state: SetupState,
    /// The log was shorter than the offset asked for (a new setup run):
    /// `bytes` start at 0.
    pub restarted: bool,
}

impl ExecStream {
    /// The next event; `None` after the result. A stream that breaks or
    /// ends before its result is [`Error::Transport`]; past the call's
    /// deadline [`Error::Timeout`]; more than the request allows
    /// [`Error::TooLarge`] or [`Error::Protocol`].
    pub async fn next_event(&mut self) -> Result<Option<StreamEvent>, Error> {
        if let Some(ev) = self.queued.take() {
            (self.got_result, self.ended) = (true, true);
            return Ok(Some(ev));
        }
        loop {
            if let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=i).collect();
                return self.event(&line).map(Some);
            }
            if self.got_result {
                if self.pending.is_empty() && self.ended {
                    return Ok(None);
                }
                if !self.pending.is_empty() {
                    return Err(self.protocol("bytes after the result".into()));
                }
            } else if self.ended {
                return Err(transport(
                    &self.request,
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the stream ended without the command's result",
                    ),
                ));
            }
            let Some(body) = self.body.as_mut() else {
                self.ended = true;
                continue;
            };
            let frame = tokio::time::timeout_at(self.deadline, body.frame())
                .await
                .map_err(|_| Error::Timeout {
                    request: self.request.clone(),
                    after: self.budget,
                })?;
            match frame {
                None => self.ended = true,
                Some(Err(e)) => return Err(transport(&self.request, e)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.read += data.len();
                        if self.read > self.limit {
                            return Err(Error::TooLarge {
                                request: self.request.clone(),
                                limit: self.limit,
                                declared: None,
                            });
                        }
                        self.pending.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    fn protocol(&self, problem: String) -> Error {
        Error::Protocol {
            request: self.request.clone(),
            problem,
        }
    }

    fn event(&mut self, line: &[u8]) -> Result<StreamEvent, Error> {
        if self.got_result {
            return Err(self.protocol("an event after the result".into()));
        }
        let ev: StreamEvent = serde_json::from_slice(line).map_err(|source| Error::Decode {
            request: self.request.clone(),
            status: StatusCode::OK,
            source,
        })?;
        let most = exec_stream_limit(self.req.options.max_output_bytes);
        let (name, seen) = match &ev {
            StreamEvent::Stdout(s) => ("stdout", {
                self.stdout += s.len() as u64;
                self.stdout
            }),
            StreamEvent::Stderr(s) => ("stderr", {
                self.stderr += s.len() as u64;
                self.stderr
            }),
            StreamEvent::Result(_) => ("", 0),
        };
        if seen > most {
            return Err(self.protocol(format!(
                "{seen} bytes of {name}, more than `max_output_bytes` {} allows",
                self.req.options.max_output_bytes
            )));
        }
        match ev {
            StreamEvent::Result(r) => {
                self.got_result = true;
                let r = check_exec_result(self.request.clone(), &self.req, r)?;
                self.client.check_instance(r.instance_id.as_deref(), None)?;
                Ok(StreamEvent::Result(r))
            }
            ev => Ok(ev),
        }
    }

    /// Every event to the end, with the output gathered into the result's
    /// `stdout`/`stderr` (what [`Client::exec`] would have answered).
    pub async fn collect(mut self) -> Result<lab_agent_proto::ExecResult, Error> {
        let (mut out, mut err) = (String::new(), String::new());
        while let Some(ev) = self.next_event().await? {
            match ev {
                StreamEvent::Stdout(s) => out.push_str(&s),
                StreamEvent::Stderr(s) => err.push_str(&s),
                StreamEvent::Result(mut r) => {
                    out.push_str(&r.stdout);
                    err.push_str(&r.stderr);
                    (r.stdout, r.stderr) = (out, err);
                    // Drain to the end so a trailing byte is noticed.
                    while self.next_event().await?.is_some() {}
                    return Ok(r);
                }
            }
        }
        unreachable!("next_event ends only after a result")
    }
}
