//! Streamed exec (`"stream": true`) and the setup log: output reaches the
//! client while the command runs, under the same caps, timeouts and kill
//! rules, with memory bounded by a small queue whatever the client does;
//! the setup log from an offset, long-polled.

use crate::support::*;
use lab_agent_proto::StreamEvent;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// An open streamed exec: the status line and headers are read; events are
/// read from the chunked body one line at a time.
struct Stream {
    r: BufReader<TcpStream>,
    pending: Vec<u8>,
    headers: String,
    ended: bool,
}

fn open(agent: &Agent, mut body: serde_json::Value) -> Stream {
    body["stream"] = json!(true);
    let body = body.to_string();
    let mut s = TcpStream::connect(agent.addr).unwrap();
    // A small receive buffer, so what the kernel holds for a client that
    // does not read is small too (loopback autotunes it to 32 MiB here),
    // and the test sees the agent stop reading the pipes.
    let size: nix::libc::c_int = 64 * 1024;
    // SAFETY: a valid socket and an int option of the size given.
    let rc = unsafe {
        nix::libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            nix::libc::SOL_SOCKET,
            nix::libc::SO_RCVBUF,
            (&size as *const nix::libc::c_int).cast(),
            std::mem::size_of::<nix::libc::c_int>() as nix::libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut headers = String::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        if l == "\r\n" || l.is_empty() {
            break;
        }
        headers.push_str(&l.to_ascii_lowercase());
    }
    assert!(headers.starts_with("http/1.1 200"), "{headers}");
    assert!(
        headers.contains("content-type: application/x-ndjson"),
        "{headers}"
    );
    assert!(headers.contains("transfer-encoding: chunked"), "{headers}");
    Stream {
        r,
        pending: Vec::new(),
        headers,
        ended: false,
    }
}

impl Stream {
    /// The next event, `None` at the end of the body.
    fn next(&mut self) -> Option<StreamEvent> {
        loop {
            if let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).unwrap_or_else(|e| {
                    panic!("not an event ({e}): {}", String::from_utf8_lossy(&line))
                }));
            }
            if self.ended {
                assert!(self.pending.is_empty(), "a partial line at the end");
                return None;
            }
            let mut size = String::new();
            self.r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            self.r.read_exact(&mut chunk).unwrap();
            chunk.truncate(n);
            self.ended = n == 0;
            self.pending.extend_from_slice(&chunk);
        }
    }

    /// Every event to the end: the output per stream, and the result.
    fn rest(&mut self) -> (String, String, lab_agent_proto::ExecResult) {
        let (mut out, mut err, mut result) = (String::new(), String::new(), None);
        while let Some(ev) = self.next() {
            assert!(result.is_none(), "an event after the result: {ev:?}");
            match ev {
                StreamEvent::Stdout(s) => out.push_str(&s),
                StreamEvent::Stderr(s) => err.push_str(&s),
                StreamEvent::Result(r) => result = Some(r),
            }
        }
        (out, err, result.expect("the stream ended without a result"))
    }
}

#[test]
fn output_arrives_while_the_command_runs_and_the_result_comes_last() {
    let agent = Agent::local("stream-live");
    let started = Instant::now();
    let mut s = open(
        &agent,
        json!({"command": "for i in 1 2 3; do echo $i; sleep 1; done; echo done >&2"}),
    );
    let first = s.next().unwrap();
    let first_at = started.elapsed();
    assert_eq!(first, StreamEvent::Stdout("1\n".into()));
    let (out, err, result) = s.rest();
    let total = started.elapsed();
    // Not a timing bound on the machine's speed: the command sleeps 3 s in
    // all, and the first line comes before the second sleep begins.
    assert!(
        first_at < Duration::from_secs(2) && total >= Duration::from_secs(3),
        "first event after {first_at:?}, end after {total:?}"
    );
    assert_eq!(out, "2\n3\n");
    assert_eq!(err, "done\n");
    assert_eq!(result.exit_code, Some(0));
    assert!(!result.timed_out);
    assert_eq!((result.stdout.as_str(), result.stderr.as_str()), ("", ""));
    assert!(!result.stdout_truncated && !result.stderr_truncated);
    assert_eq!(result.boot_id.as_deref(), Some(boot_id().as_str()));
    // The plain answer is unchanged by the feature.
    let plain = agent.run(json!({"command": "echo hi"}));
    assert_eq!(plain["stdout"], "hi\n");
    drop(s.headers);
}

