//! Slowloris and connection floods: sockets that do no work must never keep
//! a real request out, and the header timeout and the connection cap close
//! them.

use crate::support::*;
use lab_agent::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS, MAX_REFUSALS};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a real request may take while the agent is flooded: generous
/// for a loaded CI machine (~1 s seen with the whole suite running), well
/// short of the 10 s it waited, without eviction, for an idle socket's
/// header timeout.
const SERVED_WITHIN: Duration = Duration::from_secs(6);

/// Whether the agent has closed `s` (EOF, reset, or an error response
/// followed by EOF), waiting at most `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left.min(Duration::from_millis(500))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // e.g. a 408/431 before the close
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true, // reset
        }
    }
}

fn timed_info(agent: &Agent) -> Duration {
    let started = Instant::now();
    let r = agent.get("/v1/info");
    assert_eq!(r.status, 200, "{}", r.text());
    started.elapsed()
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn silent_and_half_sent_connections_at_the_cap_do_not_keep_a_request_out() {
    let agent = Agent::local("flood-idle");
    let opened = Instant::now();
    let mut socks = Vec::new();
    for i in 0..MAX_CONNECTIONS + 44 {
        let mut s = TcpStream::connect(agent.addr).unwrap();
        if i % 2 == 1 {
            // Slowloris: a head that is never finished.
            s.write_all(b"GET /v1/ready HTTP/1.1\r\nHost: x\r\nX-Slow: aaaa")
                .unwrap();
        }
        socks.push(s);
    }
    // Let the agent accept them all before the real client comes.
    eventually(10, "the agent to accept the flood", || {
        (fd_count(agent.child.id()) >= MAX_CONNECTIONS).then_some(())
    });
    for _ in 0..3 {
        let took = timed_info(&agent);
        assert!(
            took < SERVED_WITHIN,
            "a real request waited {took:?} behind idle sockets"
        );
    }
    // The oldest idle sockets made room and were closed at once.
    let evicted = socks
        .iter_mut()
        .take(3)
        .map(|s| closed_within(s, Duration::from_secs(2)))
        .filter(|&closed| closed)
        .count();
    assert_eq!(evicted, 3, "the three oldest idle sockets were evicted");
    // The rest are closed by the header timeout, not left open.
    let limit = HEADER_READ_TIMEOUT + Duration::from_secs(5);
    for (i, s) in socks.iter_mut().enumerate() {
        let left = limit.saturating_sub(opened.elapsed());
        assert!(
            closed_within(s, left),
            "socket {i} still open {:?} after it connected",
            opened.elapsed()
        );
    }
    assert!(fd_count(agent.child.id()) < 32, "sockets released");
    assert!(!agent.log().contains("panicked"), "{}", agent.log());
}

#[test]
fn a_trickling_head_is_cut_off_by_the_header_timeout() {
    let agent = Agent::local("flood-trickle");
    let started = Instant::now();
    let mut s = TcpStream::connect(agent.addr).unwrap();
    s.write_all(b"GET /v1/info HTTP/1.1\r\nHost: x\r\nX-Trickle: ")
        .unwrap();
    let mut sent = 0;
    let cut = loop {
        // One byte every 200 ms: always "making progress", never done.
        std::thread::sleep(Duration::from_millis(200));
        if s.write_all(b"a").is_err() {
            break started.elapsed();
        }
        sent += 1;
        let mut probe = s.try_clone().unwrap();
        probe.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 512];
        match probe.read(&mut buf) {
            Ok(0) => break started.elapsed(),
            Ok(_) => break started.elapsed(), // a 408 on its way to the close
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => break started.elapsed(),
        }
        assert!(
            started.elapsed() < HEADER_READ_TIMEOUT + Duration::from_secs(5),
            "a trickler kept its connection for {:?} ({sent} bytes)",
            started.elapsed()
        );
    };
    assert!(
        cut >= HEADER_READ_TIMEOUT - Duration::from_secs(1),
        "cut after {cut:?}: too early?"
    );
    assert_eq!(agent.get("/v1/info").status, 200);
}

/// Every connection busy (authenticated long polls): the next one is told
/// 429 at once instead of waiting in the backlog; when they finish, serving
/// resumes.
#[test]
fn when_every_connection_is_busy_a_newcomer_gets_429_at_once() {
    let agent = Agent::builder("flood-busy").start(); // booting: polls wait
    let mut polls = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        let mut s = TcpStream::connect(agent.addr).unwrap();
        s.write_all(
            format!(
                "GET /v1/ready?wait=4 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        polls.push(s);
    }
    // All accepted and their heads read (a probe any earlier would evict a
    // poll still idle).
    eventually(10, "the agent to accept the polls", || {
        (fd_count(agent.child.id()) >= MAX_CONNECTIONS).then_some(())
    });
    eventually(10, "the agent to read every poll's head", || {
        heads_read(agent.addr.port(), MAX_CONNECTIONS).then_some(())
    });
    let started = Instant::now();
    let r = agent
        .raw(b"GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("an answer, not a reset");
    assert!(started.elapsed() < Duration::from_secs(2));
    let msg = r.error(429, "busy");
    assert!(msg.contains("connection limit"), "{msg}");
    assert_eq!(r.header("retry-after"), Some("1"));
    // The long polls all end with their answer, and the agent serves again.
    for mut s in polls {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let r = read_response(&mut std::io::BufReader::new(&mut s)).expect("a long-poll answer");
        assert_eq!(r.status, 503);
    }
    assert!(timed_info(&agent) < SERVED_WITHIN);
}

/// Thousands of connects, most dropped at once, some left silent, some
/// sending garbage, from several threads; meanwhile real requests keep being
/// answered quickly and the agent's fds stay within the cap.
#[test]
fn a_connection_flood_neither_starves_requests_nor_exhausts_fds() {
    let agent = Agent::local("flood-storm");
    let addr = agent.addr;
    let pid = agent.child.id();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooders: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut held = std::collections::VecDeque::new();
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr) else {
                        continue;
                    };
                    n += 1;
                    match n % 4 {
                        0 => drop(s),
                        1 => {
                            let _ = s.write_all(b"\x16\x03\x01garbage\r\n\r\n");
                        }
                        _ => {
                            if t == 0 {
                                let _ = s
                                    .write_all(b"POST /v1/exec HTTP/1.1\r\nContent-Length: 99\r\n");
                            }
                            held.push_back(s);
                            if held.len() > 400 {
                                held.pop_front();
                            }
                        }
                    }
                }
                n
            })
        })
        .collect();
    let mut max_fds = 0;
    let mut worst = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        worst = worst.max(timed_info(&agent));
        max_fds = max_fds.max(fd_count(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let total: u64 = flooders.into_iter().map(|f| f.join().unwrap()).sum();
    assert!(total > 300, "the flood made only {total} connections");
    assert!(
        worst < SERVED_WITHIN,
        "a request took {worst:?} during the flood"
    );
    // The cap, the refusals being answered, and the agent's own ~10 fds.
    assert!(
        max_fds <= MAX_CONNECTIONS + MAX_REFUSALS + 16,
        "the agent held {max_fds} fds (cap {MAX_CONNECTIONS})"
    );
    eprintln!("flood: {total} connections, worst request {worst:?}, max fds {max_fds}");
    assert!(!agent.log().contains("panicked"), "{}", agent.log());
}
