//! Reading a command's output without ever holding more than the caller's
//! cap: bytes past it are read (so the command never blocks on a full pipe)
//! and dropped.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::Poll;
use tokio::io::{AsyncRead, ReadBuf};

const CHUNK: usize = 16 * 1024;

thread_local! {
    /// The one read buffer of this thread's pumps. A read and handing its
    /// bytes to the sink happen within one poll, so pumps never hold it
    /// across an await and can share it: 8 commands flooding stdout and
    /// stderr hold one 16 KiB buffer, not sixteen, and an exec allocates
    /// none.
    static CHUNK_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; CHUNK].into_boxed_slice());
}

/// Where pumped bytes go.
pub trait Sink {
    fn put(&mut self, data: &[u8]);
}

/// Keeps the first `cap` bytes and notes whether more came.
#[derive(Debug)]
pub struct Capped {
    buf: Vec<u8>,
    cap: usize,
    truncated: bool,
}

impl Capped {
    pub fn new(cap: usize) -> Self {
        Capped {
            buf: Vec::new(),
            cap,
            truncated: false,
        }
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Bytes of memory held.
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// The kept bytes as text; invalid UTF-8 becomes U+FFFD, and a multi-byte
    /// character cut by the cap is dropped rather than mangled.
    pub fn into_string(self) -> String {
        match String::from_utf8(self.buf) {
            Ok(s) => s,
            Err(e) => {
                let mut bytes = e.into_bytes();
                if self.truncated {
                    trim_cut_char(&mut bytes);
                }
                String::from_utf8_lossy(&bytes).into_owned()
            }
        }
    }
}

/// Drops an incomplete UTF-8 sequence at the very end of `bytes`.
fn trim_cut_char(bytes: &mut Vec<u8>) {
    let tail = bytes.len().saturating_sub(3);
    for i in (tail..bytes.len()).rev() {
        let b = bytes[i];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte: keep looking for the lead byte
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        if bytes.len() - i < need {
            bytes.truncate(i);
        }
        return;
    }
}

impl Sink for Capped {
    fn put(&mut self, data: &[u8]) {
        let room = self.cap - self.buf.len();
        if data.len() > room {
            self.truncated = true;
        }
        let take = data.len().min(room);
        if take > 0 {
            // Grow by doubling, but never past the cap: the output budget
            // counts on a stream holding at most `cap` bytes (Vec's own
            // doubling could reach twice that).
            let len = self.buf.len();
            if self.buf.capacity() - len < take {
                let want = (len + take)
                    .max(self.buf.capacity() * 2)
                    .max(4096)
                    .min(self.cap);
                self.buf.reserve_exact(want - len);
            }
            self.buf.extend_from_slice(&data[..take]);
        }
    }
}

/// Copies `reader` into `sink` until EOF. Cancel-safe in the sense that
/// matters here: every chunk read is already in the sink when the future is
/// dropped.
pub async fn pump<R: AsyncRead + Unpin, S: Sink>(mut reader: R, sink: &mut S) -> io::Result<()> {
    std::future::poll_fn(|cx| {
        CHUNK_BUF.with_borrow_mut(|chunk| {
            // Reads until the pipe is empty or tokio's cooperative budget
            // says to yield (both Pending).
            loop {
                let mut buf = ReadBuf::new(chunk);
                match Pin::new(&mut reader).poll_read(cx, &mut buf) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                    Poll::Ready(Ok(())) => sink.put(buf.filled()),
                }
            }
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_the_cap() {
        let mut c = Capped::new(5);
        c.put(b"abc");
        assert!(!c.truncated());
        c.put(b"defg");
        assert!(c.truncated());
        c.put(b"hij");
        assert_eq!(c.into_string(), "abcde");
    }

    #[test]
    fn never_holds_more_than_the_cap() {
        let mut c = Capped::new(100_000);
        for _ in 0..100 {
            c.put(&[b'x'; 3000]);
            assert!(c.held() <= 100_000, "{}", c.held());
        }
        assert!(c.truncated());
    }

    #[test]
    fn zero_cap_keeps_nothing() {
        let mut c = Capped::new(0);
        c.put(b"x");
        assert!(c.truncated());
        assert_eq!(c.into_string(), "");
    }

    #[test]
    fn a_character_cut_by_the_cap_is_dropped() {
        let mut c = Capped::new(4);
        c.put("ab€".as_bytes()); // € is 3 bytes: only 2 fit
        assert_eq!(c.into_string(), "ab");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut c = Capped::new(100);
        c.put(b"a\xffb");
        assert_eq!(c.into_string(), "a\u{fffd}b");
    }

    #[tokio::test]
    async fn pump_reads_to_eof() {
        let data = vec![7u8; 100_000];
        let mut c = Capped::new(10);
        pump(&data[..], &mut c).await.unwrap();
        assert!(c.truncated());
        assert_eq!(c.into_string().len(), 10);
    }
}
