//! `GET /v1/setup/log?offset=N[&wait=SECS]`: the setup log from a byte
//! offset, so a client can follow a setup as it runs.
//!
//! Offsets are the client's: the agent keeps nothing per follower. A log
//! now shorter than the offset asked for was replaced or truncated (a new
//! setup run): the answer starts again from 0 and says so
//! (`X-Log-Restarted: 1`) rather than failing, so a follower sees the new
//! run from its start.

use crate::app::App;
use crate::http::api_error::ApiError;
use crate::http::body::Body;
use crate::http::{Response, query_pairs};
use crate::readiness::{POLL_INTERVAL, process_alive};
use crate::setup::record::{self, SETUP_LOG};
use hyper::StatusCode;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use lab_agent_proto::{
    LOG_OFFSET_HEADER, LOG_RESTARTED_HEADER, MAX_LOG_CHUNK_BYTES, MAX_READY_WAIT_SECS,
    SETUP_STATE_HEADER, SetupState,
};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

pub async fn handle(app: &App, query: Option<&str>) -> Result<Response, ApiError> {
    let (offset, wait) = parse(query)?;
    let dir = &app.readiness.config().state_dir;
    let path = dir.join(SETUP_LOG);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    let mut shutdown = app.shutdown.clone();
    let (state, len) = loop {
        let state = setup_state(dir);
        let len = log_len(&path)?;
        // Something to answer, or nothing more to wait for.
        if len != offset
            || !matches!(state, SetupState::Pending | SetupState::Running)
            || tokio::time::Instant::now() >= deadline
            || *shutdown.borrow()
        {
            break (state, len);
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + POLL_INTERVAL)) => {}
            _ = shutdown.wait_for(|&s| s) => {}
        }
    };
    let restarted = len < offset;
    let start = if restarted { 0 } else { offset };
    let bytes = read_from(&path, start)
        .map_err(|e| ApiError::Internal(format!("failed to read `{}`: {e}", path.display())))?;
    let mut resp = crate::http::response(StatusCode::OK, Body::default());
    let headers = resp.headers_mut();
    headers.insert(
        LOG_OFFSET_HEADER,
        HeaderValue::from(start + bytes.len() as u64),
    );
    headers.insert(SETUP_STATE_HEADER, HeaderValue::from_static(state.as_str()));
    if restarted {
        headers.insert(LOG_RESTARTED_HEADER, HeaderValue::from_static("1"));
    }
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    *resp.status_mut() = StatusCode::OK;
    resp.body_mut().push_bytes(bytes);
    Ok(resp)
}

/// `offset` (default 0) and `wait` (0 to 60 s); anything else is a 400.
fn parse(query: Option<&str>) -> Result<(u64, u64), ApiError> {
    let (mut offset, mut wait) = (0, 0);
    for (key, value) in query_pairs(query) {
        let slot = match key {
            "offset" => &mut offset,
            "wait" => &mut wait,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: /v1/setup/log takes `offset` and `wait`"
                )));
            }
        };
        // Digits only: `u64::from_str` also takes `+5`.
        *slot = value
            .parse()
            .ok()
            .filter(|_| !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                ApiError::BadRequest(format!("{key}={value:?} is not a whole number"))
            })?;
    }
    if wait > MAX_READY_WAIT_SECS {
        return Err(ApiError::BadRequest(format!(
            "wait={wait} is too long: use 0 to {MAX_READY_WAIT_SECS} and poll again"
        )));
    }
    Ok((offset, wait))
}

/// The setup's state as its record says; a `running` record whose process
/// is gone is `failed` (as `/v1/ready` reports it), so a follower stops.
fn setup_state(dir: &Path) -> SetupState {
    match record::read(dir) {
        Ok(None) => SetupState::Pending,
        Ok(Some(r)) if r.state == SetupState::Running && !r.pid.is_some_and(process_alive) => {
            SetupState::Failed
        }
        Ok(Some(r)) => r.state,
        Err(_) => SetupState::Failed,
    }
}

/// The log's length; 0 while it does not exist.
fn log_len(path: &Path) -> Result<u64, ApiError> {
    match record::open_regular(path) {
        Ok(f) => f.metadata().map(|m| m.len()),
        Err(e) => Err(e),
    }
    .or_else(|e| match e.kind() {
        io::ErrorKind::NotFound => Ok(0),
        _ => Err(e),
    })
    .map_err(|e| ApiError::Internal(format!("failed to read `{}`: {e}", path.display())))
}

/// At most [`MAX_LOG_CHUNK_BYTES`] from `start`, never through a symlink.
fn read_from(path: &Path, start: u64) -> io::Result<Vec<u8>> {
    let mut f = match record::open_regular(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        r => r?,
    };
    f.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    f.take(MAX_LOG_CHUNK_BYTES).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parsing() {
        assert_eq!(parse(None).unwrap(), (0, 0));
        assert_eq!(parse(Some("offset=12&wait=60")).unwrap(), (12, 60));
        for bad in [
            "wait=61",
            "offset=-1",
            "offset=",
            "offset=+1",
            "x=1",
            "wait=1.5",
        ] {
            assert!(
                matches!(parse(Some(bad)), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}
