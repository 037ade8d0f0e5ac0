//! A stand-in for KubeVirt's vsock subresource: the Kubernetes API server,
//! virt-api and virt-handler in one TLS server on loopback, relaying to a
//! guest's vsock ([`GuestVsock`]: a real guest's in the VM tests). It is
//! not KubeVirt; it does what KubeVirt's source says each part does
//! (kubevirt/kubevirt, read at `d923fdb`):
//!
//! - the API server: a bearer token it knows, else 401; RBAC `get` on
//!   `virtualmachineinstances/vsock` in `subresources.kubevirt.io` in the
//!   VMI's namespace, else 403 with the API server's wording; refusals are
//!   `Status` objects (`k8s.io/apimachinery` `errors`);
//! - virt-api (`pkg/virt-api/rest/vsock.go`, `streamer.go`,
//!   `dialers.go`, `subresource.go`): the VMI fetched (404
//!   `virtualmachineinstance.kubevirt.io "NAME" not found`), its
//!   `autoattachVSOCK` checked (400 `VSOCK is not attached.`), its phase
//!   (400 `Unable to connect to VirtualMachineInstance because phase is …
//!   instead of Running or Scheduled`), then virt-handler dialed, then the
//!   client upgraded (gorilla's `Upgrader`, subprotocol
//!   `plain.kubevirt.io`), then raw bytes both ways; `tls` defaults to
//!   `true` when not given;
//! - virt-handler (`pkg/virt-handler/rest/console.go` `VSOCKHandler` and
//!   `stream`, `pkg/virt-handler/vsock/dial.go`): `port` parsed (a bad
//!   one: 400 there, which virt-api reports as 500 `Can't connect to
//!   websocket (400): websocket: bad handshake`), the WebSocket upgraded,
//!   *then* the guest's port dialed: nothing listening there closes the
//!   upgraded connection without a frame; with `tls=true` it wraps the
//!   guest's port in TLS, which an agent that speaks HTTP fails, and
//!   closes the same way; each read of the guest's socket (up to 32 KiB,
//!   `io.Copy`) is one binary message, written as gorilla does with a
//!   10 KiB buffer (frames of 10,240 bytes, or one frame and an empty
//!   final one past 20,480); the client's binary messages go to the guest,
//!   text ones are dropped, a ping gets a pong, a close frame gets one back
//!   and ends the stream; when the guest's side ends, the connection is
//!   closed without a close frame.
//!
//! With `die_after`, the relay cuts every connection once that many bytes
//! of the guest's answer went through: a relay that dies mid-answer.

use super::certs::{self, Certs};
use super::{GuestConn, GuestVsock, runtime};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// A VMI the stand-in knows.
#[derive(Debug, Clone)]
pub struct StandInVmi {
    pub namespace: String,
    pub name: String,
    /// `spec.domain.devices.autoattachVSOCK`.
    pub autoattach_vsock: bool,
    /// `status.phase`.
    pub phase: String,
    pub vsock: GuestVsock,
}

impl StandInVmi {
    /// A running VMI with a vsock device.
    pub fn running(namespace: &str, name: &str, vsock: GuestVsock) -> StandInVmi {
        StandInVmi {
            namespace: namespace.into(),
            name: name.into(),
            autoattach_vsock: true,
            phase: "Running".into(),
            vsock,
        }
    }
}

/// A bearer token the stand-in API server knows, and where its RBAC lets
/// it open a VMI's vsock.
#[derive(Debug, Clone)]
pub struct Account {
    pub token: String,
    /// `system:serviceaccount:NS:NAME`.
    pub user: String,
    /// Namespaces where it may `get` `virtualmachineinstances/vsock`.
    pub vsock_in: Vec<String>,
}

