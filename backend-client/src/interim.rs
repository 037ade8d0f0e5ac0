//! [`Guarded`]: the connection under hyper, cut at the interim (1xx)
//! response past [`MAX_INTERIM_RESPONSES`].
//!
//! hyper reads interim responses and drops them, parsing every head in its
//! read buffer in one loop (`proto/h1/role.rs`): a callback
//! (`hyper::ext::on_informational`) sees each one but cannot stop it, so a
//! `100 Continue` flood ran on for hundreds or thousands of heads before the
//! call was next polled (1 453 on a runtime grading 1 000 VMs). Here the
//! bytes are looked at before hyper gets them: the heads of the answer to
//! each request are counted as they arrive, and the read that would hand
//! hyper the head past the limit hands it only what comes before that head,
//! and every read after fails with [`InterimFlood`]. hyper has then parsed
//! exactly [`MAX_INTERIM_RESPONSES`] interim responses, reads nothing more,
//! and fails the request with that error, which the client turns into
//! [`crate::Error::Interim`]; the connection is dropped, never pooled.
//!
//! The scan follows the shape httparse accepts: optional empty lines, then
//! `HTTP/1.x NNN …`, header lines ended by LF or CRLF, the head ended by an
//! empty line. `101 Switching Protocols` is a final answer to hyper, so it
//! is not counted. Once a final head starts, the rest (its headers and
//! body) passes unread until the client writes its next request: hyper's
//! HTTP/1.1 client never writes a request before the previous answer is
//! read to its end.

use crate::reuse::Track;
use hyper_util::client::legacy::connect::{Connected, Connection};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most interim (1xx) responses accepted before an answer. A lab-agent
/// sends none (the client never sends `Expect: 100-continue`); hyper reads
/// and drops them, so without a count a guest sending `100 Continue` as
/// fast as it can keeps a backend core busy for the whole call. The
/// connection stops at the next one (`interim.rs`): hyper reads exactly
/// this many, the call ends in [`crate::Error::Interim`] with a count one more.
pub const MAX_INTERIM_RESPONSES: u32 = 8;

/// The error every read returns once the limit is passed.
#[derive(Debug, thiserror::Error)]
#[error("{count} interim (1xx) responses")]
pub(crate) struct InterimFlood {
    pub(crate) count: u32,
}

/// Where the scan is in the answer to the current request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In a head: `seen` bytes of it so far (empty lines before it not
    /// counted) and the status code's digits gathered so far.
    Head { seen: usize, code: u16 },
    /// In an interim head whose status is known, looking for its end: how
    /// far into an empty line (`1` after LF, `2` after LF CR).
    Interim { blank: u8 },
    /// In the final answer: nothing is scanned until the next request.
    Answer,
    /// The limit was passed: the connection is dead.
    Stopped,
}

/// The per-connection scanner, apart from the I/O so it is tested alone.
#[derive(Debug)]
pub(crate) struct Scan {
    state: State,
    /// Interim heads completed in the answer to the current request.
    count: u32,
}

impl Default for Scan {
    fn default() -> Self {
        Scan {
            state: State::Head { seen: 0, code: 0 },
            count: 0,
        }
    }
}

impl Scan {
    /// A new request is written: its answer starts.
    fn request_sent(&mut self) {
        if self.state != State::Stopped {
            *self = Scan::default();
        }
    }

    /// Scans newly read bytes; `Some(n)` when only the first `n` of them
    /// may reach hyper (the next head is past the limit).
    fn feed(&mut self, bytes: &[u8]) -> Option<usize> {
        // Where the head being scanned starts in `bytes` (0 if it started
        // in an earlier read, whose bytes hyper already has).
        let mut head_start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            match &mut self.state {
                State::Answer => return None,
                State::Stopped => return Some(0),
                State::Head { seen, code } => {
                    if *seen == 0 && (b == b'\r' || b == b'\n') {
                        continue;
                    }
                    if *seen == 0 {
                        head_start = i;
                    }
                    *seen += 1;
                    // `HTTP/1.1 NNN`: the status is bytes 10 to 12.
                    if (10..=12).contains(seen) {
                        if !b.is_ascii_digit() {
                            self.state = State::Answer;
                            return None;
                        }
                        *code = *code * 10 + u16::from(b - b'0');
                    }
                    if *seen == 12 {
                        if !(100..200).contains(code) || *code == 101 {
                            self.state = State::Answer;
                            return None;
                        }
                        if self.count == MAX_INTERIM_RESPONSES {
                            self.count += 1;
                            self.state = State::Stopped;
                            return Some(head_start);
                        }
                        self.state = State::Interim { blank: 0 };
                    }
                }
                State::Interim { blank } => match (b, *blank) {
                    (b'\n', 1 | 2) => {
                        self.count += 1;
                        self.state = State::Head { seen: 0, code: 0 };
                    }
                    (b'\n', _) => *blank = 1,
                    (b'\r', 1) => *blank = 2,
                    _ => *blank = 0,
                },
            }
        }
        None
    }

    fn flood(&self) -> Option<io::Error> {
        (self.state == State::Stopped).then(|| io::Error::other(InterimFlood { count: self.count }))
    }
}

