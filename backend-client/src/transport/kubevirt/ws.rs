//! The WebSocket KubeVirt relays as the byte stream hyper reads and
//! writes (RFC 6455, the client's side).
//!
//! Read: the payloads of binary messages, in order, whatever their
//! fragmentation (virt-handler writes each read of the guest's socket as
//! one message: frames of its 10 KiB buffer, or one large frame and an
//! empty final one); text messages are skipped, as KubeVirt's own reader
//! does; a ping is answered with a pong; a close frame, or the relay
//! closing between frames (virt-handler closes without a close frame once
//! the guest's side ends) is the end of the stream; a relay that closes
//! inside a frame is an error. Nothing is buffered beyond one frame's
//! header (and a control frame's 125 bytes): payload is read straight
//! into hyper's buffer, so hyper's own limits bound an answer.
//!
//! Write: each write is one binary frame, masked with a fresh random key
//! (a server must refuse an unmasked client frame), at most
//! [`MAX_FRAME`] bytes of payload.

use ring::rand::{SecureRandom, SystemRandom};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most payload one written frame carries.
const MAX_FRAME: usize = 64 * 1024;

const FIN: u8 = 0x80;
const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

/// Where the reader is in the incoming frames.
#[derive(Debug)]
enum Reading {
    /// Gathering a frame header: bytes so far (at most 10: no mask).
    Header { buf: [u8; 10], have: usize },
    /// In a data frame's payload: bytes left, and whether they are passed
    /// on (a binary message) or skipped (a text one).
    Data { left: u64, pass: bool },
    /// In a control frame's payload (at most 125 bytes).
    Control { op: u8, want: usize, got: Vec<u8> },
    /// A close frame came, or the relay closed between frames.
    Ended,
}

