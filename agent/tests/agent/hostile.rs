//! Hostile network input against the real binary: the generated corpus of
//! `corpus.rs`, each input on its own connection. Every input gets 4xx or a
//! closed connection (a random mutation that happens to be valid may get
//! 2xx), never a 5xx and never a panic; the agent keeps answering and its
//! memory stays bounded.

use crate::corpus::{self, Expect, Input, Rng};
use crate::support::*;
use std::io::{Cursor, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Random mutations of whole requests, and of JSON bodies alone.
const HTTP_MUTATIONS: usize = 8000;
const JSON_MUTATIONS: usize = 4000;
/// Peak resident memory the agent may reach while taking the corpus (debug
/// build; measured ~12 MiB). Four clients at a time, each with at most a
/// 1 MiB body in flight.
const MAX_HWM_KIB: u64 = 48 * 1024;

/// What came back on one connection.
#[derive(Debug)]
struct Outcome {
    /// Final (non-1xx) statuses, in order.
    statuses: Vec<u16>,
    codes: Vec<String>,
    /// How the read ended, for the failure message.
    end: String,
}

/// Sends `bytes` on a new connection and collects every response.
///
/// A well-framed single request (`one_request`) is answered and then the
/// connection closed by us. Anything else is followed by a half-close, so
/// a truncated request ends instead of waiting for a timeout; hyper then
/// may close without answering (it treats EOF mid-request as the client
/// going away), which counts as "closed".
fn send(addr: SocketAddr, bytes: &[u8], one_request: bool) -> Outcome {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // Write from a second handle while reading: the agent may answer (and
    // close) before it has read everything.
    let mut w = s.try_clone().unwrap();
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&data);
        if !one_request {
            let _ = w.shutdown(std::net::Shutdown::Write);
        }
    });
    let mut got = Vec::new();
    let end = if one_request {
        let mut r = std::io::BufReader::new(&mut s);
        let resp = read_response(&mut r);
        let end = format!("{} response", if resp.is_some() { "one" } else { "no" });
        if let Some(resp) = resp {
            got = format!(
                "HTTP/1.1 {} X\r\ncontent-length: {}\r\n\r\n",
                resp.status,
                resp.body.len()
            )
            .into_bytes();
            got.extend_from_slice(&resp.body);
        }
        end
    } else {
        match s.read_to_end(&mut got) {
            Ok(n) => format!("eof after {n} bytes"),
            Err(e) => format!("{e} after {} bytes", got.len()), // a reset ends it too
        }
    };
    let _ = s.shutdown(std::net::Shutdown::Both);
    writer.join().unwrap();
    let mut r = Cursor::new(got);
    let mut statuses = Vec::new();
    let mut codes = Vec::new();
    while let Some(resp) = read_response(&mut r) {
        if resp.status >= 200 {
            if resp.status >= 400
                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&resp.body)
            {
                codes.push(v["error"]["code"].as_str().unwrap_or("").to_owned());
            }
            statuses.push(resp.status);
        }
    }
    Outcome {
        statuses,
        codes,
        end,
    }
}

/// The problem with an outcome, if any.
fn judge(input: &Input, out: &Outcome) -> Option<String> {
    let bad = |why: &str| {
        Some(format!(
            "{why}: got {:?} {:?} ({})",
            out.statuses, out.codes, out.end
        ))
    };
    if out.statuses.iter().any(|&s| s >= 500) {
        return bad("a 5xx");
    }
    match input.expect {
        Expect::Reject => {
            if out.statuses.iter().any(|&s| !(400..500).contains(&s)) {
                return bad("malformed input was not refused");
            }
        }
        Expect::BadJson => {
            if out.statuses.len() != 1 || !matches!(out.statuses[0], 400 | 413) {
                return bad("want exactly one 400 or 413");
            }
            if !matches!(
                out.codes.first().map(String::as_str),
                Some("bad_request" | "payload_too_large")
            ) {
                return bad("want an API error body");
            }
        }
        Expect::NoServerError => {}
    }
    None
}

