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

use crate::error::{Error, Request};
use crate::interim::{self, Guarded};
use crate::reuse;
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Default time to establish a TCP connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time for a response, on top of whatever the request itself asks
/// the agent to wait (a long-poll's `wait`, an exec's `timeout_secs`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default length of one `/v1/ready?wait=` long-poll inside `wait_ready`.
/// Terminal states come back at once whatever this is; it only bounds how
/// stale a progress report can be.
pub const DEFAULT_LONG_POLL: Duration = Duration::from_secs(5);
/// How many 429 `busy` answers `exec` sits out before giving up (within
/// its deadline, whichever ends first).
pub(crate) const MAX_BUSY_RETRIES: u32 = 20;
// The interim (1xx) cap is the connection's, where it is enforced.
pub use crate::interim::MAX_INTERIM_RESPONSES;
/// The largest body read for [`Client::request_unchecked`]: any status,
/// any path. The checked calls hold each answer to its own, smaller limit.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// The largest `/v1/ready` answer (200 or 503). The agent reads at most
/// 1 MiB of cloud-init's `result.json`, of which `errors` is a part, and
/// 4 KiB of the setup log; JSON escapes a control byte into 6 bytes.
pub const READY_RESPONSE_LIMIT: usize = 6 * 1024 * 1024 + 64 * 1024;
/// The largest `/v1/info` answer: a few short strings.
pub const INFO_RESPONSE_LIMIT: usize = 64 * 1024;
/// The largest error answer (a status the call does not accept): an
/// `{"error":{…}}` body is a sentence.
pub const ERROR_RESPONSE_LIMIT: usize = 64 * 1024;

/// The largest exec response for a request: both streams at their cap,
/// every byte escaped as `\u00XX` (6 bytes), and room for the rest.
pub fn exec_response_limit(max_output_bytes: u64) -> usize {
    let cap = max_output_bytes.min(lab_agent_proto::exec::MAX_OUTPUT_BYTES_CAP) as usize;
    2 * 6 * cap + 64 * 1024
}

/// The longest stream (stdout or stderr, decoded) an exec may return: the
/// agent keeps at most `max_output_bytes` of each and decodes it as lossy
/// UTF-8, where one invalid byte becomes U+FFFD (3 bytes).
pub fn exec_stream_limit(max_output_bytes: u64) -> u64 {
    3 * max_output_bytes.min(lab_agent_proto::exec::MAX_OUTPUT_BYTES_CAP)
}

/// Body limits of one call: for the status(es) it accepts, and for others.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) ok: usize,
    pub(crate) other: usize,
}

impl Limits {
    const fn all(limit: usize) -> Limits {
        Limits {
            ok: limit,
            other: limit,
        }
    }

    fn for_status(self, status: StatusCode, ok: &[StatusCode]) -> usize {
        if ok.contains(&status) {
            self.ok
        } else {
            self.other
        }
    }
}
/// Idle connections kept per client.
const MAX_IDLE: usize = 8;
/// How long a kept-alive connection may sit idle in the pool. The agent
/// closes a connection that sends no request head for 10 s
/// (`HEADER_READ_TIMEOUT` in `agent/src/server.rs`); reusing one near that
/// age races its close, and a POST lost in that race cannot be retried.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

type Pool = hyper_util::client::legacy::Client<Counted, Full<Bytes>>;

/// A lab-agent at one URL. Cheap to clone: clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// The instance id every answer must carry ([`ClientBuilder::instance`],
    /// [`Client::pinned`]); `None` takes any.
    pin: Option<Arc<str>>,
}

