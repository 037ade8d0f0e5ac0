//! The one routing table: authenticate, match `(method, path)`, log one line.

use crate::api_error::ApiError;
use crate::app::App;
use crate::exec::{self, ExecLog};
use crate::http::Response;
use crate::{info, ready};
use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::{Method, Request};
use lab_agent_proto::paths;
use crate::logging::cut;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// How much of a command the request line shows.
pub const COMMAND_LOG_CHARS: usize = 200;

pub async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Response, Infallible> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let mut exec_log = None;
    let result = route(&app, req, &mut exec_log).await;
    if let Err(ApiError::Unauthorized) = result {
        // Counted, not logged: see `rejections`.
        app.rejections.unauthorized(peer, method.as_str(), &path);
        return Ok(ApiError::Unauthorized.into_response());
    }
    let resp = result.unwrap_or_else(ApiError::into_response);
    let status = resp.status().as_u16();
    let ms = started.elapsed().as_millis() as u64;
    // One line per request, every value escaped and cut by the logger
    // (`logging::clean`). Headers are never logged: they carry the token.
    match exec_log {
        Some(e) => tracing::info!(
            %peer, %method, path = %path, status, duration_ms = ms,
            user = %e.user, exit_code = e.exit_code, signal = e.signal,
            timed_out = e.timed_out, profile = e.profile,
            stdin_bytes = e.stdin_bytes, env_vars = e.env_vars, env_bytes = e.env_bytes,
            command = %cut(&e.command, COMMAND_LOG_CHARS),
            "request"
        ),
        None => {
            tracing::info!(%peer, %method, path = %path, status, duration_ms = ms, "request")
        }
    }
    Ok(resp)
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
    match (&method, path.as_str()) {
        (&Method::GET, paths::READY) => ready::handle(app, req.uri().query()).await,
        (&Method::GET, paths::INFO) => Ok(info::handle(app)),
        (&Method::POST, paths::EXEC) => exec::handle(app, req, exec_log).await,
        (_, paths::READY | paths::INFO) => Err(not_allowed("GET")),
        (_, paths::EXEC) => Err(not_allowed("POST")),
        _ => Err(ApiError::NotFound(path.escape_debug().to_string())),
    }
}