fn status_kib(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// Sends `inputs` from four clients at a time, checking that the agent
/// still answers every 250 inputs; returns what went wrong.
fn run_inputs(addr: SocketAddr, inputs: &[Input]) -> Vec<String> {
    let failures = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let info = format!("GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n");
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(input) = inputs.get(i) else { break };
                    let out = send(addr, &input.bytes, input.expect == Expect::BadJson);
                    if let Some(why) = judge(input, &out) {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{}: {why}", input.name));
                    }
                    if i % 250 == 0 {
                        let r = send(addr, info.as_bytes(), true);
                        if r.statuses != [200] {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("after input {i}: /v1/info gave {:?}", r.statuses));
                        }
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

fn corpus(seed: u64) -> Vec<Input> {
    let mut inputs = corpus::http_cases();
    inputs.extend(corpus::json_cases());
    let mut rng = Rng::new(seed);
    let bases = corpus::bases();
    for i in 0..HTTP_MUTATIONS {
        let base = rng.pick(&bases).clone();
        inputs.push(Input {
            name: format!("http mutation {i}"),
            bytes: corpus::mutate(&mut rng, &base),
            expect: Expect::NoServerError,
        });
    }
    let json = corpus::json_bases();
    let mut made = 0;
    while made < JSON_MUTATIONS {
        let base = rng.pick(&json).clone();
        let body = corpus::mutate(&mut rng, &base);
        // A mutation that still parses could name a real user: leave it
        // out rather than run something. (It is rare, and counted.)
        if let Ok(req) = lab_agent::parse_exec(&body)
            && req.options.user != corpus::NO_USER
        {
            continue;
        }
        made += 1;
        inputs.push(Input {
            name: format!("json mutation {made}: {}", String::from_utf8_lossy(&body)),
            bytes: corpus::exec_request(&body),
            expect: Expect::BadJson,
        });
    }
    inputs
}

#[test]
fn a_generated_corpus_of_malformed_http_and_json_is_refused_without_harm() {
    let seed = std::env::var("LAB_AGENT_CORPUS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1ab_a9e7);
    let b = Agent::builder("hostile").no_cloud_init();
    // Ready, so a mutation that turns out valid gets 200, not 503.
    write_file(
        &b.dir.join("state/setup.json"),
        r#"{"state":"succeeded","started_at":"2026-11-29T08:00:00Z","exit_code":0}"#,
        0o644,
    );
    let mut agent = b.start();
    let pid = agent.child.id();
    assert_eq!(agent.get("/v1/ready").status, 200);
    let rss_before = status_kib(pid, "VmRSS:");

    let inputs = corpus(seed);
    let total = inputs.len();
    let started = Instant::now();
    // Two halves, to see whether memory grows with the number of inputs.
    let (first, second) = inputs.split_at(total / 2);
    let mut failures = run_inputs(agent.addr, first);
    let rss_half = status_kib(pid, "VmRSS:");
    failures.extend(run_inputs(agent.addr, second));
    assert!(
        failures.is_empty(),
        "{} of {total} inputs misbehaved:\n{}",
        failures.len(),
        failures
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    assert!(agent.child.try_wait().unwrap().is_none(), "the agent died");
    let log = agent.log();
    assert!(!log.contains("panicked"), "the agent panicked:\n{log}");
    assert_eq!(agent.get("/v1/info").status, 200);
    let rss_after = status_kib(pid, "VmRSS:");
    let hwm = status_kib(pid, "VmHWM:");
    eprintln!(
        "hostile corpus: {total} inputs (seed {seed:#x}) in {:?}; VmRSS {rss_before} -> {rss_half} -> {rss_after} KiB, VmHWM {hwm} KiB",
        started.elapsed()
    );
    assert!(hwm <= MAX_HWM_KIB, "peak memory {hwm} KiB");
    // Whatever the allocator keeps after the first half is reused by the
    // second: memory does not grow with the number of inputs.
    assert!(
        rss_after <= rss_half + 4 * 1024,
        "VmRSS grew from {rss_half} to {rss_after} KiB over the second half"
    );
    let _ = agent.child.kill();
}
