//! The agent's memory: resident set at rest, and its peak (VmHWM) while
//! eight commands at once each write 50 MB to stdout.

use crate::exec::{check_exec, exec_body};
use crate::http::Conn;
use std::io;
use std::net::SocketAddr;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, field: &str) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)
                .and_then(|rest| rest.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        })
        .ok_or_else(|| io::Error::other(format!("no {field} in /proc/{pid}/status")))
}

#[derive(Debug, Clone, Copy)]
pub struct Flood {
    pub execs: usize,
    pub bytes_each: u64,
    /// `None`: the request leaves `max_output_bytes` at its default.
    pub cap: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
pub struct FloodOutcome {
    pub wall: Duration,
    /// Bytes of stdout the agent kept, summed over the execs.
    pub kept: u64,
}

/// The command: 50 MB of 63-byte lines (plain ASCII, so JSON escaping adds
/// one byte per line for the `\n`).
pub fn flood_command(bytes: u64) -> String {
    format!("yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c {bytes}")
}

pub fn flood(addr: SocketAddr, token: &str, user: &str, f: Flood) -> io::Result<FloodOutcome> {
    let body = exec_body(&flood_command(f.bytes_each), user, f.cap);
    let barrier = Barrier::new(f.execs);
    let t = Instant::now();
    let kept = std::thread::scope(|s| {
        let handles: Vec<_> = (0..f.execs)
            .map(|_| {
                s.spawn(|| -> io::Result<u64> {
                    let mut conn = Conn::connect(addr, token)?;
                    barrier.wait();
                    let resp = conn.request("POST", "/v1/exec", Some(&body))?;
                    let r = check_exec(&resp)?;
                    if !r.stdout_truncated {
                        return Err(io::Error::other("the flood's stdout was not truncated"));
                    }
                    Ok(r.stdout.len() as u64)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("thread panicked")))
            })
            .sum::<io::Result<u64>>()
    })?;
    Ok(FloodOutcome {
        wall: t.elapsed(),
        kept,
    })
}