#[derive(Debug, Clone)]
struct Cluster {
    vmis: Vec<StandInVmi>,
    accounts: Vec<Account>,
    die_after: Option<u64>,
    /// Each request's path and query, and the subprotocols it offered.
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

/// The stand-in, serving until dropped.
#[derive(Debug)]
pub struct KubevirtStandIn {
    addr: SocketAddr,
    certs: Certs,
    seen: Arc<Mutex<Vec<(String, String)>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl KubevirtStandIn {
    /// Makes certificates in `dir` and serves on `127.0.0.1:0`.
    pub fn start(
        dir: &Path,
        vmis: Vec<StandInVmi>,
        accounts: Vec<Account>,
        die_after: Option<u64>,
    ) -> KubevirtStandIn {
        let certs = certs::make(dir);
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&certs.cert)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&certs.key).unwrap();
        #[allow(deprecated)] // as the client: ring, see its `kubevirt` module
        let provider = rustls::crypto::ring::default_provider();
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        // The API server speaks HTTP/2 too, but an upgrade is HTTP/1.1.
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let cluster = Cluster {
            vmis,
            accounts,
            die_after,
            seen: seen.clone(),
        };
        let rt = runtime();
        // Bound here (a test may call this inside its own runtime, where
        // nothing may block on another): served by `rt`.
        let std = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the stand-in API server");
        std.set_nonblocking(true).unwrap();
        let addr = std.local_addr().unwrap();
        rt.spawn(async move {
            let listener = TcpListener::from_std(std).expect("register the stand-in API server");
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, cluster) = (acceptor.clone(), cluster.clone());
                tokio::spawn(async move {
                    let limit = std::time::Duration::from_secs(10);
                    if let Ok(Ok(tls)) = tokio::time::timeout(limit, acceptor.accept(tcp)).await {
                        serve(tls, &cluster).await;
                    }
                });
            }
        });
        KubevirtStandIn {
            addr,
            certs,
            seen,
            runtime: Some(rt),
        }
    }

    /// `https://127.0.0.1:PORT`: `--kube-server`.
    pub fn server(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn certs(&self) -> &Certs {
        &self.certs
    }

    /// Each request so far: its path and query, and the
    /// `Sec-WebSocket-Protocol` it offered.
    pub fn seen(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for KubevirtStandIn {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A request head, as far as the relay reads it.
struct Head {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn get(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.as_str())
    }

    fn query(&self, key: &str) -> Option<&str> {
        self.query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Option<Head> {
    let mut raw = Vec::new();
    while !raw.ends_with(b"\r\n\r\n") {
        raw.push(s.read_u8().await.ok()?);
        if raw.len() > 16 * 1024 {
            return None;
        }
    }
    let text = String::from_utf8(raw).ok()?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Some(Head {
        method,
        path: path.to_owned(),
        query: query.to_owned(),
        headers: lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
            .collect(),
    })
}

/// A Kubernetes `Status` answer.
async fn status<S: AsyncWrite + Unpin>(
    s: &mut S,
    code: u16,
    reason: &str,
    message: &str,
    details: serde_json::Value,
) {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "details": details, "code": code,
    })
    .to_string();
    let phrase = match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let answer = format!(
        "HTTP/1.1 {code} {phrase}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(answer.as_bytes()).await;
    let _ = s.shutdown().await;
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, cluster: &Cluster) {
    let Some(head) = read_head(&mut s).await else {
        return;
    };
    cluster.seen.lock().unwrap().push((
        format!("{}?{}", head.path, head.query),
        head.get("Sec-WebSocket-Protocol").to_owned(),
    ));
    // The API server: who is it, and may they.
    let account = head
        .get("Authorization")
        .strip_prefix("Bearer ")
        .and_then(|t| cluster.accounts.iter().find(|a| a.token == t));
    let Some(account) = account else {
        let d = serde_json::json!({});
        return status(&mut s, 401, "Unauthorized", "Unauthorized", d).await;
    };
    let parts: Vec<&str> = head.path.split('/').collect();
    let (namespace, name) = match parts.as_slice() {
        [
            "",
            "apis",
            "subresources.kubevirt.io",
            "v1",
            "namespaces",
            ns,
            "virtualmachineinstances",
            name,
            "vsock",
        ] => (*ns, *name),
        _ => {
            let d = serde_json::json!({});
            return status(
                &mut s,
                404,
                "NotFound",
                "the server could not find the requested resource",
                d,
            )
            .await;
        }
    };
    if head.method != "GET" || !account.vsock_in.iter().any(|n| n == namespace) {
        let message = format!(
            "virtualmachineinstances.subresources.kubevirt.io \"{name}\" is forbidden: User \"{}\" \
             cannot {} resource \"virtualmachineinstances/vsock\" in API group \
             \"subresources.kubevirt.io\" in the namespace \"{namespace}\"",
            account.user,
            head.method.to_lowercase()
        );
        let d = serde_json::json!({"name": name, "group": "subresources.kubevirt.io", "kind": "virtualmachineinstances"});
        return status(&mut s, 403, "Forbidden", &message, d).await;
    }
    // virt-api: the VMI, its vsock, its phase.
    let Some(vmi) = cluster
        .vmis
        .iter()
        .find(|v| v.namespace == namespace && v.name == name)
    else {
        let d = serde_json::json!({"name": name, "group": "kubevirt.io", "kind": "virtualmachineinstance"});
        let message = format!("virtualmachineinstance.kubevirt.io \"{name}\" not found");
        return status(&mut s, 404, "NotFound", &message, d).await;
    };
    if !vmi.autoattach_vsock {
        return status(
            &mut s,
            400,
            "BadRequest",
            "VSOCK is not attached.",
            serde_json::json!({}),
        )
        .await;
    }
    if vmi.phase != "Running" && vmi.phase != "Scheduled" {
        let message = format!(
            "Unable to connect to VirtualMachineInstance because phase is {} instead of Running or Scheduled",
            vmi.phase
        );
        return status(&mut s, 400, "BadRequest", &message, serde_json::json!({})).await;
    }
    // virt-handler, dialed by virt-api: its port and tls parameters.
    let port = head.query("port").unwrap_or("").parse::<u32>();
    let tls = match head.query("tls").unwrap_or("true") {
        "" => Ok(true),
        t => t.parse::<bool>(),
    };
    if port.is_err() || tls.is_err() {
        let message =
            "Internal error occurred: Can't connect to websocket (400): websocket: bad handshake";
        return status(&mut s, 500, "InternalError", message, serde_json::json!({})).await;
    }
    // virt-api upgrades the client (gorilla's Upgrader).
    let key = head.get("Sec-WebSocket-Key").to_owned();
    let upgrade = head.get("Upgrade").eq_ignore_ascii_case("websocket")
        && head
            .get("Connection")
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        && head.get("Sec-WebSocket-Version") == "13"
        && key.len() == 24;
    if !upgrade {
        let body = "Bad Request\nwebsocket: the client is not using the websocket protocol";
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = s.write_all(answer.as_bytes()).await;
        return;
    }
    let protocol = if head
        .get("Sec-WebSocket-Protocol")
        .split(',')
        .any(|p| p.trim() == "plain.kubevirt.io")
    {
        "Sec-WebSocket-Protocol: plain.kubevirt.io\r\n"
    } else {
        ""
    };
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n{protocol}\r\n",
        accept_for(&key)
    );
    if s.write_all(answer.as_bytes()).await.is_err() || s.flush().await.is_err() {
        return;
    }
    // virt-handler dials the guest after its upgrade: a port with nothing
    // listening, or a TLS handshake the agent cannot answer, closes the
    // upgraded connection without a frame.
    if matches!(tls, Ok(true)) {
        return;
    }
    let Ok(guest) = vmi.vsock.dial(port.unwrap()).await else {
        return;
    };
    relay(s, guest, cluster.die_after).await;
}

/// `Sec-WebSocket-Accept` for a key (RFC 6455; computed here, not with
/// the client's code, so each checks the other).
fn accept_for(key: &str) -> String {
    use base64::Engine;
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// gorilla's write buffer in KubeVirt (`WebsocketMessageBufferSize`).
const WRITE_BUFFER: usize = 10240;

/// One binary message as gorilla's `NextWriter`/`Write`/`Close` sends it
/// from a server with a [`WRITE_BUFFER`] buffer.
fn message(payload: &[u8]) -> Vec<u8> {
    let mut frames = Vec::new();
    let mut push = |fin: bool, first: bool, p: &[u8]| {
        let op = if first { 0x2 } else { 0x0 };
        frames.push(if fin { 0x80 | op } else { op });
        match p.len() {
            n @ 0..=125 => frames.push(n as u8),
            n @ 126..=0xffff => {
                frames.push(126);
                frames.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frames.push(127);
                frames.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frames.extend_from_slice(p);
    };
    if payload.len() > 2 * WRITE_BUFFER {
        // "Don't buffer large messages": one frame, then the final one empty.
        push(false, true, payload);
        push(true, false, &[]);
    } else {
        let chunks: Vec<&[u8]> = payload.chunks(WRITE_BUFFER).collect();
        for (i, c) in chunks.iter().enumerate() {
            push(i + 1 == chunks.len(), i == 0, c);
        }
    }
    frames
}

async fn relay<S: AsyncRead + AsyncWrite + Unpin>(
    client: S,
    guest: GuestConn,
    die_after: Option<u64>,
) {
    let (mut cr, cw) = tokio::io::split(client);
    let cw = Arc::new(tokio::sync::Mutex::new(cw));
    let (mut gr, mut gw) = tokio::io::split(guest);
    let to_client = {
        let cw = cw.clone();
        async move {
            let mut buf = vec![0u8; 32 * 1024];
            let mut sent = 0u64;
            loop {
                let room = match die_after {
                    Some(n) if sent >= n => return,
                    Some(n) => buf.len().min((n - sent) as usize),
                    None => buf.len(),
                };
                let n = match gr.read(&mut buf[..room]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                sent += n as u64;
                if cw
                    .lock()
                    .await
                    .write_all(&message(&buf[..n]))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    };
    let to_guest = async move {
        let mut text = false;
        loop {
            let Ok(frame) = read_frame(&mut cr).await else {
                return;
            };
            match frame.op {
                // continuation, text, binary
                0x0..=0x2 => {
                    if frame.op != 0x0 {
                        text = frame.op == 0x1;
                    }
                    if !text && gw.write_all(&frame.payload).await.is_err() {
                        return;
                    }
                }
                0x9 => {
                    let mut pong = vec![0x8a, frame.payload.len() as u8];
                    pong.extend_from_slice(&frame.payload);
                    if cw.lock().await.write_all(&pong).await.is_err() {
                        return;
                    }
                }
                0x8 => {
                    let _ = cw.lock().await.write_all(&[0x88, 0]).await;
                    return;
                }
                _ => {}
            }
        }
    };
    // Either side ending ends both: the connection closes, no frame.
    tokio::select! {
        _ = to_client => {}
        _ = to_guest => {}
    }
}

struct Frame {
    op: u8,
    payload: Vec<u8>,
}

/// A client frame; an unmasked one is a protocol error (gorilla:
/// "incorrect mask flag"), which ends the stream.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Frame> {
    let (b0, b1) = (r.read_u8().await?, r.read_u8().await?);
    if b1 & 0x80 == 0 || b0 & 0x70 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "incorrect mask flag",
        ));
    }
    let len = match b1 & 0x7f {
        126 => u64::from(r.read_u16().await?),
        127 => r.read_u64().await?,
        n => u64::from(n),
    };
    if len > 16 << 20 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut mask = [0u8; 4];
    r.read_exact(&mut mask).await?;
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload).await?;
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok(Frame {
        op: b0 & 0x0f,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_framed_as_gorilla_frames_them() {
        let small = message(b"hi");
        assert_eq!(small, [0x82, 2, b'h', b'i']);
        let two = message(&[0u8; 15000]);
        assert_eq!(
            &two[..4],
            &[0x02, 126, 0x28, 0x00],
            "10240 bytes, not final"
        );
        assert_eq!(
            &two[4 + 10240..4 + 10240 + 4],
            &[0x80, 126, 0x12, 0x98],
            "4760, final"
        );
        let big = message(&[0u8; 32768]);
        assert_eq!(&big[..4], &[0x02, 126, 0x80, 0x00], "all in one frame");
        assert_eq!(&big[4 + 32768..], &[0x80, 0], "then an empty final one");
    }
}
