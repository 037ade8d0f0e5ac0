//! `GET /v1/ready[?wait=SECS]`.

use crate::app::App;
use crate::http::api_error::ApiError;
use crate::http::{Response, json_bytes, query_pairs};
use crate::readiness::POLL_INTERVAL;
use hyper::StatusCode;
use lab_agent_proto::{MAX_READY_WAIT_SECS, ReadyState};
use std::time::Duration;

pub async fn handle(app: &App, query: Option<&str>) -> Result<Response, ApiError> {
    let wait = parse_wait(query)?;
    let mut snap = app.readiness.current();
    if wait > Duration::ZERO && !snap.state.is_terminal() {
        let deadline = tokio::time::Instant::now() + wait;
        let mut shutdown = app.shutdown.clone();
        while !snap.state.is_terminal() && tokio::time::Instant::now() < deadline {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + POLL_INTERVAL)) => {}
                _ = shutdown.wait_for(|&s| s) => { snap = app.readiness.current(); break; }
            }
            snap = app.readiness.current();
        }
    }
    let status = if snap.state == ReadyState::Ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok(json_bytes(status, snap.body))
}

/// The `wait` of a `/v1/ready` query: 0 to 60 s; anything else is a 400.
pub fn parse_wait(query: Option<&str>) -> Result<Duration, ApiError> {
    let mut wait = Duration::ZERO;
    for (key, value) in query_pairs(query) {
        match key {
            "wait" => {
                // Digits only: `u64::from_str` also takes `+5`, which
                // API.md says is a 400.
                let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
                let secs: u64 = value.parse().ok().filter(|_| digits).ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "wait={value:?} is not a number of seconds: use 0 to {MAX_READY_WAIT_SECS}"
                    ))
                })?;
                if secs > MAX_READY_WAIT_SECS {
                    return Err(ApiError::BadRequest(format!(
                        "wait={secs} is too long: use 0 to {MAX_READY_WAIT_SECS} and poll again"
                    )));
                }
                wait = Duration::from_secs(secs);
            }
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: /v1/ready takes only `wait`"
                )));
            }
        }
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_parsing() {
        assert_eq!(parse_wait(None).unwrap(), Duration::ZERO);
        assert_eq!(parse_wait(Some("wait=5")).unwrap(), Duration::from_secs(5));
        assert_eq!(
            parse_wait(Some("wait=60")).unwrap(),
            Duration::from_secs(60)
        );
        for bad in [
            "wait=61", "wait=-1", "wait=abc", "wait=", "x=1", "wait=1.5", "wait=+5",
        ] {
            assert!(
                matches!(parse_wait(Some(bad)), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}