/// A connection whose reads pass through a [`Scan`], and whose traffic a
/// [`Track`] records (what a call needs to know when it dies: `reuse.rs`).
#[derive(Debug)]
pub(crate) struct Guarded<T> {
    io: T,
    scan: Scan,
    track: Track,
}

impl<T> Guarded<T> {
    pub(crate) fn new(io: T) -> Self {
        Guarded {
            io,
            scan: Scan::default(),
            track: Track::default(),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.scan.flood() {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if let Some(keep) = this.scan.feed(&buf.filled()[before..]) {
            buf.set_filled(before + keep);
            // Nothing to hand over would read as the end of the stream.
            if keep == 0 {
                return Poll::Ready(Err(this.scan.flood().expect("stopped")));
            }
        }
        this.track.read(buf.filled().len() - before);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.scan.request_sent();
        let n = ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        this.track.wrote(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.scan.request_sent();
        let n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for b in bufs {
            let take = left.min(b.len());
            this.track.wrote(&b[..take]);
            left -= take;
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for Guarded<T> {
    fn connected(&self) -> Connected {
        self.track.attach(self.io.connected())
    }
}

/// The [`InterimFlood`] somewhere in an error's causes.
pub(crate) fn flood_in(e: &(dyn std::error::Error + 'static)) -> Option<u32> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        // An `io::Error`'s `source` skips the error it wraps: look inside.
        if let Some(f) = c
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<InterimFlood>())
        {
            return Some(f.count);
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

    /// Feeds `bytes` in pieces of `step`; what hyper would get, and whether
    /// the scan stopped.
    fn through(bytes: &[u8], step: usize) -> (Vec<u8>, bool) {
        let mut s = Scan::default();
        let mut out = Vec::new();
        for piece in bytes.chunks(step) {
            match s.feed(piece) {
                Some(n) => {
                    out.extend_from_slice(&piece[..n]);
                    return (out, true);
                }
                None => out.extend_from_slice(piece),
            }
        }
        (out, false)
    }

    #[test]
    fn a_flood_is_cut_before_the_head_past_the_limit() {
        let flood = CONTINUE.repeat(100);
        let allowed = CONTINUE.len() * MAX_INTERIM_RESPONSES as usize;
        for step in [1, 2, 7, 25, 26, 4096] {
            let (out, stopped) = through(&flood, step);
            assert!(stopped, "step {step}");
            // hyper gets the allowed heads whole, and of the next at most
            // what came in an earlier read (never its status).
            assert!(
                out.len() >= allowed && out.len() < allowed + 12,
                "step {step}: {}",
                out.len()
            );
            assert_eq!(&out[..allowed], &flood[..allowed]);
        }
        let mut s = Scan::default();
        assert_eq!(s.feed(&flood), Some(allowed));
        assert_eq!(s.flood().unwrap().to_string(), "9 interim (1xx) responses");
    }

    #[test]
    fn heads_in_any_line_ending_and_empty_lines_between_count() {
        let head = b"\r\nHTTP/1.1 103 Early Hints\nlink: </x>\n\n";
        let heads = head.repeat(20);
        let allowed = head.len() * MAX_INTERIM_RESPONSES as usize;
        for step in [1, 3, 4096] {
            let (out, stopped) = through(&heads, step);
            assert!(stopped);
            // The next head's empty lines and first bytes may have come in
            // an earlier read; never its whole status.
            assert!(
                out.len() >= allowed && out.len() < allowed + 2 + 12,
                "step {step}: {}",
                out.len()
            );
            assert_eq!(&out[..allowed], &heads[..allowed]);
        }
    }

    #[test]
    fn answers_pass_and_are_never_cut() {
        let body = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{}",
            "HTTP/1.1 100 Continue\r\n\r\n".repeat(20)
        );
        // Up to the limit of interim heads before it is fine too.
        let mut answer = CONTINUE.repeat(MAX_INTERIM_RESPONSES as usize);
        answer.extend_from_slice(body.as_bytes());
        for bytes in [body.as_bytes(), &answer] {
            assert_eq!(through(bytes, 5), (bytes.to_vec(), false));
        }
        // 101 is a final answer to hyper; garbage is hyper's to refuse.
        for bytes in [
            &b"HTTP/1.1 101 Switching\r\n\r\n".repeat(20)[..],
            &b"HTTP/1.1 1x0 \r\n\r\n".repeat(20),
        ] {
            assert_eq!(through(bytes, 5), (bytes.to_vec(), false));
        }
    }

    #[test]
    fn each_request_has_its_own_count() {
        let mut s = Scan::default();
        let some = CONTINUE.repeat(MAX_INTERIM_RESPONSES as usize);
        for _ in 0..3 {
            s.request_sent();
            assert_eq!(s.feed(&some), None);
            assert_eq!(s.feed(b"HTTP/1.1 204 No Content\r\n\r\n"), None);
        }
        s.request_sent();
        assert_eq!(s.feed(&CONTINUE.repeat(9)), Some(some.len()));
        // Stopped for good: the connection is dead.
        s.request_sent();
        assert_eq!(s.feed(b"HTTP/1.1 200 OK\r\n\r\n"), Some(0));
    }
}
