//! [`Client`]: one agent, its base URL and token, over hyper-util's pooled
//! HTTP/1.1 client.
//!
//! The pool is hyper-util's (`client::legacy`): it retries a request that
//! provably never reached the agent (a kept-alive connection the agent
//! closed just before), and drops connections idle longer than
//! [`POOL_IDLE_TIMEOUT`], below the agent's 10 s idle close, so a request
//! is not written into a connection the agent is closing. What is ours on
//! top: every response body is read up to a limit (a student controls the
//! agent in their VM), `TCP_NODELAY` (exec latency is benchmarked against
//! ssh), and errors that tell "not up yet" (refused, reset, closed before a
//! response) from real ones.
//!
//! An agent that restarts (a reboot, a crash, a reset) leaves dead
//! connections in the pool, and one can die under the next request after
//! hyper has taken it. When a *reused* connection dies before any byte of
//! the answer (`reuse.rs` tells), a read (`GET`: `ready`, `info`) is sent
//! once more on a fresh connection, within the call's one deadline; any
//! other request (an exec) is not sent again and fails with
//! [`Error::AgentWentAway`], saying whether it may have started. A fresh
//! connection that dies is an ordinary [`Error::Transport`]: no retry.
//!
//! Checked calls ([`Client::ready`], [`Client::exec`], [`Client::info`])
//! turn an unexpected status into [`Error::Status`];
//! [`Client::request_unchecked`] hands back any status with its body.

mod builder;
mod limits;
mod wire;

use builder::checked_pin;
pub use builder::{ClientBuilder, Dialer, Dialing};
pub use limits::*;
use wire::*;
pub(crate) use wire::{busy_resume, deadline_after, status_error, transport};

use crate::error::{Error, PinnedBy, Request};
use crate::interim::{self, Guarded};
use crate::reuse;
use crate::transport::{self, Conn, Remote, Target};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderMap, HeaderValue, RETRY_AFTER,
};
use hyper::{Method, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use lab_agent_proto::{ErrorBody, ExecRequest, ExecResult, InfoResponse, ReadyResponse, paths};
use serde::de::DeserializeOwned;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

type Pool = hyper_util::client::legacy::Client<Counted, Full<Bytes>>;

/// A lab-agent at one URL. Cheap to clone: clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// The instance id every answer must carry ([`ClientBuilder::instance`],
    /// [`Client::pinned`]); `None` takes any.
    pin: Option<Arc<str>>,
    /// Where `pin` came from, for the error that says it was broken.
    pinned_by: PinnedBy,
}

