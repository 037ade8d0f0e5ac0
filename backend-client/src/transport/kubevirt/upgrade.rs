//! The vsock subresource's request, and its answer up to the WebSocket:
//! TLS to the API server, the upgrade as KubeVirt's client sends it
//! (`kubevirt.io/client-go`'s `AsyncSubresourceHelper`: a gorilla dialer
//! offering `plain.kubevirt.io`), and a refusal read as the `Status` it is.

use super::{KubeApi, Refused, Relay, Vmi, read_token};
use ring::rand::{SecureRandom, SystemRandom};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// KubeVirt's WebSocket subprotocol for a plain byte stream
/// (`kubevirt.io/client-go/subresources.PlainStreamProtocolName`).
pub(crate) const PROTOCOL: &str = "plain.kubevirt.io";
/// RFC 6455's GUID for `Sec-WebSocket-Accept`.
const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The largest answer head read (the API server's are a few hundred bytes).
const MAX_HEAD: usize = 16 * 1024;
/// The largest refusal body read: a `Status` is a sentence.
const MAX_BODY: usize = 64 * 1024;

pub(super) async fn open(api: &KubeApi, vmi: &Vmi) -> io::Result<Relay> {
    let token = read_token(&api.token_file)?;
    let tcp = api.tcp().await?;
    let connector = tokio_rustls::TlsConnector::from(api.tls.clone());
    let mut tls = connector
        .connect(api.server_name.clone(), tcp)
        .await
        .map_err(|e| {
            refused(
                None,
                format!(
                    "TLS with the Kubernetes API server {} failed: {e} (is the CA bundle the \
                     cluster's?)",
                    api.server()
                ),
            )
        })?;
    let rng = SystemRandom::new();
    let mut nonce = [0u8; 16];
    rng.fill(&mut nonce)
        .map_err(|_| io::Error::other("no randomness for the WebSocket key"))?;
    let key = base64(&nonce);
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: lab-agent-client/{version}\r\n\
         Authorization: Bearer {token}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n",
        path = vmi.path(),
        host = api.authority,
        version = env!("CARGO_PKG_VERSION"),
    );
    tls.write_all(request.as_bytes()).await?;
    tls.flush().await?;
    let head = read_head(&mut tls).await?;
    if head.status != 101 {
        let body = read_body(&mut tls, &head).await;
        return Err(refused(Some(head.status), status_message(&head, &body)));
    }
    let expected = accept_for(&key);
    let problem = if !head.has("upgrade", "websocket") {
        Some("no `Upgrade: websocket`".to_owned())
    } else if head.get("sec-websocket-accept") != Some(expected.as_str()) {
        Some("a wrong `Sec-WebSocket-Accept`".to_owned())
    } else if head.get("sec-websocket-protocol") != Some(PROTOCOL) {
        Some(format!("not the subprotocol `{PROTOCOL}`"))
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(refused(
            Some(101),
            format!("the WebSocket the API server opened is not KubeVirt's: {problem}"),
        ));
    }
    Ok(Relay::new(tls, rng))
}

fn refused(status: Option<u16>, message: String) -> io::Error {
    io::Error::other(Refused { status, message })
}

/// An answer's status line and headers.
#[derive(Debug)]
struct Head {
    status: u16,
    reason: String,
    /// Names lowercased.
    headers: Vec<(String, String)>,
}

impl Head {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether header `name` lists `token` (case-insensitive).
    fn has(&self, name: &str, token: &str) -> bool {
        self.get(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    }
}

/// The head, one byte at a time up to its blank line (TLS buffers the
/// record, so these are no syscalls): what follows is the WebSocket's.
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> io::Result<Head> {
    let mut raw = Vec::with_capacity(512);
    while !raw.ends_with(b"\r\n\r\n") && !raw.ends_with(b"\n\n") {
        if raw.len() == MAX_HEAD {
            return Err(refused(
                None,
                format!("the API server's answer head is over {MAX_HEAD} bytes"),
            ));
        }
        let b = s.read_u8().await.map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the API server closed the connection before answering the upgrade",
                )
            } else {
                e
            }
        })?;
        raw.push(b);
    }
    let text = String::from_utf8_lossy(&raw);
    let mut lines = text.lines();
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next(), parts.next());
    let status = match (version, code.and_then(|c| c.parse::<u16>().ok())) {
        (Some(v), Some(c)) if v.starts_with("HTTP/1.") => c,
        _ => {
            return Err(refused(
                None,
                format!(
                    "the API server answered \"{}\", not HTTP/1.1",
                    lab_agent_proto::text::escape(
                        &status_line.chars().take(80).collect::<String>()
                    )
                ),
            ));
        }
    };
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Head {
        status,
        reason: parts.next().unwrap_or_default().trim().to_owned(),
        headers,
    })
}

