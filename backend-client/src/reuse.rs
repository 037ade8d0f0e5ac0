//! [`Track`]: what one connection has carried, so a call whose connection
//! died can tell "the agent went away between two calls" from "the agent
//! never answered".
//!
//! A backend keeps connections to an agent alive between calls. When the
//! agent restarts (a reboot, a crash, `systemctl restart`, a VM reset), a
//! kept-alive connection dies under the next request. hyper-util's pool
//! retries the request itself only when hyper never took it off the queue
//! (it saw the close first); once the request is being written the pool
//! hands back hyper's error (`IncompleteMessage`, a reset), and only the
//! client knows whether sending it again is harmless. To say so it needs
//! three facts about the connection, which hyper does not expose and
//! [`crate::interim::Guarded`] (every connection's bytes pass through it)
//! records here:
//!
//! - whether it carried an earlier request (was *reused*): a fresh
//!   connection that dies is the agent not answering at all (qemu's port
//!   forward accepting before the guest listens), an ordinary transport
//!   error;
//! - whether a byte of the answer arrived: after one, the answer broke, and
//!   nothing is sent again;
//! - whether the request was written whole: an exec written whole may have
//!   started in the guest; one cut short cannot have (the agent parses the
//!   whole body before it starts anything).
//!
//! The [`Track`] rides on the connection's `Connected` as an extra, which
//! hyper-util attaches to every error of a request sent on it.

use hyper_util::client::legacy::connect::Connected;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The facts of one connection, shared between the connection (which
/// writes them) and the calls that read them after an error. Only the
/// connection's task writes, and an error reaches the call through
/// hyper's channel after the write, so `Relaxed` suffices.
#[derive(Debug, Default)]
struct Facts {
    /// Requests begun on the connection (the current one included).
    requests: AtomicU32,
    /// A byte of the current request's answer was read.
    answered: AtomicBool,
    /// Bytes of the current request written (head and body).
    written: AtomicU64,
    /// The length of the current request's head, once it was written whole
    /// (`0`: not yet).
    head_len: AtomicU64,
}

/// One connection's [`Facts`], and where the writer is in the current
/// request's head.
#[derive(Debug, Clone, Default)]
pub(crate) struct Track {
    facts: Arc<Facts>,
    /// How much of the `\r\n\r\n` ending the head the last bytes matched.
    /// Only the connection's own copy uses it.
    crlf: u8,
}

impl Track {
    /// `bytes` were written: the start of a new request when the previous
    /// one's answer had begun (hyper's HTTP/1.1 client writes a request only
    /// after the previous answer is read to its end; it never pipelines).
    pub(crate) fn wrote(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let f = &self.facts;
        if f.requests.load(Ordering::Relaxed) == 0 || f.answered.load(Ordering::Relaxed) {
            f.requests.fetch_add(1, Ordering::Relaxed);
            f.answered.store(false, Ordering::Relaxed);
            f.written.store(0, Ordering::Relaxed);
            f.head_len.store(0, Ordering::Relaxed);
            self.crlf = 0;
        }
        let before = f.written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if f.head_len.load(Ordering::Relaxed) != 0 {
            return;
        }
        // The client's own head: CRLF line endings, ended by an empty line.
        for (i, &b) in bytes.iter().enumerate() {
            self.crlf = match (self.crlf, b) {
                (0 | 2, b'\r') => self.crlf + 1,
                (1 | 3, b'\n') => self.crlf + 1,
                (_, b'\r') => 1,
                _ => 0,
            };
            if self.crlf == 4 {
                f.head_len.store(before + i as u64 + 1, Ordering::Relaxed);
                return;
            }
        }
    }

    /// `n` bytes of an answer were read.
    pub(crate) fn read(&self, n: usize) {
        if n > 0 {
            self.facts.answered.store(true, Ordering::Relaxed);
        }
    }

    /// The connection's facts for hyper-util to carry on its errors.
    pub(crate) fn attach(&self, connected: Connected) -> Connected {
        connected.extra(Shared(self.facts.clone()))
    }
}

/// The extra on a connection's `Connected`.
#[derive(Clone)]
struct Shared(Arc<Facts>);

/// How a request died, from its connection's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fate {
    /// The connection had carried an earlier request.
    pub(crate) reused: bool,
    /// A byte of the answer had arrived.
    pub(crate) answered: bool,
    /// The request (head and `body_len` bytes of body) was written whole.
    pub(crate) sent_whole: bool,
}

impl Fate {
    /// The agent went away between calls: a reused connection died before
    /// a byte of the answer.
    pub(crate) fn went_away(self) -> bool {
        self.reused && !self.answered
    }
}

/// The facts of the connection `e` happened on, when hyper-util says which
/// (it does for every request it sent) and it is one of ours.
pub(crate) fn fate(e: &hyper_util::client::legacy::Error, body_len: usize) -> Option<Fate> {
    let mut extras = hyper::http::Extensions::new();
    e.connect_info()?.get_extras(&mut extras);
    let f = &extras.get::<Shared>()?.0;
    let head = f.head_len.load(Ordering::Relaxed);
    Some(Fate {
        reused: f.requests.load(Ordering::Relaxed) > 1,
        answered: f.answered.load(Ordering::Relaxed),
        sent_whole: head != 0
            && f.written.load(Ordering::Relaxed) >= head.saturating_add(body_len as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(t: &Track, body_len: usize) -> (u32, bool, bool) {
        let f = &t.facts;
        let head = f.head_len.load(Ordering::Relaxed);
        (
            f.requests.load(Ordering::Relaxed),
            f.answered.load(Ordering::Relaxed),
            head != 0 && f.written.load(Ordering::Relaxed) >= head + body_len as u64,
        )
    }

    #[test]
    fn requests_are_counted_and_a_whole_one_is_told_from_a_cut_one() {
        let head = b"POST /v1/exec HTTP/1.1\r\nhost: vm\r\ncontent-length: 5\r\n\r\n";
        let mut t = Track::default();
        // Written in pieces, the head's end split across them.
        for piece in head.chunks(7) {
            t.wrote(piece);
        }
        assert_eq!(facts(&t, 5), (1, false, false), "the body is to come");
        t.wrote(b"{\"a\"");
        assert_eq!(facts(&t, 5), (1, false, false));
        t.wrote(b"}");
        assert_eq!(facts(&t, 5), (1, false, true));
        t.read(0);
        assert_eq!(facts(&t, 5), (1, false, true), "an empty read is no answer");
        t.read(10);
        assert_eq!(facts(&t, 5), (1, true, true));

        // The next request on the same connection starts afresh.
        t.wrote(b"GET /v1/ready HTTP/1.1\r\nhost: vm\r\n");
        assert_eq!(facts(&t, 0), (2, false, false), "the head is not whole");
        t.wrote(b"\r\n");
        assert_eq!(facts(&t, 0), (2, false, true));
    }

    #[test]
    fn a_lone_lf_or_cr_does_not_end_the_head() {
        let mut t = Track::default();
        t.wrote(b"GET / HTTP/1.1\r\nx: a\n\r\r\n\r\r\n");
        assert_eq!(facts(&t, 0), (1, false, false));
        t.wrote(b"\r\n");
        assert_eq!(facts(&t, 0), (1, false, true));
    }
}
