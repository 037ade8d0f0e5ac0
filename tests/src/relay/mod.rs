//! Stand-ins for what sits between a backend and a guest's vsock, for the
//! tests of the client's `vsock+unix://` and `kubevirt://` transports.
//! Each is named a stand-in wherever it is used: it behaves as the real
//! one does per its source, it is not the real one.
//!
//! - [`GuestVsock`]: how a stand-in reaches "the guest's vsock port": a
//!   real guest's, through vhost-device-vsock's hybrid socket (the VM
//!   tests), or, on loopback, an agent's TCP address standing for it.
//! - [`hybrid`]: [`HybridStandIn`], a hybrid vsock socket as
//!   vhost-device-vsock serves one (`CONNECT PORT\n` → `OK PORT\n`), for
//!   loopback tests; the VM tests use the real one.
//! - [`kubevirt`]: [`KubevirtStandIn`], the Kubernetes API server, virt-api
//!   and virt-handler of KubeVirt's vsock subresource in one TLS server.
//! - [`certs`]: a throwaway CA and server certificate from the `openssl`
//!   command.
//!
//! Each serves from its own tokio runtime on a thread of its own, so it
//! works beside any test's runtime; dropping it stops it.

pub mod certs;
pub mod hybrid;
pub mod kubevirt;

pub use hybrid::HybridStandIn;
pub use kubevirt::{KubevirtStandIn, StandInVmi};

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

/// How a stand-in reaches a guest's vsock port.
#[derive(Debug, Clone)]
pub enum GuestVsock {
    /// The guest's real vsock: vhost-device-vsock's `--uds-path` socket,
    /// which takes `CONNECT PORT\n` and answers `OK PORT\n`, or closes
    /// when nothing listens on the port in the guest.
    Hybrid(PathBuf),
    /// On loopback: the agent's TCP address stands for the guest's vsock
    /// `port`; any other port has nothing listening.
    Loopback { port: u32, agent: SocketAddr },
}

/// A connection to a guest's vsock port.
#[derive(Debug)]
pub enum GuestConn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl GuestVsock {
    /// Connects to `port`; `Err` when nothing listens there.
    pub async fn dial(&self, port: u32) -> io::Result<GuestConn> {
        match self {
            GuestVsock::Hybrid(path) => {
                let mut s = UnixStream::connect(path).await?;
                s.write_all(format!("CONNECT {port}\n").as_bytes()).await?;
                let mut line = Vec::new();
                loop {
                    let b = s.read_u8().await.map_err(|_| refused(port))?;
                    if b == b'\n' || line.len() > 64 {
                        break;
                    }
                    line.push(b);
                }
                if !line.starts_with(b"OK") {
                    return Err(refused(port));
                }
                Ok(GuestConn::Unix(s))
            }
            GuestVsock::Loopback { port: p, agent } if *p == port => {
                let s = TcpStream::connect(agent).await?;
                s.set_nodelay(true)?;
                Ok(GuestConn::Tcp(s))
            }
            GuestVsock::Loopback { .. } => Err(refused(port)),
        }
    }
}

fn refused(port: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionRefused,
        format!("nothing listens on the guest's vsock port {port}"),
    )
}

/// Copies both ways until either side ends, then closes both (as
/// virt-handler's `stream` and vhost-device-vsock do).
pub(crate) async fn splice<A, B>(a: A, b: B)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    tokio::select! {
        _ = tokio::io::copy(&mut ar, &mut bw) => {}
        _ = tokio::io::copy(&mut br, &mut aw) => {}
    }
}

/// A runtime on a thread of its own, for a stand-in's tasks.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("relay-stand-in")
        .enable_all()
        .build()
        .expect("a runtime for the stand-in")
}

impl tokio::io::AsyncRead for GuestConn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            GuestConn::Unix(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            GuestConn::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for GuestConn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            GuestConn::Unix(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            GuestConn::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            GuestConn::Unix(s) => std::pin::Pin::new(s).poll_flush(cx),
            GuestConn::Tcp(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            GuestConn::Unix(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            GuestConn::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}
