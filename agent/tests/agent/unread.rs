//! Clients that do not read their answers. Each big answer the agent holds
//! counts against its output budget until it is sent or its connection is
//! dropped (by the write timeout); execs past the budget get 429, so the
//! agent's memory stays within the budget plus a fixed overhead. And a
//! connection whose answer is being written is busy: the eviction of idle
//! connections at the cap must not cut it.

use crate::support::*;
use serde_json::json;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const MIB: u64 = 1024 * 1024;

/// 16 MiB on stdout and 16 MiB on stderr, all kept.
fn big_exec_request() -> Vec<u8> {
    let body = json!({
        "command": "head -c 16777216 /dev/zero | tr '\\0' o; head -c 16777216 /dev/zero | tr '\\0' e >&2",
        "max_output_bytes": 16 * MIB,
        "timeout_secs": 120,
    })
    .to_string();
    format!(
        "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Sends the request and reads only the status line (so it knows whether
/// the exec was accepted) — the body is never read.
fn send_and_peek(addr: std::net::SocketAddr) -> (TcpStream, u16) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.write_all(&big_exec_request()).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    let status = std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap();
    (s, status)
}

/// The attack: N connections each ask for 16 MiB of stdout and
/// 16 MiB of stderr and never read (the released agent reached 538 MB at
/// N = 16). Now execs past the budget get 429 and the peak stays within
/// budget + 8 MiB; once the write timeout drops the silent clients, the
/// budget is free again.
#[test]
fn unread_answers_stay_within_the_output_budget() {
    let budget_mib = 80;
    let agent = Agent::builder("unread-flood")
        .no_cloud_init()
        .args([
            "--output-budget",
            &budget_mib.to_string(),
            "--max-execs",
            "16",
        ])
        .start();
    let pid = agent.child.id();
    let mut conns = Vec::new();
    let mut accepted = 0;
    let mut busy = 0;
    for _ in 0..16 {
        let (s, status) = send_and_peek(agent.addr);
        match status {
            200 => accepted += 1,
            429 => busy += 1,
            other => panic!("unexpected status {other}"),
        }
        conns.push(s);
    }
    let peak_mib = status_kib(pid, "VmHWM:") / 1024;
    eprintln!(
        "16 unread 32 MiB answers: {accepted} accepted, {busy} got 429, agent peak RSS {peak_mib} MiB (budget {budget_mib} MiB)"
    );
    // Each takes 32 MiB + a little: two fit in 80 MiB.
    assert_eq!(accepted, 2, "accepted {accepted}, busy {busy}");
    assert!(
        peak_mib <= budget_mib + 8,
        "peak RSS {peak_mib} MiB is over the budget {budget_mib} MiB + 8 MiB"
    );
    // The silent clients are dropped by the write timeout (10 s) and the
    // budget comes back: a new big exec fits again.
    let s = eventually(40, "the budget to be free again", || {
        let (s, status) = send_and_peek(agent.addr);
        (status == 200).then_some(s)
    });
    drop(s);
    drop(conns);
}

/// The other attack: ask for a 16 MiB answer, do not read it for a
/// while, open 260 silent connections (more than the cap of 256): the
/// released agent counted the connection being written as idle, evicted it
/// and the client got 3.9 MB of a 16 MB answer. Now it gets all of it.
#[test]
fn eviction_at_the_connection_cap_never_cuts_an_answer_being_written() {
    let agent = Agent::local("unread-evict");
    let body = json!({
        "command": "head -c 16777216 /dev/zero | tr '\\0' o",
        "max_output_bytes": 16 * MIB,
    })
    .to_string();
    let mut s = TcpStream::connect(agent.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The command has finished and its answer started once its first byte
    // is here: wait for that, without reading it yet.
    s.peek(&mut [0u8; 1]).expect("the answer starts");
    let silent: Vec<TcpStream> = (0..260)
        .map(|_| TcpStream::connect(agent.addr).unwrap())
        .collect();
    // 261 connections over a cap of 256: five are evicted, the longest idle
    // first. The fourth silent one goes whether or not the answer was
    // (wrongly) taken first, so once the agent has closed it, it has
    // accepted past the cap and evicted: the moment the answer could be cut.
    let fourth = &silent[3];
    fourth
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    match fourth.peek(&mut [0u8; 1]) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the fourth silent connection is still open: {other:?}"),
    }
    let resp = read_response(&mut BufReader::new(&mut s)).expect("the answer was cut");
    assert_eq!(resp.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&resp.body).expect("a whole JSON answer");
    assert_eq!(v["stdout"].as_str().unwrap().len(), 16 * MIB as usize);
    drop(silent);
}
