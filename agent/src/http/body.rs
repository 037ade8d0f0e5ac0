//! Response bodies: plain bytes, and JSON string contents escaped while they
//! are sent. An exec's captured output (up to 16 MiB per stream) is thus
//! never copied whole a second time into a serialized response: the
//! escaping happens one frame at a time as the socket takes it.
//!
//! The escaping is serde_json's, byte for byte (a test pins it), so a
//! streamed response is the same document `serde_json::to_vec` would give.

use hyper::body::{Bytes, Frame, SizeHint};
use std::cell::Cell;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Source bytes escaped per frame (a frame is at most 6× this, for text
/// of nothing but control characters). Small, because a client that does
/// not read holds up to one frame in the HTTP layer's buffer
/// ([`crate::http::budget::PER_ANSWER`]).
pub const FRAME: usize = 8 * 1024;

#[derive(Debug, Default)]
pub struct Body {
    parts: VecDeque<Part>,
    remaining: u64,
    /// Held until the body is dropped — sent to the end, or abandoned with
    /// its connection: the output budget's reservation, the connection's
    /// busy mark.
    guards: Vec<Guard>,
    /// Frames sent after `parts`, as they come (a streamed exec,
    /// `exec_stream`): the body ends when the sender is dropped.
    stream: Option<tokio::sync::mpsc::Receiver<Bytes>>,
}

/// Anything whose drop marks the end of sending this body.
pub struct Guard(#[allow(dead_code)] Box<dyn Send + Sync>);

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

#[derive(Debug)]
enum Part {
    Bytes(Bytes),
    /// The contents of a JSON string (no quotes), escaped from `at` on.
    Escaped {
        text: String,
        at: usize,
    },
}

impl Body {
    /// An empty body with room for `parts` pieces: the queue a body sent
    /// before left behind (see `Drop`), or a new one.
    pub fn with_parts(parts: usize) -> Body {
        let queue = SPARE_PARTS
            .take()
            .filter(|q| q.capacity() >= parts)
            .unwrap_or_else(|| VecDeque::with_capacity(parts));
        Body {
            parts: queue,
            remaining: 0,
            guards: Vec::new(),
            stream: None,
        }
    }

    pub fn bytes(b: impl Into<Bytes>) -> Body {
        let mut body = Body::default();
        body.push_bytes(b);
        body
    }

    /// A body of the frames `rx` gives, of a length not known in advance
    /// (sent chunked, each frame as it comes).
    pub fn stream(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
        Body {
            parts: VecDeque::new(),
            remaining: 0,
            guards: Vec::new(),
            stream: Some(rx),
        }
    }

    /// Keeps `guard` alive until the body is dropped.
    pub fn hold(&mut self, guard: impl Send + Sync + 'static) {
        self.guards.push(Guard(Box::new(guard)));
    }

    pub fn push_bytes(&mut self, b: impl Into<Bytes>) {
        let b = b.into();
        if !b.is_empty() {
            self.remaining += b.len() as u64;
            self.parts.push_back(Part::Bytes(b));
        }
    }

    /// Appends `text` as the contents of a JSON string: the caller writes
    /// the quotes around it.
    pub fn push_json_str(&mut self, text: String) {
        let len = escaped_len(text.as_bytes());
        if len > 0 {
            self.remaining += len;
            self.parts.push_back(Part::Escaped { text, at: 0 });
        }
    }

    /// The whole body at once (for tests and small bodies).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.remaining as usize);
        for p in &self.parts {
            match p {
                Part::Bytes(b) => out.extend_from_slice(b),
                Part::Escaped { text, at } => escape_into(&text.as_bytes()[*at..], &mut out),
            }
        }
        out
    }

    fn next_frame(&mut self) -> Option<Bytes> {
        let part = self.parts.front_mut()?;
        let frame = match part {
            Part::Bytes(b) => {
                let b = std::mem::take(b);
                self.parts.pop_front();
                b
            }
            Part::Escaped { text, at } => {
                let src = &text.as_bytes()[*at..];
                let n = src.len().min(FRAME);
                let mut out = Vec::with_capacity(n + n / 8 + 16);
                escape_into(&src[..n], &mut out);
                *at += n;
                if *at == text.len() {
                    self.parts.pop_front();
                }
                Bytes::from(out)
            }
        };
        self.remaining -= frame.len() as u64;
        Some(frame)
    }
}

thread_local! {
    static SPARE_PARTS: Cell<Option<VecDeque<Part>>> = const { Cell::new(None) };
}

/// A sent body's queue is kept (emptied) for the next [`Body::with_parts`]:
/// allocated before each answer and freed as it went out, it was a page
/// that musl's allocator mapped and unmapped on every exec.
impl Drop for Body {
    fn drop(&mut self) {
        if (1..=MAX_SPARE_PARTS).contains(&self.parts.capacity()) {
            let mut queue = std::mem::take(&mut self.parts);
            queue.clear();
            SPARE_PARTS.set(Some(queue));
        }
    }
}

/// The largest queue kept: what an exec's answer needs.
const MAX_SPARE_PARTS: usize = 16;

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let me = self.get_mut();
        if me.parts.is_empty()
            && let Some(rx) = &mut me.stream
        {
            return rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))));
        }
        Poll::Ready(me.next_frame().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty() && self.stream.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.stream {
            Some(_) => SizeHint::default(),
            None => SizeHint::with_exact(self.remaining),
        }
    }
}

