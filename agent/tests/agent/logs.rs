//! What a request can do to the agent's log: nothing beyond its own one
//! line. 401s are counted and summarised instead of logged one by one (at
//! most one line a minute; the first after a quiet minute at once), and
//! every value a request controls (user, command, path) is escaped and cut,
//! so no request forges a line or floods the log.

use crate::support::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

/// The issue's flood: pipelined requests without a token, each with a
/// 15 KB path. The released agent logged every one (200 MB in 3 s). Now
/// 10 000 of them add two lines: the first request's, at once, and one
/// summary counting the rest (here at shutdown, before the minute is up).
#[test]
fn a_pipelined_401_flood_adds_two_lines() {
    const REQUESTS: usize = 10_000;
    let mut agent = Agent::local("logs-401-flood");
    let before = agent.log().len();
    let path = format!("/v1/{}", "a".repeat(15_000));
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut s = TcpStream::connect(agent.addr).unwrap();
    let writer = {
        let mut s = s.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..REQUESTS {
                s.write_all(request.as_bytes()).unwrap();
            }
        })
    };
    let mut r = BufReader::new(&mut s);
    let mut answered = 0;
    let mut line = String::new();
    while answered < REQUESTS {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "closed after {answered}"
        );
        // A body has no newline: the next status line follows it on
        // the same line.
        answered += line.matches("HTTP/1.1 401").count();
    }
    writer.join().unwrap();
    let during = agent.log().len() - before;
    agent.signal("TERM");
    agent.wait_exit(20);
    let log = agent.log();
    let added = log.len() - before;
    eprintln!(
        "{REQUESTS} rejected requests with 15 KB paths: {during} log bytes while they came, {added} with the summary"
    );
    let lines: Vec<&str> = log[before..]
        .lines()
        .filter(|l| l.contains("unauthorized="))
        .collect();
    assert!(
        during < 1024,
        "401s were logged one by one ({during} bytes while they came): {}",
        &log[before..]
    );
    assert!(added < 2048, "{added} bytes: {}", &log[before..]);
    assert_eq!(
        lines.len(),
        2,
        "the first at once, then one summary: {lines:?}"
    );
    assert_eq!(
        lines.iter().map(|l| count(l, "unauthorized=")).sum::<u64>(),
        REQUESTS as u64,
        "{lines:?}"
    );
    assert!(log.contains("peers=127.0.0.1"), "{log}");
}

/// The number after `key` in a log line.
fn count(line: &str, key: &str) -> u64 {
    let at = line
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        + key.len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key} in {line}"))
}

/// An operator looking into a backend that gets 401s finds the first one
/// in the log at once, not up to a minute later; the next ones within the
/// minute wait for the summary.
#[test]
fn the_first_401_after_a_quiet_minute_is_logged_at_once() {
    let mut agent = Agent::local("logs-401-first");
    let before = agent.log().len();
    let rejected = |n: usize| {
        for _ in 0..n {
            let r = agent.request("GET", "/v1/info", Some("not-the-token"), None);
            assert_eq!(r.status, 401, "{}", r.text());
        }
    };
    rejected(1);
    let first = eventually(5, "the first 401's line", || {
        let log = agent.log();
        log[before..]
            .lines()
            .find(|l| l.contains("unauthorized="))
            .map(str::to_owned)
    });
    assert_eq!(count(&first, "unauthorized="), 1, "{first}");
    assert!(first.contains("example=\"GET /v1/info\""), "{first}");
    // An exec's answer wakes the housekeeping that writes due summaries:
    // if the next 401s were due, they would be written by then.
    rejected(3);
    agent.run(json!({"command": "true"}));
    let log = agent.log();
    assert_eq!(
        log[before..].matches("unauthorized=").count(),
        1,
        "401s within the minute were written before it was up: {}",
        &log[before..]
    );
    agent.signal("TERM");
    agent.wait_exit(20);
    let log = agent.log();
    let lines: Vec<&str> = log[before..]
        .lines()
        .filter(|l| l.contains("unauthorized="))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(count(lines[1], "unauthorized="), 3, "{lines:?}");
}

fn lines_are_well_formed(log: &str) {
    for line in log.lines() {
        // Every line starts with the logger's own timestamp and level.
        assert!(
            line.len() > 25 && line.as_bytes()[4] == b'-' && line.contains("Z "),
            "a line that is not the logger's: {line:?}"
        );
        assert!(line.len() < 4096, "a line of {} bytes", line.len());
    }
    assert!(!log.contains('\0'), "a raw NUL in the log");
}

/// The issue's injection: a `user` with a newline forged a whole request
/// line; NUL and a 10 000-character name went in raw. Now they are
/// escaped and cut, and the line carries the peer and the exec's sizes.
#[test]
fn request_values_cannot_forge_or_flood_log_lines() {
    let agent = Agent::local("logs-inject");
    let forged = "nobody\n2026-12-01T00:00:00.000Z  INFO request method=POST path=/v1/exec status=200 user=root exit_code=0";
    for user in [
        forged.to_owned(),
        "no\0body".to_owned(),
        "u".repeat(10_000),
        "\u{1b}[2J\u{1b}[31mred".to_owned(),
    ] {
        let r = agent.exec(json!({"command": "true", "user": user}));
        assert_eq!(r.status, 400, "{}", r.text());
    }
    let r = agent.exec(json!({
        "command": format!("true\n2026-12-01T00:00:00.000Z  INFO forged {}", "x".repeat(5000)),
        "stdin": "12345",
        "env": {"A": "1", "BB": "22"},
    }));
    assert_eq!(r.status, 200, "{}", r.text());
    // A request's line is written just after its answer.
    let log = eventually(5, "the exec's line", || {
        let log = agent.log();
        log.contains("stdin_bytes=5").then_some(log)
    });
    lines_are_well_formed(&log);
    assert!(!log.contains("\n2026-12-01T00:00:00.000Z"), "{log}");
    assert!(log.contains(r#"user="nobody\n2026-12-01"#), "{log}");
    assert!(log.contains(r#"user="no\0body""#), "{log}");
    assert!(log.contains("…[10000 bytes]"), "{log}");
    assert!(log.contains(r#"user="\u{1b}[2J"#), "{log}");
    // The audit line of the exec: peer, sizes, the command cut to 200.
    let exec_line = log
        .lines()
        .find(|l| l.contains("stdin_bytes=5"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(exec_line.contains("peer=127.0.0.1:"), "{exec_line}");
    assert!(exec_line.contains("env_vars=2 env_bytes=8"), "{exec_line}");
    assert!(exec_line.contains(r#"command="true\n2026"#), "{exec_line}");
    assert!(exec_line.contains("…["), "{exec_line}");
}
