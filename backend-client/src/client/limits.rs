//! How much of an answer is read, how long a call waits, how many
//! connections are kept: every bound a call has, in one place.

use super::*;

/// Default time to establish a TCP connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time for a response, on top of whatever the request itself asks
/// the agent to wait (a long-poll's `wait`, an exec's `timeout_secs`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default length of one `/v1/ready?wait=` long-poll inside `wait_ready`.
/// Terminal states come back at once whatever this is; it only bounds how
/// stale a progress report can be.
pub const DEFAULT_LONG_POLL: Duration = Duration::from_secs(5);
/// How many 429 `busy` answers `exec` sits out before giving up (within
/// its deadline, whichever ends first).
pub(crate) const MAX_BUSY_RETRIES: u32 = 20;
// The interim (1xx) cap is the connection's, where it is enforced.
pub use crate::interim::MAX_INTERIM_RESPONSES;
/// The largest body read for [`Client::request_unchecked`]: any status,
/// any path. The checked calls hold each answer to its own, smaller limit.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// The largest `/v1/ready` answer (200 or 503). The agent reads at most
/// 1 MiB of cloud-init's `result.json`, of which `errors` is a part, and
/// 4 KiB of the setup log; JSON escapes a control byte into 6 bytes.
pub const READY_RESPONSE_LIMIT: usize = 6 * 1024 * 1024 + 64 * 1024;
/// The largest `/v1/info` answer: a few short strings.
pub const INFO_RESPONSE_LIMIT: usize = 64 * 1024;
/// The largest error answer (a status the call does not accept): an
/// `{"error":{…}}` body is a sentence.
pub const ERROR_RESPONSE_LIMIT: usize = 64 * 1024;

/// The largest exec response for a request: both streams at their cap,
/// every byte escaped as `\u00XX` (6 bytes), and room for the rest.
pub fn exec_response_limit(max_output_bytes: u64) -> usize {
    let cap = max_output_bytes.min(lab_agent_proto::exec::MAX_OUTPUT_BYTES_CAP) as usize;
    2 * 6 * cap + 64 * 1024
}

/// The longest stream (stdout or stderr, decoded) an exec may return: the
/// agent keeps at most `max_output_bytes` of each and decodes it as lossy
/// UTF-8, where one invalid byte becomes U+FFFD (3 bytes).
pub fn exec_stream_limit(max_output_bytes: u64) -> u64 {
    3 * max_output_bytes.min(lab_agent_proto::exec::MAX_OUTPUT_BYTES_CAP)
}

/// Body limits of one call: for the status(es) it accepts, and for others.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) ok: usize,
    pub(crate) other: usize,
}

impl Limits {
    pub(super) const fn all(limit: usize) -> Limits {
        Limits {
            ok: limit,
            other: limit,
        }
    }

    pub(super) fn for_status(self, status: StatusCode, ok: &[StatusCode]) -> usize {
        if ok.contains(&status) {
            self.ok
        } else {
            self.other
        }
    }
}
/// Idle connections kept per client.
pub(super) const MAX_IDLE: usize = 8;
/// How long a kept-alive connection may sit idle in the pool. The agent
/// closes a connection that sends no request head for 10 s
/// (`HEADER_READ_TIMEOUT` in `agent/src/http/server.rs`); reusing one near that
/// age races its close, and a POST lost in that race cannot be retried.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
