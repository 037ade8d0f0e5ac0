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
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;
use std::cell::Cell;

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
    let mut resp = response(status, body);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

thread_local! {
    static SPARE_HEADERS: Cell<Option<HeaderMap>> = const { Cell::new(None) };
}

/// Gives a request's header map, read to the end, for the answer's headers.
/// hyper parses each request into the map of the answer before it (it keeps
/// that one for the purpose); the agent used to drop the request's and
/// allocate the answer's anew, and musl's allocator gave the block of the
/// one to the kernel and mapped a new one for the other: an `munmap` and an
/// `mmap` on every request's path. With the map handed along, none.
pub fn recycle_headers(mut map: HeaderMap) {
    map.clear();
    SPARE_HEADERS.set(Some(map));
}

/// An answer with no headers yet, in the map [`recycle_headers`] gave back
/// when there is one.
pub fn response(status: StatusCode, body: Body) -> Response {
    let mut resp = hyper::Response::new(body);
    *resp.status_mut() = status;
    if let Some(map) = SPARE_HEADERS.take() {
        *resp.headers_mut() = map;
    }
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

    /// A request's map, given back, is the next answer's: emptied, with
    /// its memory (so parsing the request after it allocates nothing).
    #[test]
    fn an_answer_takes_the_header_map_a_request_gave_back() {
        let mut map = HeaderMap::with_capacity(12);
        map.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        let cap = map.capacity();
        recycle_headers(map);
        let resp = json_body(StatusCode::OK, Body::default());
        assert_eq!(resp.headers().len(), 1);
        assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(resp.headers().capacity(), cap);
        // Taken: the next answer starts from an empty map of its own.
        let next = response(StatusCode::OK, Body::default());
        assert_eq!(next.headers().capacity(), 0);
    }

    #[test]
    fn query_pairs_splits() {
        let got: Vec<_> = query_pairs(Some("wait=5&x&y=")).collect();
        assert_eq!(got, vec![("wait", "5"), ("x", ""), ("y", "")]);
        assert_eq!(query_pairs(None).count(), 0);
    }
}
