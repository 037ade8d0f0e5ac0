//! Where the agent listens (`--listen`, repeatable): TCP addresses and
//! virtio-vsock ports, served by one accept loop with the same API, token
//! and limits. What is accepted is a [`Stream`] from a [`Peer`], whichever
//! the channel.

use crate::http::vsock::{VsockListener, VsockStream};
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::str::FromStr;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// One `--listen` value: `IP:PORT` or `vsock:PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    /// A vsock port, on any CID.
    Vsock(u32),
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        match s.strip_prefix("vsock:") {
            Some(port) => port
                .parse()
                .map(Listen::Vsock)
                .map_err(|_| format!("`{port}` is not a vsock port (0 to 4294967295)")),
            None => s
                .parse()
                .map(Listen::Tcp)
                .map_err(|_| "give IP:PORT or vsock:PORT".to_owned()),
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(a) => a.fmt(f),
            Listen::Vsock(port) => write!(f, "vsock:{port}"),
        }
    }
}

/// The sockets bound, polled together.
#[derive(Debug)]
pub struct Listeners {
    bound: Vec<Listener>,
    /// Where the next poll starts: a busy channel cannot starve another.
    next: usize,
}

#[derive(Debug)]
enum Listener {
    Tcp(TcpListener),
    Vsock(VsockListener),
}

impl Listeners {
    /// Binds every address. A vsock port where the kernel has no vsock
    /// at all is skipped with one log line: the agent goes on with TCP
    /// (nothing bound at all is an error). A TCP address that cannot be
    /// bound is an error.
    pub async fn bind(addrs: &[Listen]) -> Result<Listeners, (Listen, io::Error)> {
        let mut bound = Vec::new();
        let mut skipped = None;
        for &addr in addrs {
            match addr {
                Listen::Tcp(a) => bound.push(Listener::Tcp(
                    TcpListener::bind(a).await.map_err(|e| (addr, e))?,
                )),
                Listen::Vsock(port) => match VsockListener::bind(port) {
                    Ok(l) => {
                        if crate::http::vsock::local_cid().is_none() {
                            tracing::info!(
                                %addr,
                                "no vsock device (yet): listening on it anyway, for when its driver loads; until then only TCP reaches the agent"
                            );
                        }
                        bound.push(Listener::Vsock(l));
                    }
                    Err(e) => {
                        tracing::warn!(%addr, error = %e, "no vsock in this kernel: serving without it");
                        skipped.get_or_insert((addr, e));
                    }
                },
            }
        }
        match skipped {
            Some(failed) if bound.is_empty() => Err(failed),
            _ => Ok(Listeners { bound, next: 0 }),
        }
    }

    /// What was bound, for the log and `--addr-file` (a TCP port 0 as the
    /// port the kernel chose).
    pub fn addrs(&self) -> Vec<Listen> {
        self.bound
            .iter()
            .filter_map(|l| match l {
                Listener::Tcp(t) => t.local_addr().ok().map(Listen::Tcp),
                Listener::Vsock(v) => Some(Listen::Vsock(v.port)),
            })
            .collect()
    }

    /// The next connection on any of them.
    pub async fn accept(&mut self) -> io::Result<(Stream, Peer)> {
        std::future::poll_fn(|cx| {
            let n = self.bound.len();
            for k in 0..n {
                let i = (self.next + k) % n;
                let polled = match &self.bound[i] {
                    Listener::Tcp(l) => l
                        .poll_accept(cx)
                        .map_ok(|(s, a)| (Stream::Tcp(s), Peer::Tcp(a))),
                    Listener::Vsock(l) => l
                        .poll_accept(cx)
                        .map_ok(|(s, cid, port)| (Stream::Vsock(s), Peer::Vsock { cid, port })),
                };
                if polled.is_ready() {
                    self.next = (i + 1) % n;
                    return polled;
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// Who connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    Vsock { cid: u32, port: u32 },
}

/// A peer's host, as the summary of rejected requests names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerHost {
    Ip(IpAddr),
    Cid(u32),
}

impl Peer {
    pub fn host(self) -> PeerHost {
        match self {
            Peer::Tcp(a) => PeerHost::Ip(a.ip()),
            Peer::Vsock { cid, .. } => PeerHost::Cid(cid),
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(a) => a.fmt(f),
            Peer::Vsock { cid, port } => write!(f, "vsock:{cid}:{port}"),
        }
    }
}

impl fmt::Display for PeerHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerHost::Ip(ip) => ip.fmt(f),
            PeerHost::Cid(cid) => write!(f, "vsock:{cid}"),
        }
    }
}

/// An accepted connection: one type for hyper, so its HTTP/1.1 code is
/// in the agent once whatever the channel (a second copy would cost
/// tens of KiB in every VM).
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Vsock(VsockStream),
}

impl Stream {
    /// Small request/answer pairs: no Nagle on TCP (vsock has none).
    pub fn set_nodelay(&self) {
        if let Stream::Tcp(s) = self {
            let _ = s.set_nodelay(true);
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Vsock(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Vsock(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    /// Hyper hands an answer over as its head and body pieces: on TCP in
    /// one `writev`. (Without this, the default wrote only the first piece
    /// per call: eleven `sendto`s, and as many segments, for an exec's
    /// answer.)
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Vsock(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Vsock(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Vsock(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Vsock(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_values() {
        assert_eq!(
            "0.0.0.0:8899".parse::<Listen>(),
            Ok(Listen::Tcp("0.0.0.0:8899".parse().unwrap()))
        );
        assert_eq!("vsock:8899".parse::<Listen>(), Ok(Listen::Vsock(8899)));
        assert_eq!(Listen::Vsock(8899).to_string(), "vsock:8899");
        assert!("vsock:".parse::<Listen>().is_err());
        assert!("vsock:-1".parse::<Listen>().is_err());
        assert!("vsock:4294967296".parse::<Listen>().is_err());
        assert!("nope".parse::<Listen>().is_err());
        assert_eq!(
            Peer::Vsock { cid: 2, port: 1025 }.to_string(),
            "vsock:2:1025"
        );
        assert_eq!(
            Peer::Vsock { cid: 2, port: 9 }.host().to_string(),
            "vsock:2"
        );
    }
}
