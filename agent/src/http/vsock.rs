//! virtio-vsock sockets for the accept loop, on the runtime's reactor:
//! `AF_VSOCK` through nix, no crate of its own (a vsock crate would bring
//! a second socket layer into every VM for four syscalls).
//!
//! The agent listens on any CID: inside a guest the host reaches it as
//! `CID:PORT` (KubeVirt's virt-handler, a hybrid-vsock UNIX socket of
//! Firecracker, Cloud Hypervisor or vhost-device-vsock), and no guest
//! netfilter rule, route or interface is on that path.

use nix::libc;
use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockType, VsockAddr, accept4, bind, getpeername, listen,
    shutdown, socket,
};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `VMADDR_CID_ANY`: whatever CID this machine has, now or later.
const CID_ANY: u32 = u32::MAX;

/// A listening vsock socket.
#[derive(Debug)]
pub struct VsockListener {
    fd: AsyncFd<OwnedFd>,
    pub port: u32,
}

impl VsockListener {
    /// Listens on `port` of any CID. Binding needs no vsock device (the
    /// kernel takes a wildcard CID without one), so this fails only where
    /// the kernel has no vsock at all.
    pub fn bind(port: u32) -> io::Result<VsockListener> {
        let fd = socket(
            AddressFamily::Vsock,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        bind(fd.as_raw_fd(), &VsockAddr::new(CID_ANY, port))?;
        listen(&fd, Backlog::new(128).unwrap_or(Backlog::MAXCONN))?;
        Ok(VsockListener {
            fd: register(fd)?,
            port,
        })
    }

    /// The next connection and its peer's `(cid, port)`.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(VsockStream, u32, u32)>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let accepted = guard.try_io(|fd| {
                Ok(accept4(
                    fd.as_fd(),
                    SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
                )?)
            });
            match accepted {
                Ok(Ok(conn)) => {
                    // A peer gone between accept and here: its address is
                    // unknown, the connection will fail on its own.
                    let (cid, port) = getpeername::<VsockAddr>(conn.as_raw_fd())
                        .map_or((CID_ANY, 0), |a| (a.cid(), a.port()));
                    return Poll::Ready(Ok((VsockStream::new(conn)?, cid, port)));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// `fd` on the runtime's reactor.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is open, and its descriptor stays the same one
    // until it is dropped, which the `AsyncFd` owning it does last.
    Ok(unsafe { AsyncFd::register(fd) }?)
}

/// This machine's CID, when it has a vsock device (a driver registered as
/// the guest's transport); `None` when it has none (yet).
pub fn local_cid() -> Option<u32> {
    let dev = std::fs::File::open("/dev/vsock").ok()?;
    let mut cid: u32 = CID_ANY;
    // IOCTL_VM_SOCKETS_GET_LOCAL_CID (`linux/vm_sockets.h`): `_IO(7, 0xb9)`.
    const GET_LOCAL_CID: libc::c_ulong = 0x7b9;
    // SAFETY: the ioctl writes one `u32` through the pointer, which lives
    // for the call; the descriptor is open for it.
    let r = unsafe { libc::ioctl(dev.as_raw_fd(), GET_LOCAL_CID as _, &mut cid as *mut u32) };
    (r == 0 && cid != CID_ANY).then_some(cid)
}

/// One accepted vsock connection.
#[derive(Debug)]
pub struct VsockStream {
    fd: AsyncFd<OwnedFd>,
}

impl VsockStream {
    fn new(fd: OwnedFd) -> io::Result<VsockStream> {
        Ok(VsockStream { fd: register(fd)? })
    }
}

impl AsyncRead for VsockStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| {
                // SAFETY: reads at most `unfilled.len()` bytes into it.
                let n = unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for VsockStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| {
                // MSG_NOSIGNAL: a peer that went away is an error here,
                // never a SIGPIPE for the whole agent.
                // SAFETY: sends at most `buf.len()` bytes from it.
                let n = unsafe {
                    libc::send(
                        fd.as_raw_fd(),
                        buf.as_ptr().cast(),
                        buf.len(),
                        libc::MSG_NOSIGNAL,
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(
            shutdown(self.fd.as_raw_fd(), nix::sys::socket::Shutdown::Write).map_err(Into::into),
        )
    }
}
