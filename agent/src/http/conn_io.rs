//! The socket as the HTTP layer sees it, with two rules hyper lacks:
//! - a **write timeout**: a client that stops reading while its answer is
//!   being sent is dropped after [`WRITE_TIMEOUT`] without progress, so an
//!   unread answer cannot hold its memory (or a connection) forever;
//! - a connection whose bytes are still waiting to go out is **busy**
//!   ([`crate::http::conns`]): the longest-idle eviction must not cut an answer
//!   that is being written, only connections that do nothing.

use crate::http::conns::{Busy, Conn};
use crate::http::listen::Stream;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a write may make no progress before the connection is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct ConnIo {
    stream: Stream,
    conn: Arc<Conn>,
    /// Set while a write or flush is pending: the deadline, and the busy
    /// mark that keeps the connection from being evicted meanwhile.
    stalled: Option<(Pin<Box<Sleep>>, Busy)>,
}

impl ConnIo {
    pub fn new(stream: Stream, conn: Arc<Conn>) -> ConnIo {
        ConnIo {
            stream,
            conn,
            stalled: None,
        }
    }

    /// Turns a pending write into a deadline; an expired one into an error.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let conn = &self.conn;
        let (deadline, _) = self
            .stalled
            .get_or_insert_with(|| (Box::pin(tokio::time::sleep(WRITE_TIMEOUT)), conn.busy()));
        ready!(deadline.as_mut().poll(cx));
        self.stalled = None;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client read nothing of its answer for the write timeout",
        )))
    }

    /// A write went through: the deadline starts over at the next stall.
    /// The busy mark stays until a flush completes.
    fn progressed(&mut self) {
        if let Some((d, _)) = &mut self.stalled {
            d.as_mut()
                .reset(tokio::time::Instant::now() + WRITE_TIMEOUT);
        }
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Pending => this.pending(cx),
            Poll::Ready(r) => {
                this.progressed();
                Poll::Ready(r)
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.pending(cx),
            Poll::Ready(r) => {
                this.progressed();
                Poll::Ready(r)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_flush(cx) {
            Poll::Pending => this.pending(cx),
            Poll::Ready(r) => {
                this.stalled = None;
                Poll::Ready(r)
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.stalled = None;
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}
