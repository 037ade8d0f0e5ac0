//! `vsock://CID:PORT`: an `AF_VSOCK` stream from this host to a guest (the
//! host needs a vsock transport for its guests: `vhost_vsock` under
//! qemu/KVM, as on a KubeVirt node). Raw syscalls on tokio's reactor:
//! tokio has no vsock type, and a crate for it would bring process control
//! (`nix`) into every backend.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Connects to `port` of guest `cid`. A port nobody listens on is
/// `ConnectionReset` (the guest's kernel resets it); a host without a
/// vsock transport to guests, `ENODEV`-like errors, said in the message.
pub(crate) async fn connect(cid: u32, port: u32) -> io::Result<VsockStream> {
    // SAFETY: plain syscalls on a descriptor this function owns; the
    // address is a fully initialised `sockaddr_vm` of the size passed.
    let fd = unsafe {
        let raw = libc::socket(
            libc::AF_VSOCK,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if raw < 0 {
            return Err(explain(io::Error::last_os_error(), cid, port));
        }
        let fd = OwnedFd::from_raw_fd(raw);
        let mut addr: libc::sockaddr_vm = std::mem::zeroed();
        addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
        addr.svm_cid = cid;
        addr.svm_port = port;
        let r = libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_vm).cast(),
            size_of::<libc::sockaddr_vm>() as libc::socklen_t,
        );
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(explain(e, cid, port));
            }
        }
        fd
    };
    let fd = register(fd)?;
    // Connected (or refused) once writable; the outcome is in SO_ERROR.
    let mut guard = fd.writable().await?;
    guard.clear_ready();
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR writes one `c_int` through the pointers given.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if err != 0 {
        return Err(explain(io::Error::from_raw_os_error(err), cid, port));
    }
    Ok(VsockStream { fd })
}

fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is open and keeps its descriptor until the
    // `AsyncFd` that owns it drops it.
    Ok(unsafe { AsyncFd::register(fd) }?)
}

/// The error with what it means for vsock, same kind (a backend's
/// predicates and `wait_ready`'s "not up yet" read the kind).
fn explain(e: io::Error, cid: u32, port: u32) -> io::Error {
    let what = match e.raw_os_error() {
        Some(libc::ECONNRESET | libc::ECONNREFUSED) => {
            format!("nothing listens on vsock port {port} of CID {cid} (yet)")
        }
        Some(libc::EAFNOSUPPORT) => "this kernel has no vsock (module `vsock`)".to_owned(),
        Some(libc::ENODEV | libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EADDRNOTAVAIL) => {
            format!(
                "no vsock path to CID {cid}: is there a guest with that CID, and a vsock \
                 transport for guests on this host (`vhost_vsock`)?"
            )
        }
        Some(libc::ETIMEDOUT) => format!("CID {cid} did not answer on vsock port {port}"),
        _ => return e,
    };
    io::Error::new(e.kind(), format!("{what} ({e})"))
}

/// A connected vsock stream.
#[derive(Debug)]
pub(crate) struct VsockStream {
    fd: AsyncFd<OwnedFd>,
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
            // SAFETY: reads at most `unfilled.len()` bytes into it.
            let read = guard.try_io(|fd| {
                let n = unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
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
            // SAFETY: sends at most `buf.len()` bytes from it; no SIGPIPE
            // for the backend's process when the guest went away.
            let sent = guard.try_io(|fd| {
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
            });
            match sent {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: shutdown of the descriptor this stream owns.
        let r = unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_WR) };
        Poll::Ready(if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        })
    }
}
