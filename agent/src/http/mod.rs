//! HTTP, whatever the endpoint: [`server`] (accept loop, timeouts, graceful
//! shutdown), [`conn_io`] (the socket as hyper sees it: write timeout, busy
//! while bytes are unsent), [`conns`] (the connection cap), [`router`] (the
//! table; auth first; one log line per request), [`rejections`] (401s and
//! refused connections, counted and summarised), [`listen`] (TCP and
//! vsock listeners, one stream type), [`vsock`] (`AF_VSOCK` on the
//! reactor), [`api_error`] (error →
//! status + JSON), [`body`] (bodies that escape output while sending it),
//! [`budget`] (the output held for unsent answers). And here, the small
//! helpers the endpoints share: JSON responses, query parsing.

pub mod api_error;
pub mod body;
pub mod budget;
pub mod conn_io;
pub mod conns;
pub mod listen;
pub mod rejections;
pub mod router;
pub mod server;
pub mod vsock;

use crate::http::body::Body;
use hyper::StatusCode;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use serde::Serialize;

pub type Response = hyper::Response<Body>;

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
