//! Requests turned away before anyone was authenticated — 401s, and
//! connections refused at the connection cap — are counted and summarised
//! in one log line per [`SUMMARY_EVERY`], never one line each: logging
//! each (with a 15 KB path) let a client without a token write 200 MB of
//! log in 3 s, and journald would rotate the real exec lines away.

use crate::logging::cut;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

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
    peers: Vec<IpAddr>,
    /// Addresses beyond [`PEERS_NAMED`] (counted, not named).
    more_peers: bool,
    /// One example of a rejected request (method and path, escaped and
    /// cut), so a misconfigured backend can still be recognised.
    example: Option<String>,
}

impl Rejections {
    pub fn unauthorized(&self, peer: SocketAddr, method: &str, path: &str) {
        let mut c = self.lock();
        c.unauthorized += 1;
        c.note_peer(peer.ip());
        if c.example.is_none() {
            c.example = Some(format!("{} {}", cut(method, 16), cut(path, 100)));
        }
    }

    pub fn refused_connection(&self, peer: SocketAddr) {
        let mut c = self.lock();
        c.refused += 1;
        c.note_peer(peer.ip());
    }

    /// Writes the summary line if anything was rejected since the last one.
    pub fn flush(&self) {
        let c = std::mem::take(&mut *self.lock());
        if c.unauthorized == 0 && c.refused == 0 {
            return;
        }
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Counts {
    fn note_peer(&mut self, ip: IpAddr) {
        if !self.peers.contains(&ip) {
            if self.peers.len() < PEERS_NAMED {
                self.peers.push(ip);
            } else {
                self.more_peers = true;
            }
        }
    }
}