struct Inner {
    /// `http://host:port` plus an optional path prefix, without trailing `/`.
    base: String,
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

/// A future that opens one connection to the agent.
pub type Dialing = Pin<Box<dyn Future<Output = std::io::Result<TcpStream>> + Send>>;

/// Opens the connections of a [`Client`] in place of a plain TCP connect
/// to the URL's host and port: "bring your own connected stream". The
/// client still applies its connect timeout, `TCP_NODELAY` and everything
/// above the socket. `labctl try` uses it to open its sockets inside the
/// sandbox's network namespace, where the agent listens on loopback.
pub trait Dialer: Send + Sync + 'static {
    /// A connected stream to `host:port` (the URL's).
    fn dial(&self, host: &str, port: u16) -> Dialing;
}

/// Options for a [`Client`]; start with [`Client::builder`].
#[derive(Clone)]
pub struct ClientBuilder {
    connect_timeout: Duration,
    request_timeout: Duration,
    long_poll: Duration,
    dialer: Option<Arc<dyn Dialer>>,
    instance: Option<String>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("long_poll", &self.long_poll)
            .field("dialer", &self.dialer.is_some())
            .field("instance", &self.instance)
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            long_poll: DEFAULT_LONG_POLL,
            dialer: None,
            instance: None,
        }
    }
}

impl ClientBuilder {
    /// Time allowed to establish a TCP connection.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// Time allowed for a response beyond what the request asks the agent
    /// to spend (a long-poll's `wait`, an exec's `timeout_secs`). Any
    /// length is taken: one too long to add to the clock (`Duration::MAX`)
    /// means no limit of the client's own (see [`deadline_after`]).
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }

    /// Length of each `/v1/ready?wait=` long-poll in `wait_ready` (1–60 s).
    pub fn long_poll(mut self, t: Duration) -> Self {
        self.long_poll = t.clamp(
            Duration::from_secs(1),
            Duration::from_secs(lab_agent_proto::MAX_READY_WAIT_SECS),
        );
        self
    }

    /// Opens connections through `dialer` instead of a TCP connect of
    /// this process (see [`Dialer`]).
    pub fn dialer(mut self, dialer: Arc<dyn Dialer>) -> Self {
        self.dialer = Some(dialer);
        self
    }

    /// Pins the client to one life of the VM: the `instance.id` the backend
    /// saw when it handed the VM to the student. Every `/v1/ready`,
    /// `/v1/info` and exec answer from another instance is then
    /// [`Error::InstanceChanged`] (the VM was reset: the student's work
    /// inside it is gone), and one that names no instance (an older agent)
    /// is [`Error::InstanceUnknown`]: which life answered cannot be told.
    /// [`Client::grade`] asks `/v1/ready` before it runs anything, so a
    /// pinned grade of another instance runs nothing; a lone
    /// [`Client::exec`] is only checked on its answer, after the command ran.
    /// An id that is not 32 lowercase hex digits fails [`Self::build`]
    /// with [`Error::InvalidInstanceId`].
    pub fn instance(mut self, id: impl Into<String>) -> Self {
        self.instance = Some(id.into());
        self
    }

    /// A client for the agent at `url` (`http://host:port`), sending `token`.
    pub fn build(self, url: &str, token: &str) -> Result<Client, Error> {
        let pin = self.instance.as_deref().map(checked_pin).transpose()?;
        let invalid = |problem: &str| Error::InvalidUrl {
            url: url.to_owned(),
            problem: problem.to_owned(),
        };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(invalid(
                    "the agent speaks plain HTTP (the token, not TLS, guards it): use `http://`",
                ));
            }
            Some(other) => return Err(invalid(&format!("scheme `{other}` is not `http`"))),
            None => return Err(invalid("it has no scheme: write `http://HOST:PORT`")),
        }
        let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
            return Err(invalid("it has no host"));
        };
        if uri.query().is_some() {
            return Err(invalid("it has a query string: give only the base URL"));
        }
        let authority = match uri.port_u16() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        let prefix = uri.path().trim_end_matches('/').to_owned();
        let base = format!("http://{authority}{prefix}");

        let token = token.trim_end();
        if token.is_empty() {
            return Err(invalid("the token is empty"));
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            invalid("the token contains characters that cannot go in an HTTP header")
        })?;
        auth.set_sensitive(true);

        let opened = Arc::new(AtomicU64::new(0));
        let mut http = HttpConnector::new();
        // Small request/response pairs: don't let Nagle hold them back.
        http.set_nodelay(true);
        http.set_connect_timeout(Some(self.connect_timeout));
        let connector = Counted {
            http,
            dialer: self.dialer.clone(),
            connect_timeout: self.connect_timeout,
            opened: opened.clone(),
        };
        let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE)
            .pool_timer(TokioTimer::new())
            .build(connector.clone());
        // No idle connection kept is no pool at all (hyper-util connects
        // for each request).
        let fresh = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);

        Ok(Client {
            inner: Arc::new(Inner {
                base,
                authority,
                auth,
                connect_timeout: self.connect_timeout,
                request_timeout: self.request_timeout,
                long_poll: self.long_poll,
                pool,
                fresh,
                opened,
            }),
            pin,
        })
    }
}

