//! Requests turned away before anyone was authenticated — 401s, and
//! connections refused at the connection cap — are counted and summarised
//! in at most one log line per [`SUMMARY_EVERY`], never one line each:
//! logging each (with a 15 KB path) let a client without a token write
//! 200 MB of log in 3 s, and journald would rotate the real exec lines away.
//! The first rejection after a quiet [`SUMMARY_EVERY`] is written at once
//! (a summary of one): an operator looking into a backend that gets 401s
//! sees it now, not a minute later; what follows within the minute goes
//! into the next summary.

use crate::http::listen::PeerHost;
use crate::logging::cut;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a summary is written when something was rejected.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);
/// Distinct client addresses named in a summary at most.
const PEERS_NAMED: usize = 8;

#[derive(Debug, Default)]
pub struct Rejections {
    inner: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    unauthorized: u64,
    refused: u64,
    peers: Vec<PeerHost>,
    /// Addresses beyond [`PEERS_NAMED`] (counted, not named).
    more_peers: bool,
    /// One example of a rejected request (method and path, escaped and
    /// cut), so a misconfigured backend can still be recognised.
    example: Option<String>,
    /// When the last summary line was written.
    last_line: Option<Instant>,
}

impl Rejections {
    pub fn unauthorized(&self, peer: PeerHost, method: &str, path: &str) {
        let mut c = self.lock();
        c.unauthorized += 1;
        c.note_peer(peer);
        if c.example.is_none() {
            c.example = Some(format!("{} {}", cut(method, 16), cut(path, 100)));
        }
        c.write_if_due();
    }

    pub fn refused_connection(&self, peer: PeerHost) {
        let mut c = self.lock();
        c.refused += 1;
        c.note_peer(peer);
        c.write_if_due();
    }

    /// Writes the summary once [`SUMMARY_EVERY`] has passed since the last
    /// line (the agent's housekeeping calls this every few seconds).
    pub fn flush_due(&self) {
        self.lock().write_if_due();
    }

    /// Writes the summary of what is counted now, due or not (at shutdown).
    pub fn flush(&self) {
        self.lock().write();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Counts {
    fn write_if_due(&mut self) {
        if self.last_line.is_none_or(|t| t.elapsed() >= SUMMARY_EVERY) {
            self.write();
        }
    }

    fn write(&mut self) {
        if self.unauthorized == 0 && self.refused == 0 {
            return;
        }
        let c = std::mem::replace(
            self,
            Counts {
                last_line: Some(Instant::now()),
                ..Counts::default()
            },
        );
        let mut peers: String = c
            .peers
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",");
        if c.more_peers {
            peers.push_str(",…");
        }
        tracing::warn!(
            unauthorized = c.unauthorized,
            refused_connections = c.refused,
            peers = %peers,
            example = %c.example.unwrap_or_default(),
            "rejected requests since the last summary (401: no or wrong token; refused: every connection busy)"
        );
    }

    fn note_peer(&mut self, ip: PeerHost) {
        if !self.peers.contains(&ip) {
            if self.peers.len() < PEERS_NAMED {
                self.peers.push(ip);
            } else {
                self.more_peers = true;
            }
        }
    }
}