/// A connection to the agent through KubeVirt's relay, over `S` (the
/// API server's TLS stream).
#[derive(Debug)]
pub(crate) struct Relay<S> {
    io: S,
    rng: SystemRandom,
    reading: Reading,
    /// Whether the message being read is a text one (its continuation
    /// frames are skipped too).
    in_text: bool,
    /// Frame bytes accepted from the caller (or a pong) not yet written.
    out: Vec<u8>,
    sent: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Relay<S> {
    pub(super) fn new(io: S, rng: SystemRandom) -> Relay<S> {
        Relay {
            io,
            rng,
            reading: Reading::Header {
                buf: [0; 10],
                have: 0,
            },
            in_text: false,
            out: Vec::new(),
            sent: 0,
        }
    }

    /// Appends a masked frame of `op` carrying `payload` to the output.
    fn frame(&mut self, op: u8, payload: &[u8]) -> io::Result<()> {
        let mut mask = [0u8; 4];
        self.rng
            .fill(&mut mask)
            .map_err(|_| io::Error::other("no randomness for a WebSocket mask"))?;
        self.out.push(FIN | op);
        match payload.len() {
            n @ 0..=125 => self.out.push(0x80 | n as u8),
            n @ 126..=0xffff => {
                self.out.push(0x80 | 126);
                self.out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                self.out.push(0x80 | 127);
                self.out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        self.out.extend_from_slice(&mask);
        self.out
            .extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
        Ok(())
    }

    /// Writes what is pending; `Ready(Ok)` once all of it is out.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Reads into `dst` from the relay; `Ok(0)` at its end.
    fn poll_raw(&mut self, cx: &mut Context<'_>, dst: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut rb = ReadBuf::new(dst);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        Poll::Ready(Ok(rb.filled().len()))
    }

    /// A header complete in `buf[..have]`: its frame, or `None` for more bytes.
    fn parse_header(&mut self, buf: &[u8]) -> io::Result<Option<Reading>> {
        if buf.len() < 2 {
            return Ok(None);
        }
        let (b0, b1) = (buf[0], buf[1]);
        let op = b0 & 0x0f;
        if b0 & 0x70 != 0 {
            return Err(protocol("a frame with reserved bits set"));
        }
        if b1 & 0x80 != 0 {
            return Err(protocol("a masked frame from the server"));
        }
        let (len, need) = match b1 & 0x7f {
            126 => (
                buf.get(2..4)
                    .map(|b| u64::from(u16::from_be_bytes([b[0], b[1]]))),
                4,
            ),
            127 => (
                buf.get(2..10)
                    .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes"))),
                10,
            ),
            n => (Some(u64::from(n)), 2),
        };
        let Some(len) = len.filter(|_| buf.len() >= need) else {
            return Ok(None);
        };
        let fin = b0 & FIN != 0;
        Ok(Some(match op {
            OP_BINARY | OP_TEXT => {
                self.in_text = op == OP_TEXT;
                Reading::Data {
                    left: len,
                    pass: op == OP_BINARY,
                }
            }
            OP_CONTINUATION => Reading::Data {
                left: len,
                pass: !self.in_text,
            },
            OP_CLOSE | OP_PING | OP_PONG if fin && len <= 125 => Reading::Control {
                op,
                want: len as usize,
                got: Vec::with_capacity(len as usize),
            },
            OP_CLOSE | OP_PING | OP_PONG => {
                return Err(protocol("a fragmented or oversized control frame"));
            }
            other => return Err(protocol(&format!("a frame of unknown opcode {other}"))),
        }))
    }
}

/// How many header bytes to ask for next: just enough, so no byte of
/// the payload is read into the header.
fn header_want(buf: &[u8], have: usize) -> usize {
    if have < 2 {
        return 2 - have;
    }
    match buf[1] & 0x7f {
        126 => 4 - have,
        127 => 10 - have,
        _ => 0,
    }
}

fn protocol(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("KubeVirt's relay sent {what} (not a WebSocket as it speaks it)"),
    )
}

fn cut_mid_frame() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "KubeVirt's relay closed the connection inside a WebSocket frame",
    )
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Relay<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            // A pong owed goes out as soon as the relay takes it.
            if !this.out.is_empty() {
                if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            match &mut this.reading {
                Reading::Ended => return Poll::Ready(Ok(())),
                Reading::Header { buf: hdr, have } => {
                    let (mut h, mut n) = (*hdr, *have);
                    let want = header_want(&h, n);
                    if want == 0 {
                        let next = this.parse_header(&h[..n])?;
                        this.reading = next.expect("a whole header parses");
                        continue;
                    }
                    let got = ready!(this.poll_raw(cx, &mut h[n..n + want]))?;
                    if got == 0 {
                        if n == 0 {
                            this.reading = Reading::Ended;
                            continue;
                        }
                        return Poll::Ready(Err(cut_mid_frame()));
                    }
                    n += got;
                    this.reading = Reading::Header { buf: h, have: n };
                }
                Reading::Data { left: 0, .. } => {
                    this.reading = Reading::Header {
                        buf: [0; 10],
                        have: 0,
                    };
                }
                Reading::Data { left, pass: true } => {
                    if buf.remaining() == 0 {
                        return Poll::Ready(Ok(()));
                    }
                    let room = buf
                        .remaining()
                        .min(usize::try_from(*left).unwrap_or(usize::MAX));
                    let dst = &mut buf.initialize_unfilled()[..room];
                    let mut rb = ReadBuf::new(dst);
                    ready!(Pin::new(&mut this.io).poll_read(cx, &mut rb))?;
                    let got = rb.filled().len();
                    if got == 0 {
                        return Poll::Ready(Err(cut_mid_frame()));
                    }
                    *left -= got as u64;
                    buf.advance(got);
                    return Poll::Ready(Ok(()));
                }
                Reading::Data { left, pass: false } => {
                    let mut sink = [0u8; 512];
                    let room = sink.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    let left = *left;
                    let got = ready!(this.poll_raw(cx, &mut sink[..room]))?;
                    if got == 0 {
                        return Poll::Ready(Err(cut_mid_frame()));
                    }
                    this.reading = Reading::Data {
                        left: left - got as u64,
                        pass: false,
                    };
                }
                Reading::Control { op, want, got } => {
                    let (op, want, mut got) = (*op, *want, std::mem::take(got));
                    if got.len() < want {
                        let mut chunk = [0u8; 125];
                        let n = match this.poll_raw(cx, &mut chunk[..want - got.len()]) {
                            Poll::Pending => {
                                this.reading = Reading::Control { op, want, got };
                                return Poll::Pending;
                            }
                            Poll::Ready(r) => r?,
                        };
                        if n == 0 {
                            return Poll::Ready(Err(cut_mid_frame()));
                        }
                        got.extend_from_slice(&chunk[..n]);
                        this.reading = Reading::Control { op, want, got };
                        continue;
                    }
                    this.reading = match op {
                        OP_CLOSE => Reading::Ended,
                        _ => {
                            if op == OP_PING {
                                this.frame(OP_PONG, &got)?;
                            }
                            Reading::Header {
                                buf: [0; 10],
                                have: 0,
                            }
                        }
                    };
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Relay<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        let n = buf.len().min(MAX_FRAME);
        this.frame(OP_BINARY, &buf[..n])?;
        // Accepted: what the relay does not take now goes at the next
        // write or flush.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

    /// A server frame (unmasked).
    fn frame(fin: bool, op: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![if fin { FIN | op } else { op }];
        match payload.len() {
            n @ 0..=125 => f.push(n as u8),
            n @ 126..=0xffff => {
                f.push(126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(payload);
        f
    }

    fn relay() -> (Relay<DuplexStream>, DuplexStream) {
        let (a, b) = duplex(1 << 20);
        (Relay::new(a, SystemRandom::new()), b)
    }

    /// Reads one client frame: (fin, op, unmasked payload).
    async fn client_frame(s: &mut DuplexStream) -> (bool, u8, Vec<u8>) {
        let (b0, b1) = (s.read_u8().await.unwrap(), s.read_u8().await.unwrap());
        assert_ne!(b1 & 0x80, 0, "a client frame is masked");
        let len = match b1 & 0x7f {
            126 => u64::from(s.read_u16().await.unwrap()),
            127 => s.read_u64().await.unwrap(),
            n => u64::from(n),
        };
        let mut mask = [0u8; 4];
        s.read_exact(&mut mask).await.unwrap();
        let mut p = vec![0u8; len as usize];
        s.read_exact(&mut p).await.unwrap();
        for (i, b) in p.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        (b0 & FIN != 0, b0 & 0x0f, p)
    }

    #[tokio::test]
    async fn binary_messages_in_any_fragmentation_are_the_stream() {
        let (mut r, mut server) = relay();
        let big = vec![b'x'; 70_000];
        let mut wire = Vec::new();
        // virt-handler's shapes: buffered frames of 10 KiB, one large
        // frame with an empty final one, and a plain small message.
        wire.extend(frame(false, OP_BINARY, &[b'a'; 10240]));
        wire.extend(frame(true, OP_CONTINUATION, b"bc"));
        wire.extend(frame(false, OP_BINARY, &big));
        wire.extend(frame(true, OP_CONTINUATION, b""));
        wire.extend(frame(
            true,
            OP_TEXT,
            b"skipped, as KubeVirt's reader skips it",
        ));
        wire.extend(frame(true, OP_PONG, b"unasked"));
        wire.extend(frame(true, OP_BINARY, b"end"));
        server.write_all(&wire).await.unwrap();
        drop(server); // the relay closes between frames: the end
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        let mut want = vec![b'a'; 10240];
        want.extend_from_slice(b"bc");
        want.extend_from_slice(&big);
        want.extend_from_slice(b"end");
        assert_eq!(got.len(), want.len());
        assert!(got == want);
    }

    #[tokio::test]
    async fn a_close_frame_ends_the_stream_and_a_cut_frame_is_an_error() {
        let (mut r, mut server) = relay();
        server
            .write_all(&frame(true, OP_BINARY, b"hi"))
            .await
            .unwrap();
        server
            .write_all(&frame(true, OP_CLOSE, &1000u16.to_be_bytes()))
            .await
            .unwrap();
        server
            .write_all(&frame(true, OP_BINARY, b"after"))
            .await
            .unwrap();
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hi");

        let (mut r, mut server) = relay();
        let mut cut = frame(true, OP_BINARY, b"an answer cut short");
        cut.truncate(8);
        server.write_all(&cut).await.unwrap();
        drop(server);
        let e = r.read_to_end(&mut Vec::new()).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        assert!(e.to_string().contains("inside a WebSocket frame"), "{e}");

        let (mut r, mut server) = relay();
        server.write_all(&[FIN | OP_BINARY]).await.unwrap();
        drop(server);
        let e = r.read_to_end(&mut Vec::new()).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "a cut header: {e}");
    }

    #[tokio::test]
    async fn what_no_websocket_server_sends_is_refused() {
        for (wire, want) in [
            (vec![FIN | OP_BINARY | 0x40, 0], "reserved bits"),
            (
                vec![FIN | OP_BINARY, 0x80 | 1, 0, 0, 0, 0, b'x'],
                "masked frame",
            ),
            (vec![OP_PING, 0], "fragmented"),
            (frame(true, 0x3, b""), "unknown opcode 3"),
        ] {
            let (mut r, mut server) = relay();
            server.write_all(&wire).await.unwrap();
            let e = r.read_to_end(&mut Vec::new()).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
    }

    #[tokio::test]
    async fn writes_are_masked_binary_frames_and_pings_get_pongs() {
        let (mut r, mut server) = relay();
        r.write_all(b"GET /v1/ready HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        r.flush().await.unwrap();
        assert_eq!(
            client_frame(&mut server).await,
            (true, OP_BINARY, b"GET /v1/ready HTTP/1.1\r\n\r\n".to_vec())
        );
        let body = vec![7u8; 100_000];
        r.write_all(&body).await.unwrap();
        r.flush().await.unwrap();
        let (_, op, first) = client_frame(&mut server).await;
        assert_eq!((op, first.len()), (OP_BINARY, MAX_FRAME));
        let (_, _, second) = client_frame(&mut server).await;
        assert_eq!(first.len() + second.len(), body.len());

        server
            .write_all(&frame(true, OP_PING, b"keep alive"))
            .await
            .unwrap();
        server
            .write_all(&frame(true, OP_BINARY, b"x"))
            .await
            .unwrap();
        let mut one = [0u8; 1];
        r.read_exact(&mut one).await.unwrap();
        assert_eq!(
            client_frame(&mut server).await,
            (true, OP_PONG, b"keep alive".to_vec())
        );
    }
}