/// A refusal's body, at most [`MAX_BODY`]: by `Content-Length`, else to
/// the end of the connection (a chunked one de-chunked). A failure reads
/// as an empty body: the status still says what happened.
async fn read_body<S: AsyncRead + Unpin>(s: &mut S, head: &Head) -> Vec<u8> {
    let mut body = Vec::new();
    let declared = head
        .get("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    let limit = declared.unwrap_or(MAX_BODY).min(MAX_BODY) as u64;
    let _ = s.take(limit).read_to_end(&mut body).await;
    if head.has("transfer-encoding", "chunked") {
        body = dechunk(&body);
    }
    body
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok());
        let Some(size) = size.filter(|&n| n > 0) else {
            break;
        };
        let start = eol + 2;
        let end = (start + size).min(raw.len());
        out.extend_from_slice(&raw[start..end]);
        raw = raw.get(end + 2..).unwrap_or_default();
    }
    out
}

/// What a refusal says: a Kubernetes `Status`'s `message` (virt-api and
/// the API server both answer with one), else the start of the body.
fn status_message(head: &Head, body: &[u8]) -> String {
    let status: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let message = status
        .as_ref()
        .filter(|s| s["kind"] == "Status")
        .and_then(|s| s["message"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            String::from_utf8_lossy(body)
                .trim()
                .chars()
                .take(300)
                .collect()
        });
    if message.is_empty() {
        head.reason.clone()
    } else {
        message
    }
}

/// `Sec-WebSocket-Accept` for `key`: base64 of SHA-1 of key and GUID.
pub(crate) fn accept_for(key: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}{WS_GUID}").as_bytes(),
    );
    base64(digest.as_ref())
}

/// Standard base64 with padding (a WebSocket key and its accept only).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_of_rfc_6455_s_example() {
        // RFC 6455, section 1.3.
        assert_eq!(
            accept_for("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(base64(b"the sample nonce"), "dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b""), "");
    }

    #[tokio::test]
    async fn heads_and_refusals() {
        let raw: &[u8] = b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n\
            Content-Length: 61\r\n\r\n{\"kind\":\"Status\",\"message\":\"no \\\"vsock\\\" for you\",\"code\":403}rest";
        let mut s = raw;
        let head = read_head(&mut s).await.unwrap();
        assert_eq!(head.status, 403);
        assert_eq!(head.get("content-type"), Some("application/json"));
        let body = read_body(&mut s, &head).await;
        assert_eq!(status_message(&head, &body), "no \"vsock\" for you");
        assert_eq!(s, b"rest", "the body's length is read, no more");

        let raw: &[u8] =
            b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n\
            5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        let mut s = raw;
        let head = read_head(&mut s).await.unwrap();
        let body = read_body(&mut s, &head).await;
        assert_eq!(status_message(&head, &body), "hello world");

        let mut s: &[u8] = b"HTTP/1.1 502 Bad Gateway\r\n\r\n";
        let head = read_head(&mut s).await.unwrap();
        assert_eq!(
            status_message(&head, &read_body(&mut s, &head).await),
            "Bad Gateway"
        );

        let mut s: &[u8] = b"SSH-2.0-OpenSSH\r\n\r\n";
        let e = read_head(&mut s).await.unwrap_err();
        assert!(e.to_string().contains("not HTTP/1.1"), "{e}");
        let mut s: &[u8] = b"HTTP/1.1 101 Switching";
        let e = read_head(&mut s).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted, "{e}");
    }
}
