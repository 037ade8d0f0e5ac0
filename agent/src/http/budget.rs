//! The output budget: a ceiling on the bytes of command output the agent
//! holds at once — captured by running commands, and kept in answers that
//! a client has not read yet — plus request bodies being read for an exec.
//!
//! Without it a client could ask for 16 MiB of stdout and stderr on many
//! connections and never read the answers: the agent held every one of
//! them (538 MB with 16 connections). Each exec now reserves its worst case
//! (twice its `max_output_bytes`, and [`PER_ANSWER`] for what the HTTP layer
//! buffers) before it starts, shrinks that to what it kept when it ends,
//! and gives it back when its answer has been sent or dropped; an exec that
//! does not fit gets 429. So the agent's memory stays within the budget plus
//! a fixed overhead, whatever clients do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Charged per answer for what the HTTP layer holds while sending it: its
/// write buffer (`server::WRITE_BUFFER`) and one escaped frame
/// (`body::FRAME` × 6 at worst).
pub const PER_ANSWER: u64 = 128 * 1024;

#[derive(Debug, Clone)]
pub struct Budget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: u64,
    used: AtomicU64,
}

/// Bytes taken from the budget until dropped.
#[derive(Debug)]
pub struct Reservation {
    inner: Arc<Inner>,
    bytes: u64,
}

impl Budget {
    pub fn new(limit: u64) -> Budget {
        Budget {
            inner: Arc::new(Inner {
                limit,
                used: AtomicU64::new(0),
            }),
        }
    }

    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes`, or `None` when they do not fit.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        self.inner
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.inner.limit)
            })
            .ok()?;
        Some(Reservation {
            inner: self.inner.clone(),
            bytes,
        })
    }
}

impl Reservation {
    /// Gives back what is above `bytes` (never grows).
    pub fn shrink_to(&mut self, bytes: u64) {
        if bytes < self.bytes {
            self.inner
                .used
                .fetch_sub(self.bytes - bytes, Ordering::AcqRel);
            self.bytes = bytes;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.inner.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserves_within_the_limit_and_gives_back() {
        let b = Budget::new(100);
        let mut a = b.try_reserve(60).unwrap();
        assert!(b.try_reserve(41).is_none());
        a.shrink_to(10);
        let c = b.try_reserve(90).unwrap();
        assert_eq!(b.used(), 100);
        drop((a, c));
        assert_eq!(b.used(), 0);
    }
}