/// `id` as a pin, when it has an instance id's shape.
fn checked_pin(id: &str) -> Result<Arc<str>, Error> {
    if lab_agent_proto::lifecycle::is_instance_id(id) {
        Ok(Arc::from(id))
    } else {
        Err(Error::InvalidInstanceId { id: id.to_owned() })
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
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecResult, Error> {
        let body = Bytes::from(serde_json::to_vec(req).expect("an ExecRequest always serializes"));
        // The agent kills the command after `timeout_secs` plus a short
        // grace; allow for that before calling the agent unresponsive.
        // `timeout_secs` is the caller's, unchecked until the agent
        // refuses it (400): the sum must not overflow before that.
        let timeout =
            Duration::from_secs(req.timeout_secs).saturating_add(self.inner.request_timeout);
        let start = Instant::now();
        let deadline = deadline_after(start, timeout);
        let limits = Limits {
            ok: exec_response_limit(req.max_output_bytes),
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
                    let result = check_exec_result(request, req, result)?;
                    self.check_instance(result.instance_id.as_deref(), None)?;
                    return Ok(result);
                }
                StatusCode::TOO_MANY_REQUESTS => {
                    let resume = busy_resume(request.clone(), &resp, attempts, start, deadline)?;
                    tokio::time::sleep_until(resume).await;
                }
                _ => return Err(status_error(request, &resp)),
            }
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
        Request {
            method,
            url: format!("{}{path}", self.inner.base),
        }
    }

    fn build_request(
        &self,
        method: &Method,
        path: &str,
        body: &Option<Bytes>,
    ) -> hyper::Request<Full<Bytes>> {
        let mut b = hyper::Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.inner.base))
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
        .find(|&(_, len)| len as u64 > exec_stream_limit(req.max_output_bytes))
    {
        format!(
            "{len} bytes of {name}, more than `max_output_bytes` {} allows",
            req.max_output_bytes
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

/// hyper-util's connector (or the caller's [`Dialer`]), counting the
/// connections it makes, each one [`Guarded`] against an interim-response
/// flood.
#[derive(Clone)]
struct Counted {
    http: HttpConnector,
    dialer: Option<Arc<dyn Dialer>>,
    connect_timeout: Duration,
    opened: Arc<AtomicU64>,
}

type Connecting = Pin<
    Box<
        dyn Future<
                Output = Result<
                    TokioIo<Guarded<TcpStream>>,
                    Box<dyn std::error::Error + Send + Sync>,
                >,
            > + Send,
    >,
>;

impl tower_service::Service<Uri> for Counted {
    type Response = TokioIo<Guarded<TcpStream>>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let opened = self.opened.clone();
        if let Some(dialer) = &self.dialer {
            let host = uri.host().unwrap_or_default();
            let dialing = dialer.dial(host, uri.port_u16().unwrap_or(80));
            let timeout = self.connect_timeout;
            return Box::pin(async move {
                let stream = tokio::time::timeout(timeout, dialing)
                    .await
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
                stream.set_nodelay(true)?;
                opened.fetch_add(1, Ordering::Relaxed);
                Ok(TokioIo::new(Guarded::new(stream)))
            });
        }
        let connecting = self.http.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            opened.fetch_add(1, Ordering::Relaxed);
            Ok(TokioIo::new(Guarded::new(io.into_inner())))
        })
    }
}