struct Inner {
    /// The URL as messages name it: `http://host:port` plus an optional
    /// path prefix, without trailing `/`, or another channel's URL
    /// (`vsock://…`, `kubevirt://…`).
    base: String,
    /// What request URIs start with: `base` for `http://`, else
    /// `http://localhost` (the connector dials the channel).
    origin: String,
    /// Whether `base` is not an `http://` URL (a request is then named
    /// "PATH via URL").
    channel: bool,
    /// `host:port` for the `Host` header.
    authority: String,
    /// `Bearer <token>`, marked sensitive so it never shows in debug output.
    auth: HeaderValue,
    connect_timeout: Duration,
    request_timeout: Duration,
    pub(crate) long_poll: Duration,
    pool: Pool,
    /// The same connector without a pool: every request on a connection of
    /// its own. A read whose kept-alive connection died under it is sent
    /// again here, so the second try is never another dead pooled one.
    fresh: Pool,
    /// Connections opened so far (a diagnostic: grading should open one).
    opened: Arc<AtomicU64>,
    /// The agent refused `instance_id` in an exec request (it predates
    /// the field): a pinned exec is sent without it, and its answer's
    /// instance is checked instead (after the command ran).
    exec_pin_unknown: AtomicBool,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.base)
            .field("instance", &self.pin)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// A response of any status, for callers that judge statuses themselves.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Client {
    /// A client with default timeouts. The token is sent as
    /// `Authorization: Bearer …` and never appears in `Debug` or errors.
    pub fn new(url: &str, token: &str) -> Result<Client, Error> {
        ClientBuilder::default().build(url, token)
    }

    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The allowance of one call past what it waits for on purpose.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// The agent's base URL, as used in messages.
    pub fn url(&self) -> &str {
        &self.inner.base
    }

    /// This client pinned to instance `id` (see [`ClientBuilder::instance`]),
    /// sharing its connection pool; [`Error::InvalidInstanceId`] for an id
    /// that is not one.
    pub fn pinned(&self, id: &str) -> Result<Client, Error> {
        Ok(Client {
            inner: self.inner.clone(),
            pin: Some(checked_pin(id)?),
            pinned_by: PinnedBy::Caller,
        })
    }

    /// [`Client::pinned`] by a grade, to the instance it began on.
    pub(crate) fn pinned_for_grade(&self, id: &str) -> Result<Client, Error> {
        Ok(Client {
            pinned_by: PinnedBy::Grade,
            ..self.pinned(id)?
        })
    }

    /// The instance id this client is pinned to, if any.
    pub fn instance(&self) -> Option<&str> {
        self.pin.as_deref()
    }

    /// Holds an answer's instance to the pin: `found` is the id the answer
    /// carries (`None`: it carries none), `first_boot_at` when it says.
    pub(crate) fn check_instance(
        &self,
        found: Option<&str>,
        first_boot_at: Option<&str>,
    ) -> Result<(), Error> {
        let Some(expected) = self.pin.as_deref() else {
            return Ok(());
        };
        match found {
            Some(id) if id == expected => Ok(()),
            Some(id) => Err(Error::InstanceChanged {
                url: self.inner.base.clone(),
                expected: expected.to_owned(),
                found: id.to_owned(),
                first_boot_at: first_boot_at.map(str::to_owned),
                pinned_by: self.pinned_by,
            }),
            None => Err(Error::InstanceUnknown {
                url: self.inner.base.clone(),
                expected: expected.to_owned(),
            }),
        }
    }

    /// How many TCP connections this client (and its clones) has opened.
    /// A diagnostic: a grading run over a healthy agent opens one.
    pub fn connections_opened(&self) -> u64 {
        self.inner.opened.load(Ordering::Relaxed)
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.inner.connect_timeout
    }

    pub(crate) fn long_poll(&self) -> Duration {
        self.inner.long_poll
    }

    /// One readiness poll. Both 200 (ready) and 503 (not ready) carry a
    /// [`ReadyResponse`] and are returned as `Ok`; look at `state`. Like
    /// every read, it is sent once more on a fresh connection when its
    /// kept-alive one dies before the answer (an agent that restarted).
    pub async fn ready(&self) -> Result<ReadyResponse, Error> {
        self.ready_wait(Duration::ZERO).await
    }

    /// A readiness long-poll: the agent answers when the state becomes
    /// `ready` or `failed`, or after `wait` (whole seconds, at most 60).
    pub async fn ready_wait(&self, wait: Duration) -> Result<ReadyResponse, Error> {
        let secs = wait.as_secs().min(lab_agent_proto::MAX_READY_WAIT_SECS);
        let path = if secs == 0 {
            paths::READY.to_owned()
        } else {
            format!("{}?wait={secs}", paths::READY)
        };
        let timeout = Duration::from_secs(secs).saturating_add(self.inner.request_timeout);
        let deadline = deadline_after(Instant::now(), timeout);
        const OK: &[StatusCode] = &[StatusCode::OK, StatusCode::SERVICE_UNAVAILABLE];
        let limits = Limits {
            ok: READY_RESPONSE_LIMIT,
            other: ERROR_RESPONSE_LIMIT,
        };
        let resp = self
            .request_limited(Method::GET, &path, None, deadline, timeout, limits, OK)
            .await?;
        let request = self.request(Method::GET, &path);
        match resp.status {
            StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE => {
                match serde_json::from_slice::<ReadyResponse>(&resp.body) {
                    Ok(r) => {
                        check_instance_shape(&request, r.instance.as_ref())?;
                        let i = r.instance.as_ref();
                        self.check_instance(
                            i.map(|i| i.id.as_str()),
                            i.map(|i| i.first_boot_at.as_str()),
                        )?;
                        Ok(r)
                    }
                    // A 503 without a readiness body comes from something in
                    // between (a proxy, a Service without endpoints): a
                    // status error, which waiters treat as "not up yet". One
                    // that looks like a readiness body (an object with a
                    // `state`) but is not one is the agent's own answer, and
                    // a wrong one.
                    Err(_)
                        if resp.status == StatusCode::SERVICE_UNAVAILABLE
                            && !looks_like_ready(&resp.body) =>
                    {
                        Err(status_error(request, &resp))
                    }
                    Err(source) => Err(Error::Decode {
                        request,
                        status: resp.status,
                        source,
                    }),
                }
            }
            _ => Err(status_error(request, &resp)),
        }
    }

    /// Runs one command in the guest. A command that ran and failed is
    /// `Ok` with its exit code; `Err` means it could not be run (400 for an
    /// unknown user or bad cwd, 401, a lost connection, …). A `busy` agent
    /// (429) is retried after its `Retry-After`: the command did not start.
    ///
    /// The whole call, retries and their pauses included, ends by
    /// `timeout_secs` plus the client's request timeout (the agent's grace
    /// to kill the command and answer): then [`Error::Timeout`], or
    /// [`Error::Busy`] if the agent only ever said it was busy. The answer
    /// is held to what the request allows: at most
    /// [`exec_response_limit`] bytes of JSON, each stream at most
    /// [`exec_stream_limit`] bytes, an exit code in 0..=255 and a signal
    /// in 1..=64 ([`Error::TooLarge`], [`Error::Protocol`]).
    ///
    /// An exec is never sent twice unless the agent provably did not take
    /// it (a 429, or a connection the pool saw closed before writing).
    /// When a kept-alive connection dies under it before any byte of the
    /// answer (the agent restarted, crashed or the VM was reset since the
    /// last call) it fails with [`Error::AgentWentAway`], whose
    /// [`Error::may_have_started`] says whether the command may have run.
    ///
    /// A pinned client's exec carries its pin (`instance_id`): an agent of
    /// another instance runs nothing and answers 409, which is
    /// [`Error::InstanceChanged`]. An agent that predates the field refuses
    /// it (400, nothing run): the exec is sent again without it, and its
    /// answer's instance is checked instead.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecResult, Error> {
        let (mut req, mut pinned) = self.pin_request(req);
        let mut body = exec_body(&req);
        // The agent kills the command after `timeout_secs` plus a short
        // grace; allow for that before calling the agent unresponsive.
        // `timeout_secs` is the caller's, unchecked until the agent
        // refuses it (400): the sum must not overflow before that.
        let timeout = Duration::from_secs(req.options.timeout_secs)
            .saturating_add(self.inner.request_timeout);
        let start = Instant::now();
        let deadline = deadline_after(start, timeout);
        let limits = Limits {
            ok: exec_response_limit(req.options.max_output_bytes),
            other: ERROR_RESPONSE_LIMIT,
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let resp = self
                .request_limited(
                    Method::POST,
                    paths::EXEC,
                    Some(body.clone()),
                    deadline,
                    timeout,
                    limits,
                    &[StatusCode::OK],
                )
                .await?;
            let request = self.request(Method::POST, paths::EXEC);
            match resp.status {
                StatusCode::OK => {
                    let result: ExecResult = decode(request.clone(), &resp)?;
                    let result = check_exec_result(request, &req, result)?;
                    self.check_instance(result.instance_id.as_deref(), None)?;
                    return Ok(result);
                }
                StatusCode::BAD_REQUEST if pinned && self.refuses_pin(&resp) => {
                    (req, pinned) = self.pin_request(&req);
                    body = exec_body(&req);
                }
                StatusCode::CONFLICT => return Err(self.pin_refusal(request, &req, &resp)),
                StatusCode::TOO_MANY_REQUESTS => {
                    let resume = busy_resume(request.clone(), &resp, attempts, start, deadline)?;
                    tokio::time::sleep_until(resume).await;
                }
                _ => return Err(status_error(request, &resp)),
            }
        }
    }

    /// `req` as this client sends it, and whether it carries an
    /// `instance_id`: a pinned client's pin, unless the agent refused the
    /// field before (or `req` names its own instance).
    pub(crate) fn pin_request(&self, req: &ExecRequest) -> (ExecRequest, bool) {
        let mut req = req.clone();
        if self.inner.exec_pin_unknown.load(Ordering::Relaxed) {
            req.instance_id = None;
        } else if req.instance_id.is_none() {
            req.instance_id = self.pin.as_deref().map(str::to_owned);
        }
        let pinned = req.instance_id.is_some();
        (req, pinned)
    }

    /// Whether `resp` is an older agent's 400 for `instance_id`, an
    /// unknown field to it; remembered, so later execs leave it out.
    pub(crate) fn refuses_pin(&self, resp: &RawResponse) -> bool {
        let refused = serde_json::from_slice::<ErrorBody>(&resp.body).is_ok_and(|b| {
            b.error.code == lab_agent_proto::ErrorCode::BadRequest
                && b.error.message.contains("unknown field `instance_id`")
        });
        if refused {
            tracing::debug!(
                url = self.url(),
                "the agent predates `instance_id` in exec requests"
            );
            self.inner.exec_pin_unknown.store(true, Ordering::Relaxed);
        }
        refused
    }

    /// A 409 to an exec: the agent's `instance_changed` (nothing was run)
    /// as [`Error::InstanceChanged`], or [`Error::InstanceUnknown`] when
    /// the agent knows no instance; any other 409 a status error.
    pub(crate) fn pin_refusal(
        &self,
        request: Request,
        req: &ExecRequest,
        resp: &RawResponse,
    ) -> Error {
        let body = serde_json::from_slice::<ErrorBody>(&resp.body).ok();
        let (Some(body), Some(expected)) = (body, req.instance_id.clone()) else {
            return status_error(request, resp);
        };
        if body.error.code != lab_agent_proto::ErrorCode::InstanceChanged {
            return status_error(request, resp);
        }
        let url = self.inner.base.clone();
        // Whose pin: a request that named its own instance is the caller's.
        let pinned_by = match self.pin.as_deref() {
            Some(pin) if *pin == *expected => self.pinned_by,
            _ => PinnedBy::Caller,
        };
        match body.error.instance_id {
            Some(found) if lab_agent_proto::lifecycle::is_instance_id(&found) => {
                Error::InstanceChanged {
                    url,
                    expected,
                    found,
                    first_boot_at: None,
                    pinned_by,
                }
            }
            Some(found) => Error::Protocol {
                request,
                problem: format!(
                    "`instance_id` `{}` is not {} lowercase hex digits",
                    lab_agent_proto::text::escape(&found),
                    lab_agent_proto::lifecycle::INSTANCE_ID_LEN
                ),
            },
            None => Error::InstanceUnknown { url, expected },
        }
    }

    /// The agent's version, OS, uptime, boot id and `lab_dir` (which, when
    /// reported, is absolute, else [`Error::Protocol`]).
    pub async fn info(&self) -> Result<InfoResponse, Error> {
        let timeout = self.inner.request_timeout;
        let limits = Limits {
            ok: INFO_RESPONSE_LIMIT,
            other: ERROR_RESPONSE_LIMIT,
        };
        let resp = self
            .request_limited(
                Method::GET,
                paths::INFO,
                None,
                deadline_after(Instant::now(), timeout),
                timeout,
                limits,
                &[StatusCode::OK],
            )
            .await?;
        let request = self.request(Method::GET, paths::INFO);
        let info: InfoResponse = match resp.status {
            StatusCode::OK => decode(request.clone(), &resp)?,
            _ => return Err(status_error(request, &resp)),
        };
        check_instance_shape(&request, info.instance.as_ref())?;
        let i = info.instance.as_ref();
        self.check_instance(
            i.map(|i| i.id.as_str()),
            i.map(|i| i.first_boot_at.as_str()),
        )?;
        // A grader sends `lab_dir` back as every check's `LAB_DIR`: a
        // relative one would resolve against each check's cwd.
        if let Some(dir) = info.lab_dir.as_deref().filter(|d| !d.starts_with('/')) {
            return Err(Error::Protocol {
                request,
                problem: format!(
                    "`lab_dir` `{}` is not an absolute path",
                    lab_agent_proto::text::escape(dir)
                ),
            });
        }
        Ok(info)
    }

    /// Sends one request and returns whatever status came back. Transport
    /// failures and the timeout (connect plus response, one deadline for
    /// both) are still errors. `path` includes any query string. Bodies
    /// past [`MAX_RESPONSE_BYTES`] are [`Error::TooLarge`].
    pub async fn request_unchecked(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<RawResponse, Error> {
        self.request_limited(
            method,
            path,
            body.map(Bytes::from),
            deadline_after(Instant::now(), timeout),
            timeout,
            Limits::all(MAX_RESPONSE_BYTES),
            &[],
        )
        .await
    }

    /// One request, ended at `deadline` whatever happens in it (a retried
    /// connection, interim responses, a slow body): then [`Error::Timeout`]
    /// saying `budget`, the call's whole allowance.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn request_limited(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        deadline: Instant,
        budget: Duration,
        limits: Limits,
        ok: &[StatusCode],
    ) -> Result<RawResponse, Error> {
        let request = self.request(method.clone(), path);
        let work = self.send(method, path, body, &request, limits, ok);
        match tokio::time::timeout_at(deadline, work).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                request,
                after: budget,
            }),
        }
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> Request {
        let url = if self.inner.channel {
            format!("{path} via {}", self.inner.base)
        } else {
            format!("{}{path}", self.inner.base)
        };
        Request { method, url }
    }

    fn build_request(
        &self,
        method: &Method,
        path: &str,
        body: &Option<Bytes>,
    ) -> hyper::Request<Full<Bytes>> {
        let mut b = hyper::Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.inner.origin))
            .header(HOST, &self.inner.authority)
            .header(AUTHORIZATION, self.inner.auth.clone());
        if body.is_some() {
            b = b.header(CONTENT_TYPE, "application/json");
        }
        b.body(Full::new(body.clone().unwrap_or_default()))
            .expect("request parts are valid")
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        request: &Request,
        limits: Limits,
        ok: &[StatusCode],
    ) -> Result<RawResponse, Error> {
        let resp = self.open(method, path, body, request).await?;
        let limit = limits.for_status(resp.status(), ok);
        collect(resp, request, limit).await
    }

    /// Sends one request and returns the answer's head, its body unread.
    pub(crate) async fn open(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        request: &Request,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
        // The pool retries what it knows never reached the agent. A
        // kept-alive connection that died under the request before a byte
        // of the answer means the agent went away between two calls (a
        // restart, a crash, a reset): a read is harmless to send once more,
        // on a fresh connection; an exec is never sent twice (it may have
        // started), and says so. Anything else (a fresh connection that
        // died, an answer cut short) is a transport error.
        let body_len = body.as_ref().map_or(0, Bytes::len);
        let mut retried = false;
        let resp = loop {
            let req = self.build_request(&method, path, &body);
            let pool = if retried {
                &self.inner.fresh
            } else {
                &self.inner.pool
            };
            let answer = pool.request(req).await;
            // The connection (`interim::Guarded`) stopped at the interim
            // response past the limit.
            if let Some(count) = answer.as_ref().err().and_then(|e| interim::flood_in(e)) {
                return Err(Error::Interim {
                    request: request.clone(),
                    count,
                });
            }
            let e = match answer {
                Ok(resp) => break resp,
                Err(e) if e.is_connect() => return Err(self.connect_error(request, &e)),
                Err(e) => e,
            };
            match reuse::fate(&e, body_len).filter(|f| f.went_away()) {
                Some(_) if method.is_safe() && !retried => {
                    tracing::debug!(
                        url = %request.url,
                        error = %e,
                        "kept-alive connection lost before the answer, retrying on a fresh one"
                    );
                    retried = true;
                }
                Some(fate) if !method.is_safe() => {
                    return Err(Error::AgentWentAway {
                        request: request.clone(),
                        may_have_started: fate.sent_whole,
                        source: e.into(),
                    });
                }
                _ => return Err(transport(request, e)),
            }
        };
        Ok(resp)
    }

    /// A failed connect as [`Error::Connect`] with the `io::Error` the
    /// connector saw (refused, reset, no route), or [`Error::ConnectTimeout`].
    fn connect_error(&self, request: &Request, e: &hyper_util::client::legacy::Error) -> Error {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        let io = std::iter::from_fn(|| {
            let c = cause?;
            cause = c.source();
            Some(c)
        })
        .find_map(|c| c.downcast_ref::<std::io::Error>());
        // KubeVirt (or the API server) said no, with a status.
        #[cfg(feature = "kubevirt")]
        if let Some(r) = io
            .and_then(|io| io.get_ref())
            .and_then(|e| e.downcast_ref::<transport::kubevirt::Refused>())
        {
            return Error::Relay {
                request: request.clone(),
                status: r.status,
                message: r.message.clone(),
            };
        }
        match io {
            Some(io) if io.kind() == std::io::ErrorKind::TimedOut => Error::ConnectTimeout {
                request: request.clone(),
                after: self.inner.connect_timeout,
            },
            Some(io) => Error::Connect {
                request: request.clone(),
                source: std::io::Error::new(io.kind(), io.to_string()),
            },
            None => Error::Connect {
                request: request.clone(),
                source: std::io::Error::other(e.to_string()),
            },
        }
    }
}

