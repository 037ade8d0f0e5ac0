//! A stand-in for vhost-device-vsock's hybrid socket (its `--uds-path`),
//! for loopback tests of `vsock+unix://`: it reads `CONNECT PORT\n` (a
//! line, the word case-insensitive, as `read_local_stream_port` in
//! rust-vmm's `vhost-device-vsock/src/vhu_vsock_thread.rs` does), connects
//! to the guest's port and answers `OK PORT\n` (`vsock_conn.rs`, on the
//! guest's `VSOCK_OP_RESPONSE`), or closes the socket when nothing
//! listens there (the guest's `VSOCK_OP_RST`). The VM tests use the real
//! vhost-device-vsock.

use super::{GuestVsock, runtime, splice};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// A hybrid vsock socket served until dropped.
#[derive(Debug)]
pub struct HybridStandIn {
    path: PathBuf,
    runtime: Option<tokio::runtime::Runtime>,
}

impl HybridStandIn {
    /// Serves `path` (which must not exist), relaying to `guest`. With
    /// `die_after`, every connection is cut once that many bytes of the
    /// guest's answer went through: a relay that dies mid-answer.
    pub fn start(path: &Path, guest: GuestVsock, die_after: Option<u64>) -> HybridStandIn {
        let rt = runtime();
        // Bound here (a test may call this inside its own runtime, where
        // nothing may block on another): served by `rt`.
        let std = std::os::unix::net::UnixListener::bind(path).expect("bind the hybrid socket");
        std.set_nonblocking(true).unwrap();
        rt.spawn(async move {
            let listener = UnixListener::from_std(std).expect("register the hybrid socket");
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, guest.clone(), die_after));
            }
        });
        HybridStandIn {
            path: path.to_owned(),
            runtime: Some(rt),
        }
    }

    /// `vsock+unix:///PATH?port=PORT`.
    pub fn url(&self, port: u32) -> String {
        format!("vsock+unix://{}?port={port}", self.path.display())
    }
}

impl Drop for HybridStandIn {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn serve(mut conn: UnixStream, guest: GuestVsock, die_after: Option<u64>) {
    let mut line = Vec::new();
    while line.last() != Some(&b'\n') {
        match conn.read_u8().await {
            Ok(b) if line.len() < 128 => line.push(b),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&line);
    let mut words = text.split_whitespace();
    let port = match (
        words.next(),
        words.next().and_then(|p| p.parse::<u32>().ok()),
    ) {
        (Some(w), Some(port)) if w.eq_ignore_ascii_case("connect") => port,
        _ => return,
    };
    let Ok(g) = guest.dial(port).await else {
        return; // the guest reset it: the socket closes, no `OK`
    };
    if conn
        .write_all(format!("OK {port}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    match die_after {
        None => splice(conn, g).await,
        Some(n) => {
            let (gr, mut gw) = tokio::io::split(g);
            let (mut cr, mut cw) = conn.into_split();
            let mut head = gr.take(n);
            tokio::select! {
                _ = tokio::io::copy(&mut head, &mut cw) => {}
                _ = tokio::io::copy(&mut cr, &mut gw) => {}
            }
            // Dropping both: the relay is gone, mid-answer.
        }
    }
}