pub(crate) fn transport(request: &Request, source: impl Into<crate::error::BoxError>) -> Error {
    Error::Transport {
        request: request.clone(),
        source: source.into(),
    }
}

fn decode<T: DeserializeOwned>(request: Request, resp: &RawResponse) -> Result<T, Error> {
    serde_json::from_slice(&resp.body).map_err(|source| Error::Decode {
        request,
        status: resp.status,
        source,
    })
}

pub(crate) fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()
}

/// After a 429 to an exec: when to send it again (its `Retry-After`, 1 to
/// 10 s), or the [`Error::Busy`] that ends the call. A pause that would end
/// past the deadline is not taken: the call would only fail later.
pub(crate) fn busy_resume(
    request: Request,
    resp: &RawResponse,
    attempts: u32,
    start: Instant,
    deadline: Instant,
) -> Result<Instant, Error> {
    let after = retry_after(&resp.headers).unwrap_or(1).clamp(1, 10);
    let resume = Instant::now() + Duration::from_secs(after);
    if attempts > MAX_BUSY_RETRIES || resume >= deadline {
        let message = match status_error(request.clone(), resp) {
            Error::Status { message, .. } => message,
            _ => String::new(),
        };
        return Err(Error::Busy {
            request,
            attempts,
            waited: start.elapsed(),
            message,
        });
    }
    tracing::debug!(url = %request.url, after, "agent busy, retrying");
    Ok(resume)
}

/// A [`Error::Status`] from a response, with the agent's message if its body
/// is an `ErrorBody`, else the start of whatever it sent.
pub(crate) fn status_error(request: Request, resp: &RawResponse) -> Error {
    let (code, message) = match serde_json::from_slice::<ErrorBody>(&resp.body) {
        Ok(b) => (Some(b.error.code), b.error.message),
        Err(_) => {
            let text = String::from_utf8_lossy(&resp.body);
            let text = text.trim();
            let message = if text.is_empty() {
                resp.status
                    .canonical_reason()
                    .unwrap_or("no body")
                    .to_lowercase()
            } else {
                text.chars().take(200).collect()
            };
            (None, message)
        }
    };
    Error::Status {
        request,
        status: resp.status,
        code,
        message,
        retry_after: retry_after(&resp.headers),
    }
}