#[test]
fn a_timed_out_command_streams_what_it_printed_then_its_result() {
    let agent = Agent::local("stream-timeout");
    let mut s = open(
        &agent,
        json!({"command": "echo before; sleep 30; echo after", "timeout_secs": 1}),
    );
    let (out, _, result) = s.rest();
    assert_eq!(out, "before\n");
    assert!(result.timed_out, "{result:?}");
    assert_eq!(result.exit_code, None);
}

#[test]
fn the_cap_counts_streamed_bytes_and_the_result_says_what_was_cut() {
    let agent = Agent::local("stream-cap");
    // 100 KB on stdout (several reads), 10 bytes on stderr; cap 50000.
    let mut s = open(
        &agent,
        json!({"command": "head -c 100000 /dev/zero | tr '\\0' x; printf 0123456789 >&2",
               "max_output_bytes": 50000}),
    );
    let (out, err, r) = s.rest();
    assert_eq!(out.len(), 50000);
    assert!(out.bytes().all(|b| b == b'x'));
    assert_eq!(err, "0123456789");
    assert!(r.stdout_truncated && !r.stderr_truncated, "{r:?}");
    assert_eq!(r.exit_code, Some(0));
    // A character cut by the cap is dropped, one cut by a read is whole:
    // 8191 ASCII bytes then `é` (2 bytes) straddles the first 8 KiB read.
    let mut s = open(
        &agent,
        json!({"command": "head -c 8191 /dev/zero | tr '\\0' a; printf 'é€'", "max_output_bytes": 8195}),
    );
    let (out, _, r) = s.rest();
    assert_eq!(out, format!("{}é", "a".repeat(8191)));
    assert!(r.stdout_truncated);
    let mut s = open(&agent, json!({"command": "printf 'a\\377b'"}));
    assert_eq!(s.rest().0, "a\u{fffd}b");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A client that reads nothing: the agent stops reading the command's
/// pipes (the command blocks on them; it does not get ahead), its memory
/// does not grow with the output, and when the client goes away the
/// command is killed.
#[test]
fn a_client_that_stops_reading_pauses_the_command_and_its_going_kills_it() {
    let agent = Agent::local("stream-unread");
    let pid = agent.child.id();
    let counter = agent.dir.join("written");
    let before = rss_kib(pid);
    // Counts the 64 KiB blocks it managed to write: with the pipes not
    // read it stalls after the queue and the pipe buffers are full.
    let cmd = format!(
        "echo $$ > {c}.pid; i=0; while :; do head -c 65536 /dev/zero | tr '\\0' y; i=$((i+1)); echo $i > {c}; done",
        c = counter.display()
    );
    // At the cap output is read and dropped (no backpressure needed): ask
    // for far more than the stall leaves room for.
    let s = open(
        &agent,
        json!({"command": cmd, "timeout_secs": 600, "max_output_bytes": 16 << 20}),
    );
    let shell: u32 = eventually(20, "the command's pid", || {
        std::fs::read_to_string(format!("{}.pid", counter.display()))
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    let blocks = || -> u64 {
        std::fs::read_to_string(&counter)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    // Stalled: the count stops moving (socket buffers, the agent's queue,
    // the pipe: a few MiB at most, never the 600 s of output it would write).
    let mut last = u64::MAX;
    let stalled = eventually(30, "the command to stall", || {
        std::thread::sleep(Duration::from_millis(500));
        let now = blocks();
        let still = now == last && now > 0;
        last = now;
        still.then_some(now)
    });
    assert!(stalled < 100, "wrote {stalled} × 64 KiB with no reader");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(blocks(), stalled, "it went on writing");
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(grown < 4 * 1024, "the agent grew by {grown} KiB");
    assert!(alive(shell));
    drop(s);
    eventually(20, "the command to be killed", || {
        (!alive(shell)).then_some(())
    });
    eventually(10, "the abandoned line", || {
        agent
            .log()
            .contains("streamed exec abandoned")
            .then_some(())
    });
}

#[test]
fn a_streamed_exec_that_cannot_start_is_a_plain_400() {
    let agent = Agent::local("stream-400");
    let r = agent.exec(json!({"command": "true", "stream": true, "user": "no-such-user-x"}));
    r.error(400, "bad_request");
    let r = agent.exec(json!({"command": "true", "stream": "yes"}));
    r.error(400, "bad_request");
}

fn log_at(agent: &Agent, query: &str) -> Resp {
    agent.get(&format!("/v1/setup/log?{query}"))
}

fn write_record(agent: &Agent, state: &str) {
    let rec =
        json!({"state": state, "started_at": "2026-12-03T00:00:00Z", "pid": std::process::id()});
    std::fs::write(agent.state_dir().join("setup.json"), rec.to_string()).unwrap();
}

#[test]
fn the_setup_log_from_an_offset_long_polled_and_restarted() {
    let agent = Agent::local("setup-log");
    let log = agent.state_dir().join("setup.log");
    // No setup yet: empty, pending, at once.
    let r = log_at(&agent, "offset=0&wait=0");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, b"");
    assert_eq!(r.header("x-log-offset"), Some("0"));
    assert_eq!(r.header("x-setup-state"), Some("pending"));
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));

    write_record(&agent, "running");
    std::fs::write(&log, "step 1\nstep 2\n").unwrap();
    let r = log_at(&agent, "offset=0");
    assert_eq!(r.text(), "step 1\nstep 2\n");
    assert_eq!(r.header("x-log-offset"), Some("14"));
    assert_eq!(r.header("x-setup-state"), Some("running"));
    let r = log_at(&agent, "offset=7");
    assert_eq!(r.text(), "step 2\n");

    // Long-poll: answered when the line is written, not at the wait's end.
    let path = log.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(b"step 3\n").unwrap();
    });
    let started = Instant::now();
    let r = log_at(&agent, "offset=14&wait=30");
    let took = started.elapsed();
    writer.join().unwrap();
    assert_eq!(r.text(), "step 3\n");
    assert_eq!(r.header("x-log-offset"), Some("21"));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(25),
        "{took:?}"
    );

    // Nothing new and the wait ends: an empty answer at the same offset.
    let r = log_at(&agent, "offset=21&wait=1");
    assert_eq!((r.body.len(), r.header("x-log-offset")), (0, Some("21")));

    // Setup over: no waiting.
    write_record(&agent, "succeeded");
    let started = Instant::now();
    let r = log_at(&agent, "offset=21&wait=30");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(r.header("x-setup-state"), Some("succeeded"));

    // Replaced by a shorter log: from 0 again, and said.
    std::fs::write(&log, "new\n").unwrap();
    let r = log_at(&agent, "offset=21");
    assert_eq!(r.text(), "new\n");
    assert_eq!(r.header("x-log-offset"), Some("4"));
    assert_eq!(r.header("x-log-restarted"), Some("1"));
    assert_eq!(log_at(&agent, "offset=4").header("x-log-restarted"), None);

    // Never through a symlink.
    std::fs::remove_file(&log).unwrap();
    std::os::unix::fs::symlink(agent.dir.join("token"), &log).unwrap();
    let r = log_at(&agent, "offset=0");
    let msg = r.error(500, "internal");
    assert!(msg.contains("symlink"), "{msg}");
    assert!(!r.text().contains(TOKEN));

    // Bad queries are 400s; another method is a 405.
    for q in ["wait=61", "offset=x", "bogus=1"] {
        log_at(&agent, q).error(400, "bad_request");
    }
    let r = agent.request("POST", "/v1/setup/log", Some(TOKEN), Some(b""));
    r.error(405, "method_not_allowed");
}
