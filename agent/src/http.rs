//! Small HTTP helpers shared by the endpoints: JSON responses, bounded body
//! reading, query parsing.

use crate::api_error::ApiError;
use crate::body::Body;
use http_body_util::{BodyExt, Limited};
use hyper::StatusCode;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use serde::Serialize;
use std::time::Duration;

pub type Response = hyper::Response<Body>;

/// How long a client may take to send a request body once its headers are in.
/// Together with hyper's header timeout this bounds a trickling client.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => json_bytes(status, Bytes::from(bytes)),
        // Serializing our own plain structs cannot fail; if it ever does,
        // answer with a fixed body rather than panic.
        Err(_) => json_bytes(
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from_static(
                br#"{"error":{"code":"internal","message":"failed to serialize the response"}}"#,
            ),
        ),
    }
}

pub fn json_bytes(status: StatusCode, body: Bytes) -> Response {
    json_body(status, Body::bytes(body))
}

pub fn json_body(status: StatusCode, body: Body) -> Response {
    let mut resp = hyper::Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Reads the whole body, refusing more than `limit` bytes (by the declared
/// length before reading, by the bytes actually sent while reading) and a
/// client that does not finish within [`BODY_READ_TIMEOUT`].
pub async fn read_body(req: hyper::Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    if let Some(len) = req.headers().get(CONTENT_LENGTH)
        && let Some(len) = len.to_str().ok().and_then(|s| s.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let body = Limited::new(req.into_body(), limit);
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

/// Splits a query string into key/value pairs. Only what this API needs:
/// no percent-decoding of keys, which are fixed ASCII names.
pub fn query_pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pairs_splits() {
        let got: Vec<_> = query_pairs(Some("wait=5&x&y=")).collect();
        assert_eq!(got, vec![("wait", "5"), ("x", ""), ("y", "")]);
        assert_eq!(query_pairs(None).count(), 0);
    }
}
