//! A minimal HTTP/1.1 probe over the forwarded port.
//!
//! qemu's user network (slirp) accepts a TCP connection on the forwarded port
//! as soon as qemu runs, long before anything listens in the guest; the
//! connection is then reset or left silent. Only a status line from the guest
//! proves it is up. The harness does not speak the agent's API beyond this:
//! tests use the client crate or `labctl` for that.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::VmError;

/// An HTTP answer: status code and the raw response (headers and body).
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    pub status: u16,
    pub raw: String,
}

impl HttpAnswer {
    /// The body: what follows the blank line after the headers.
    pub fn body(&self) -> &str {
        self.raw.split_once("\r\n\r\n").map_or("", |(_, body)| body)
    }
}

/// One `GET path` with `Connection: close`; `bearer` (if any) goes in the
/// `Authorization` header and nowhere else. Errors are short reasons.
pub fn get(addr: SocketAddr, path: &str, bearer: Option<&str>) -> Result<HttpAnswer, String> {
    get_within(addr, path, bearer, Duration::from_secs(3))
}

/// [`get`] with `timeout` for connecting, and for each read and write.
/// Before the guest listens, qemu's port forward accepts and then stays
/// silent: a short timeout makes a probe try again soon.
pub fn get_within(
    addr: SocketAddr,
    path: &str,
    bearer: Option<&str>,
    timeout: Duration,
) -> Result<HttpAnswer, String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream
        .take(1 << 20)
        .read_to_end(&mut raw)
        .map_err(|e| e.to_string())?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            if raw.is_empty() {
                "connection closed without an answer".to_string()
            } else {
                format!("not an HTTP answer: {:?}", &raw[..raw.len().min(80)])
            }
        })?;
    Ok(HttpAnswer { status, raw })
}

/// Polls `GET path` (no credentials) every 250 ms until any HTTP answer
/// arrives (a 401 counts: something answers), or `timeout` passes.
pub fn wait_for_answer(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<HttpAnswer, VmError> {
    let started = Instant::now();
    loop {
        let last_error = match get(addr, path, None) {
            Ok(answer) => return Ok(answer),
            Err(e) => e,
        };
        if started.elapsed() >= timeout {
            return Err(VmError::HttpTimeout {
                url: format!("http://{addr}{path}"),
                waited: started.elapsed(),
                last_error,
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A listener that accepts, reads the request, then does `then`.
    fn server(then: impl FnOnce(TcpStream) + Send + 'static) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            then(stream);
        });
        addr
    }

    #[test]
    fn an_accepted_connection_without_an_answer_is_not_up() {
        // What slirp does before the guest listens.
        let addr = server(drop);
        let err = get(addr, "/", None).unwrap_err();
        assert!(err.contains("without an answer"), "{err}");
    }

    #[test]
    fn any_status_line_is_an_answer() {
        let addr = server(|mut s| {
            let _ = s.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n");
        });
        let answer = get(addr, "/v1/ready", None).unwrap();
        assert_eq!(answer.status, 401);
    }

    #[test]
    fn garbage_is_not_an_answer() {
        let addr = server(|mut s| {
            let _ = s.write_all(b"SSH-2.0-OpenSSH\r\n");
        });
        let err = get(addr, "/", None).unwrap_err();
        assert!(err.contains("not an HTTP answer"), "{err}");
    }
}
