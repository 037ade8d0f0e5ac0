//! `/v1/ready` under load: Debian's `wrk` on CPU 1 against an agent pinned
//! to CPU 0.

use crate::children::prepare;
use crate::peers::run;
use std::io;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct WrkRun {
    pub requests_per_sec: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub non_2xx: u64,
}

pub fn run_wrk(
    addr: SocketAddr,
    token: &str,
    cpu: u32,
    connections: u32,
    seconds: u32,
) -> io::Result<WrkRun> {
    let mut cmd = Command::new("taskset");
    cmd.arg("-c")
        .arg(cpu.to_string())
        .args(["wrk", "-t1", "--latency"])
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("http://{addr}/v1/ready"));
    prepare(&mut cmd, None);
    let out = run(&mut cmd)?;
    parse(&String::from_utf8_lossy(&out.stdout))
}

fn parse(text: &str) -> io::Result<WrkRun> {
    let mut rps = None;
    let (mut p50, mut p99) = (None, None);
    let mut non_2xx = 0;
    for line in text.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("Requests/sec:") {
            rps = v.trim().parse::<f64>().ok();
        } else if let Some(v) = l.strip_prefix("50%") {
            p50 = latency(v.trim());
        } else if let Some(v) = l.strip_prefix("99%") {
            p99 = latency(v.trim());
        } else if let Some(v) = l.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = v.trim().parse().unwrap_or(u64::MAX);
        }
    }
    match (rps, p50, p99) {
        (Some(requests_per_sec), Some(p50), Some(p99)) => Ok(WrkRun {
            requests_per_sec,
            p50,
            p99,
            non_2xx,
        }),
        _ => Err(io::Error::other(format!(
            "cannot read wrk's output:\n{text}"
        ))),
    }
}

/// wrk's `123.45us`, `1.20ms`, `2.00s`.
fn latency(v: &str) -> Option<Duration> {
    let split = v.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wrk_output() {
        let text = "Running 5s test @ http://127.0.0.1:1/v1/ready\n  1 threads and 32 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   600.00us  100.00us   5.00ms   90.00%\n  Latency Distribution\n     50%  580.12us\n     75%  600.00us\n     90%  700.00us\n     99%    1.20ms\n  250000 requests in 5.00s, 60.00MB read\nRequests/sec:  50000.12\nTransfer/sec:     12.00MB\n";
        let r = parse(text).unwrap();
        assert_eq!(r.requests_per_sec, 50000.12);
        assert_eq!(r.p50, Duration::from_nanos(580_120));
        assert_eq!(r.p99, Duration::from_micros(1200));
        assert_eq!(r.non_2xx, 0);
    }
}
