//! The one routing table: authenticate, match `(method, path)`, log one line.

use crate::api::exec::{self, ExecLog};
use crate::api::{info, ready, setup_log};
use crate::app::App;
use crate::http::Response;
use crate::http::api_error::ApiError;
use crate::http::listen::Peer;
use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::{Method, Request};
use lab_agent_proto::paths;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Notify;

pub async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
    peer: Peer,
) -> Result<Response, Infallible> {
    let mut line = Line {
        started: Instant::now(),
        peer,
        method: req.method().clone(),
        path: req.uri().path().to_owned(),
        exec: None,
        done: false,
        status: 0,
        ms: 0,
    };
    let result = route(&app, req, &mut line.exec).await;
    line.done = true;
    if let Err(ApiError::Unauthorized) = result {
        // Counted, not logged: see `rejections`.
        app.rejections
            .unauthorized(peer.host(), line.method.as_str(), &line.path);
        return Ok(ApiError::Unauthorized.into_response());
    }
    let resp = result.unwrap_or_else(ApiError::into_response);
    line.status = resp.status().as_u16();
    line.ms = line.started.elapsed().as_millis() as u64;
    // Written once the answer is out: hyper writes it in this same poll of
    // the connection's task, and the writer's task runs only after that
    // one yields. Formatting the line and writing it (to journald, on a lab
    // VM: a wakeup of another process on the guest's few CPUs) is then
    // not part of any answer's latency, nor is closing what an exec
    // leaves (`ExecLog::spent`).
    after_answer(line);
    Ok(resp)
}

/// Lines waiting for [`write_lines`]. One queue and one long-lived task
/// rather than a task per request: a task's memory, allocated before the
/// answer and freed after it, was a page mapped and unmapped per request
/// (musl's allocator returns a size class's last free group at once).
static WAITING: Mutex<Vec<Line>> = Mutex::new(Vec::new());
static WAKE: Notify = Notify::const_new();
/// Whether [`write_lines`] runs: without it (a test calling [`handle`]
/// alone) a line is written at once.
static WRITER: AtomicBool = AtomicBool::new(false);

fn after_answer(line: Line) {
    if !WRITER.load(Ordering::Acquire) {
        return drop(line);
    }
    lock(&WAITING).push(line);
    WAKE.notify_one();
}

/// Writes the lines of answered requests, each after its answer, for as
/// long as it runs; [`flush_lines`] writes what it left.
pub async fn write_lines() {
    struct Stopped;
    impl Drop for Stopped {
        fn drop(&mut self) {
            WRITER.store(false, Ordering::Release);
        }
    }
    let _stopped = Stopped;
    WRITER.store(true, Ordering::Release);
    loop {
        WAKE.notified().await;
        flush_lines();
    }
}

/// Writes every waiting line now (at shutdown, and from the writer).
pub fn flush_lines() {
    // Taken out first: writing one must not hold the queue.
    let mut lines = std::mem::take(&mut *lock(&WAITING));
    lines.clear();
    // The emptied buffer back, so the queue keeps its capacity.
    let mut waiting = lock(&WAITING);
    if waiting.is_empty() {
        *waiting = lines;
    }
}

fn lock(m: &Mutex<Vec<Line>>) -> std::sync::MutexGuard<'_, Vec<Line>> {
    // A poisoned queue of lines is still a queue.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The request's log line. Written when the answer is ready — or, when the
/// client went away first and the handler was dropped, with status
/// `abandoned` (an exec's command was then terminated: `process::Job`).
struct Line {
    started: Instant,
    peer: Peer,
    method: Method,
    path: String,
    exec: Option<ExecLog>,
    done: bool,
    /// The answer's status and how long it took to produce (0: none, the
    /// client went away first).
    status: u16,
    ms: u64,
}

impl Line {
    fn write(&self, status: &str, ms: u64) {
        let (peer, method, path) = (&self.peer, &self.method, &self.path);
        // One line per request, every value escaped and cut by the logger
        // (`logging::clean`). Headers are never logged: they carry the token.
        // One call site for both kinds of line (each costs code): the
        // exec fields are `None` on other requests, and left out.
        let e = self.exec.as_ref();
        tracing::info!(
            %peer, %method, path = %path, status, duration_ms = ms,
            user = e.map(|e| tracing::field::display(&e.user)),
            exit_code = e.and_then(|e| e.exit_code), signal = e.and_then(|e| e.signal),
            timed_out = e.map(|e| e.timed_out), profile = e.map(|e| e.profile),
            stdin_bytes = e.map(|e| e.stdin_bytes as u64),
            env_vars = e.map(|e| e.env_vars as u64),
            env_bytes = e.map(|e| e.env_bytes as u64),
            command = e.map(|e| tracing::field::display(&e.command)),
            "request"
        );
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.status != 0 {
            self.write(&self.status.to_string(), self.ms);
        } else if !self.done {
            self.write("abandoned", self.started.elapsed().as_millis() as u64);
        }
    }
}

async fn route(
    app: &App,
    req: Request<Incoming>,
    exec_log: &mut Option<ExecLog>,
) -> Result<Response, ApiError> {
    // Before routing, so an unauthenticated caller learns nothing about
    // which paths or methods exist.
    // Exactly one `Authorization`: with two, which one counts would depend
    // on who reads them (a proxy in front may check the other).
    let mut auth = req.headers().get_all(AUTHORIZATION).iter();
    let (first, second) = (auth.next(), auth.next());
    if second.is_some() || !app.token.verify_header(first.map(|v| v.as_bytes())) {
        return Err(ApiError::Unauthorized);
    }
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let not_allowed = |allowed| ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: path.clone(),
        allowed,
    };
    if (&method, path.as_str()) == (&Method::POST, paths::EXEC) {
        return exec::handle(app, req, exec_log).await;
    }
    // No other route reads a header: the map is the answer's (see
    // `recycle_headers`).
    let (parts, _) = req.into_parts();
    crate::http::recycle_headers(parts.headers);
    let query = parts.uri.query();
    match (&method, path.as_str()) {
        (&Method::GET, paths::READY) => ready::handle(app, query).await,
        (&Method::GET, paths::INFO) => Ok(info::handle(app)),
        (&Method::GET, paths::SETUP_LOG) => setup_log::handle(app, query).await,
        (_, paths::READY | paths::INFO | paths::SETUP_LOG) => Err(not_allowed("GET")),
        (_, paths::EXEC) => Err(not_allowed("POST")),
        _ => Err(ApiError::NotFound(path.escape_debug().to_string())),
    }
}