/// The longest a call's deadline lies ahead: about 30 years, as tokio's own
/// "far future". Longer is the same in practice, and `Instant` cannot hold
/// an arbitrary `Duration` from now (`Duration::MAX` overflows it).
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// `start + timeout`, saturating at [`FAR_FUTURE`]. Saturation, not an
/// error, because the builder's setters take any `Duration` and return
/// `Self` (as `long_poll` clamps rather than refuses), and `Duration::MAX`
/// is the usual way to say "no limit"; a budget that long then never ends a
/// call, instead of panicking in the addition. `exec`'s `timeout_secs`
/// goes through here too: the agent, not this sum, refuses one too large.
pub(crate) fn deadline_after(start: Instant, timeout: Duration) -> Instant {
    start + timeout.min(FAR_FUTURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Something on the agent's port that answers 200 and then sends a body
    /// without end (the student is root in the VM and can put it there).
    async fn endless_server() -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                    if s.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                    while s.write_all(chunk.as_bytes()).await.is_ok() {}
                });
            }
        });
        url
    }

    /// Regression: the client buffered a response body without limit, so a
    /// hostile guest could fill the backend's memory for the whole timeout.
    #[tokio::test]
    async fn an_endless_response_is_cut_at_the_limit() {
        let url = endless_server().await;
        let c = Client::new(&url, "t").unwrap();
        let within = Duration::from_secs(20);
        let err = tokio::time::timeout(within, c.exec(&ExecRequest::new("true")))
            .await
            .expect("still reading after 20 s")
            .unwrap_err();
        let limit = exec_response_limit(lab_agent_proto::exec::DEFAULT_MAX_OUTPUT_BYTES);
        assert!(
            matches!(err, Error::TooLarge { limit: l, declared: None, .. } if l == limit),
            "{err:?}"
        );
        assert!(err.to_string().contains("response larger than"), "{err}");
        assert!(
            err.hint()
                .unwrap()
                .contains("something other than lab-agent")
        );
        let err = tokio::time::timeout(within, c.ready())
            .await
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooLarge {
                    limit: READY_RESPONSE_LIMIT,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    /// Answers every request 401 at once, as an agent does a wrong token,
    /// and closes the connection.
    async fn refusing_server() -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let body = r#"{"error":"unauthorized","message":"bad token"}"#;
                    let resp = format!(
                        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(resp.as_bytes()).await;
                });
            }
        });
        url
    }

    /// What a scripted agent does with the requests on one connection.
    #[derive(Clone, Copy)]
    enum Then {
        /// Answers this many requests, then reads the next one whole and
        /// closes without a byte of answer (an agent that went away).
        DiesAfter(usize),
        /// Answers this many, then reads only the next request's head and
        /// closes with its body unread (the kernel resets the connection).
        CutsAfter(usize),
    }

    /// A stand-in for an agent at the URL returned: connection `i` behaves
    /// as `script[i]`, later ones answer everything. Readiness and exec
    /// answers are canned. Counts connections, and requests read whole.
    async fn scripted_server(script: Vec<Then>) -> (String, Arc<AtomicU64>, Arc<AtomicU64>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const READY: &str = r#"{"state":"ready","cloud_init":{"done":true,"errors":[]},"setup":{"state":"succeeded","exit_code":0}}"#;
        const EXEC: &str = r#"{"exit_code":0,"signal":null,"timed_out":false,"duration_ms":1,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false}"#;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (conns, whole) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (c, w) = (conns.clone(), whole.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let i = c.fetch_add(1, Ordering::SeqCst) as usize;
                let then = script
                    .get(i)
                    .copied()
                    .unwrap_or(Then::DiesAfter(usize::MAX));
                let whole = w.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    for served in 0.. {
                        // The head, then its `content-length` bytes of body.
                        let head_end = loop {
                            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break p + 4;
                            }
                            let mut chunk = [0u8; 4096];
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                        if matches!(then, Then::CutsAfter(n) if served == n) {
                            return; // dropped with the body unread: a reset
                        }
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        while buf.len() < head_end + len {
                            let mut chunk = vec![0u8; 64 * 1024];
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..head_end + len);
                        whole.fetch_add(1, Ordering::SeqCst);
                        if matches!(then, Then::DiesAfter(n) if served == n) {
                            return;
                        }
                        let body = if head.starts_with("post") {
                            EXEC
                        } else {
                            READY
                        };
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, conns, whole)
    }

    /// Lets the first call's connection go back to the pool before the
    /// next call. hyper-util returns it from a task of its own once the
    /// connection is idle; without this the next call may find no idle
    /// connection and open another. On this (current-thread) runtime the
    /// tasks that return it are ready to run, and all run before the
    /// runtime parks for the timer, whatever the machine's load.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    /// The agent went away between two reads: the kept-alive connection
    /// dies under the second after it was written. It is sent once more,
    /// on a fresh connection, and answered.
    #[tokio::test]
    async fn a_read_on_a_connection_that_died_is_sent_again_on_a_fresh_one() {
        let (url, conns, whole) = scripted_server(vec![Then::DiesAfter(1)]).await;
        let c = Client::new(&url, "t").unwrap();
        c.ready().await.unwrap();
        settle().await;
        let r = c.ready().await.unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(r.state, lab_agent_proto::ReadyState::Ready);
        assert_eq!(c.connections_opened(), 2);
        assert_eq!(conns.load(Ordering::SeqCst), 2);
        assert_eq!(whole.load(Ordering::SeqCst), 3, "one read sent twice");
    }

    /// A fresh connection that dies is the agent not answering (qemu's
    /// port forward before the guest listens): not retried.
    #[tokio::test]
    async fn a_fresh_connection_that_dies_is_a_transport_error() {
        let (url, conns, whole) =
            scripted_server(vec![Then::DiesAfter(0), Then::DiesAfter(0)]).await;
        let c = Client::new(&url, "t").unwrap();
        let err = c.ready().await.unwrap_err();
        assert!(matches!(err, Error::Transport { .. }), "{err:?}");
        assert!(err.is_unreachable() && !err.is_agent_went_away());
        assert_eq!(conns.load(Ordering::SeqCst), 1, "no retry");
        assert_eq!(whole.load(Ordering::SeqCst), 1);
        let err = c.exec(&ExecRequest::new("true")).await.unwrap_err();
        assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    }

    /// An exec written whole into a kept-alive connection that then dies:
    /// the agent may have started it. It is not sent again.
    #[tokio::test]
    async fn an_exec_on_a_connection_that_died_may_have_started_and_is_not_rerun() {
        let (url, conns, whole) = scripted_server(vec![Then::DiesAfter(1)]).await;
        let c = Client::new(&url, "t").unwrap();
        c.exec(&ExecRequest::new("true")).await.unwrap();
        settle().await;
        let err = c.exec(&ExecRequest::new("touch /x")).await.unwrap_err();
        assert!(err.is_agent_went_away() && err.is_unreachable(), "{err:?}");
        assert_eq!(err.may_have_started(), Some(true));
        assert_eq!(
            err.to_string(),
            format!(
                "the agent went away before answering when posting to {url}/v1/exec: the \
                 command may have started (the request was sent whole); it was not sent again"
            )
        );
        assert!(
            err.hint().unwrap().contains("may have run"),
            "{:?}",
            err.hint()
        );
        assert_eq!(whole.load(Ordering::SeqCst), 2, "the exec was sent once");
        assert_eq!(conns.load(Ordering::SeqCst), 1);
        // The next call goes over a fresh connection and is answered.
        c.exec(&ExecRequest::new("true")).await.unwrap();
        assert_eq!(c.connections_opened(), 2);
    }

    /// An exec whose body was still being written when the connection was
    /// reset cannot have started, and says so. (Through `request_unchecked`,
    /// the same path as `exec`'s, so the body is made before the first call:
    /// serializing a large `ExecRequest` in a debug build takes longer than
    /// the pool keeps a connection idle.)
    #[tokio::test]
    async fn an_exec_cut_short_did_not_start() {
        let (url, conns, whole) = scripted_server(vec![Then::CutsAfter(1)]).await;
        let c = Client::new(&url, "t").unwrap();
        // More than loopback's socket buffers (both ends) hold: the reset
        // comes while the body is still being written.
        let mut big = br#"{"command":"cat >/dev/null","stdin":""#.to_vec();
        big.resize(big.len() + 64 * 1024 * 1024, b'x');
        big.extend_from_slice(br#""}"#);
        c.exec(&ExecRequest::new("true")).await.unwrap();
        settle().await;
        let timeout = Duration::from_secs(60);
        let err = c
            .request_unchecked(Method::POST, paths::EXEC, Some(big), timeout)
            .await
            .unwrap_err();
        assert!(err.is_agent_went_away(), "{err:?}");
        assert_eq!(err.may_have_started(), Some(false), "{err}");
        assert!(
            err.to_string()
                .ends_with("the command did not start (the request was cut short)"),
            "{err}"
        );
        assert!(err.hint().unwrap().contains("safe"), "{:?}", err.hint());
        assert_eq!(whole.load(Ordering::SeqCst), 1);
        assert_eq!(conns.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_deadline_past_the_clock_saturates() {
        let now = Instant::now();
        assert_eq!(deadline_after(now, Duration::MAX), now + FAR_FUTURE);
        assert_eq!(
            deadline_after(now, Duration::from_secs(u64::MAX)),
            now + FAR_FUTURE
        );
        let minute = Duration::from_secs(60);
        assert_eq!(deadline_after(now, minute), now + minute);
    }

    /// Regression: `request_timeout(Duration::MAX)`, an exec's
    /// `timeout_secs = u64::MAX` and a huge `request_unchecked` timeout
    /// panicked with "overflow when adding durations" / "... duration to
    /// instant" before anything was sent. Each call now reaches the agent
    /// and reports its answer.
    #[tokio::test]
    async fn huge_timeouts_send_the_request_instead_of_panicking() {
        let url = refusing_server().await;
        let within = Duration::from_secs(10);
        let unlimited = Client::builder()
            .connect_timeout(Duration::MAX)
            .request_timeout(Duration::MAX)
            .build(&url, "t")
            .unwrap();
        let huge_exec = ExecRequest::new("true").timeout_secs(u64::MAX);
        let defaults = Client::new(&url, "t").unwrap();
        for (what, err) in [
            (
                "info",
                tokio::time::timeout(within, unlimited.info())
                    .await
                    .map(|r| r.map(drop)),
            ),
            (
                "ready",
                tokio::time::timeout(within, unlimited.ready())
                    .await
                    .map(|r| r.map(drop)),
            ),
            (
                "ready_wait",
                tokio::time::timeout(within, unlimited.ready_wait(Duration::MAX))
                    .await
                    .map(|r| r.map(drop)),
            ),
            (
                "exec",
                tokio::time::timeout(within, unlimited.exec(&huge_exec))
                    .await
                    .map(|r| r.map(drop)),
            ),
            (
                "exec, default request timeout",
                tokio::time::timeout(within, defaults.exec(&huge_exec))
                    .await
                    .map(|r| r.map(drop)),
            ),
        ] {
            let err = err
                .unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
                .unwrap_err();
            assert!(err.is_unauthorized(), "{what}: {err:?}");
        }
        let raw = tokio::time::timeout(
            within,
            defaults.request_unchecked(Method::GET, "/v1/info", None, Duration::MAX),
        )
        .await
        .expect("request_unchecked: no answer within 10 s")
        .unwrap();
        assert_eq!(raw.status, StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn urls() {
        let c = Client::new("http://10.0.0.5:8899", "t").unwrap();
        assert_eq!(c.url(), "http://10.0.0.5:8899");
        let req = c.build_request(&Method::GET, "/v1/info", &None);
        assert_eq!(
            (req.uri().host(), req.uri().port_u16()),
            (Some("10.0.0.5"), Some(8899))
        );
        let c = Client::new("http://[::1]:8899/", "t").unwrap();
        assert_eq!(c.url(), "http://[::1]:8899");
        let req = c.build_request(&Method::GET, "/v1/info", &None);
        assert_eq!(req.uri().host(), Some("[::1]"));
        let c = Client::new("http://proxy/vm-1/", "t").unwrap();
        assert_eq!(c.url(), "http://proxy/vm-1");
        let req = c.build_request(&Method::GET, "/v1/ready?wait=5", &None);
        // The pool sends the origin form (`/vm-1/v1/ready?wait=5`) to port 80.
        assert_eq!(req.uri(), "http://proxy/vm-1/v1/ready?wait=5");
        assert_eq!(req.uri().port_u16(), None);
        assert_eq!(req.headers()[HOST], "proxy");
        let c = Client::new("http://vm:1", "t").unwrap();
        assert_eq!(
            c.build_request(&Method::GET, "/v1/info", &None).uri(),
            "http://vm:1/v1/info"
        );

        for (url, want) in [
            ("10.0.0.5:8899", "no scheme"),
            ("https://vm:8899", "plain HTTP"),
            ("ftp://vm", "scheme `ftp`"),
            ("http://vm?x=1", "query string"),
            ("http://", "invalid agent URL"),
        ] {
            let err = Client::new(url, "t").unwrap_err();
            assert!(err.to_string().contains(want), "{url}: {err}");
            assert!(err.to_string().contains(url), "{url}: {err}");
        }
        assert!(Client::new("http://vm", "  \n").is_err());
        assert!(Client::new("http://vm", "a\nb").is_err());
    }

    #[test]
    fn only_an_instance_id_pins() {
        let id = "0123456789abcdef0123456789abcdef";
        let c = Client::builder()
            .instance(id)
            .build("http://10.0.0.5:8899", "t")
            .unwrap();
        assert_eq!(c.instance(), Some(id));
        let c = Client::new("http://10.0.0.5:8899", "t").unwrap();
        assert_eq!(c.instance(), None);
        assert_eq!(c.pinned(id).unwrap().instance(), Some(id));
        for bad in ["", "0123456789ABCDEF0123456789abcdef", "../x", &id[1..]] {
            let e = Client::builder()
                .instance(bad)
                .build("http://10.0.0.5:8899", "t")
                .unwrap_err();
            assert!(matches!(e, Error::InvalidInstanceId { .. }), "{bad}: {e}");
            assert!(c.pinned(bad).is_err(), "{bad}");
        }
        let changed = c.pinned(id).unwrap().check_instance(
            Some("ffffffffffffffffffffffffffffffff"),
            Some("2026-12-03T10:00:00Z"),
        );
        assert!(changed.unwrap_err().is_instance_changed());
        let pinned = c.pinned(id).unwrap();
        assert!(pinned.check_instance(Some(id), None).is_ok());
        assert!(
            pinned
                .check_instance(None, None)
                .unwrap_err()
                .is_instance_unknown()
        );
        assert!(c.check_instance(None, None).is_ok());
    }

    #[test]
    fn the_token_never_shows() {
        let c = Client::new("http://vm:1", "s3cret-token").unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
        let req = c.build_request(&Method::GET, "/v1/info", &None);
        assert_eq!(req.headers()[AUTHORIZATION], "Bearer s3cret-token");
        assert!(req.headers()[AUTHORIZATION].is_sensitive());
    }

    #[test]
    fn status_errors_carry_the_agents_message() {
        let request = Request {
            method: Method::POST,
            url: "http://vm/v1/exec".into(),
        };
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        let resp = RawResponse {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers,
            body: Bytes::from_static(
                br#"{"error":{"code":"busy","message":"8 commands are running"}}"#,
            ),
        };
        let e = status_error(request.clone(), &resp);
        assert_eq!(
            e.to_string(),
            "status 429 when posting to http://vm/v1/exec: 8 commands are running"
        );
        assert_eq!(e.error_code(), Some(lab_agent_proto::ErrorCode::Busy));
        assert!(matches!(
            e,
            Error::Status {
                retry_after: Some(3),
                ..
            }
        ));
        let resp = RawResponse {
            status: StatusCode::BAD_GATEWAY,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        assert_eq!(
            status_error(request, &resp).to_string(),
            "status 502 when posting to http://vm/v1/exec: bad gateway"
        );
    }

    #[tokio::test]
    async fn refused_is_unreachable() {
        // Bind and drop to find a port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Client::new(&format!("http://127.0.0.1:{port}"), "t").unwrap();
        let err = c.ready().await.unwrap_err();
        assert!(err.is_unreachable(), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!("failed to connect when getting http://127.0.0.1:{port}/v1/ready")
        );
    }
}