/// serde_json's escape for a byte: 0 = as is, `u` = `\u00XX`, else `\X`.
fn escape_of(b: u8) -> u8 {
    match b {
        b'"' => b'"',
        b'\\' => b'\\',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        0x08 => b'b',
        0x0c => b'f',
        0x00..=0x1f => b'u',
        _ => 0,
    }
}

fn escaped_len(src: &[u8]) -> u64 {
    src.iter()
        .map(|&b| match escape_of(b) {
            0 => 1,
            b'u' => 6,
            _ => 2,
        })
        .sum()
}

pub(crate) fn escape_into(src: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &b) in src.iter().enumerate() {
        let e = escape_of(b);
        if e == 0 {
            continue;
        }
        out.extend_from_slice(&src[start..i]);
        if e == b'u' {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xf) as usize],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', e]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&src[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sent body's queue serves the next body that needs as much,
    /// emptied; a larger need gets a queue of its own.
    #[test]
    fn a_dropped_body_leaves_its_queue_to_the_next() {
        let mut a = Body::with_parts(16);
        a.push_bytes("x");
        let at = a.parts.as_slices().0.as_ptr();
        drop(a);
        let b = Body::with_parts(8);
        assert!(b.parts.is_empty());
        assert_eq!(
            (b.parts.as_slices().0.as_ptr(), b.parts.capacity()),
            (at, 16)
        );
        drop(b);
        let c = Body::with_parts(17);
        assert!(c.parts.capacity() >= 17);
    }

    fn streamed(mut body: Body) -> Vec<u8> {
        let whole = body.to_vec();
        let hint = body.remaining;
        let mut out = Vec::new();
        while let Some(f) = body.next_frame() {
            out.extend_from_slice(&f);
        }
        assert_eq!(out, whole);
        assert_eq!(hint, out.len() as u64);
        assert_eq!(body.remaining, 0);
        out
    }

    #[test]
    fn escaping_is_serde_jsons() {
        let mut all = String::new();
        for c in (0u32..0x300).chain([0x2028, 0x2029, 0xfffd, 0x1f600]) {
            all.push(char::from_u32(c).unwrap());
        }
        let long = "line \"quoted\" \\ tab\t\n".repeat(5000); // several frames
        let controls = "\u{0}\u{1f}".repeat(FRAME); // frames at 6×
        for text in [
            "",
            "plain",
            "é€😀",
            all.as_str(),
            long.as_str(),
            controls.as_str(),
        ] {
            let mut body = Body::default();
            body.push_bytes(&b"["[..]);
            body.push_bytes(&b"\""[..]);
            body.push_json_str(text.to_owned());
            body.push_bytes(&b"\"]"[..]);
            let got = streamed(body);
            assert_eq!(
                got,
                serde_json::to_vec(&[text]).unwrap(),
                "{:?}",
                &text[..text.len().min(40)]
            );
        }
    }
}