/// An exec request's JSON body.
pub(crate) fn exec_body(req: &ExecRequest) -> Bytes {
    Bytes::from(serde_json::to_vec(req).expect("an ExecRequest always serializes"))
}

/// Reads a whole body of at most `limit` bytes.
pub(crate) async fn collect(
    resp: hyper::Response<hyper::body::Incoming>,
    request: &Request,
    limit: usize,
) -> Result<RawResponse, Error> {
    let (parts, mut incoming) = resp.into_parts();
    let too_large = |declared| Error::TooLarge {
        request: request.clone(),
        limit,
        declared,
    };
    // An announced length past the limit is refused before a byte of
    // the body is read (or waited for).
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > limit as u64) {
        return Err(too_large(Some(n)));
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(frame) = incoming.frame().await {
        let frame = frame.map_err(|e| transport(request, e))?;
        if let Ok(data) = frame.into_data() {
            if body.len() + data.len() > limit {
                // Dropping the body closes the connection: it is not
                // pooled with the rest of the answer still coming.
                return Err(too_large(None));
            }
            body.extend_from_slice(&data);
        }
    }
    Ok(RawResponse {
        status: parts.status,
        headers: parts.headers,
        body: Bytes::from(body),
    })
}

/// The checks an exec answer must pass: what a lab-agent can report for
/// this request. Guest text in the problem is escaped.
pub(crate) fn check_exec_result(
    request: Request,
    req: &ExecRequest,
    r: ExecResult,
) -> Result<ExecResult, Error> {
    let problem = if let Some(code) = r.exit_code.filter(|c| !(0..=255).contains(c)) {
        format!("exit code {code} is outside 0..=255")
    } else if let Some(sig) = r.signal.filter(|s| !(1..=64).contains(s)) {
        format!("signal {sig} is outside 1..=64")
    } else if let Some((name, len)) = [("stdout", r.stdout.len()), ("stderr", r.stderr.len())]
        .into_iter()
        .find(|&(_, len)| len as u64 > exec_stream_limit(req.options.max_output_bytes))
    {
        format!(
            "{len} bytes of {name}, more than `max_output_bytes` {} allows",
            req.options.max_output_bytes
        )
    } else if let Some(id) = r
        .instance_id
        .as_deref()
        .filter(|id| !lab_agent_proto::lifecycle::is_instance_id(id))
    {
        format!(
            "`instance_id` `{}` is not {} lowercase hex digits",
            lab_agent_proto::text::escape(id),
            lab_agent_proto::lifecycle::INSTANCE_ID_LEN
        )
    } else {
        return Ok(r);
    };
    Err(Error::Protocol { request, problem })
}

/// An `instance` whose id is not 32 lowercase hex digits is not an
/// agent's: a client pins to these ids and prints them.
fn check_instance_shape(
    request: &Request,
    instance: Option<&lab_agent_proto::lifecycle::Instance>,
) -> Result<(), Error> {
    match instance {
        Some(i) if !lab_agent_proto::lifecycle::is_instance_id(&i.id) => Err(Error::Protocol {
            request: request.clone(),
            problem: format!(
                "`instance.id` `{}` is not {} lowercase hex digits",
                lab_agent_proto::text::escape(&i.id),
                lab_agent_proto::lifecycle::INSTANCE_ID_LEN
            ),
        }),
        _ => Ok(()),
    }
}

/// Whether a body is a JSON object with a `state`: an agent's readiness
/// answer, even if not one this client can read.
fn looks_like_ready(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body)
        .is_ok_and(|m| m.contains_key("state"))
}

#[cfg(test)]
pub(crate) mod tests;
