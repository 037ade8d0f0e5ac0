use crate::support::*;
use serde_json::json;

#[test]
fn unknown_path_is_404_and_wrong_method_is_405_with_allow() {
    let agent = Agent::local("errors-route");
    let msg = agent.get("/v2/ready").error(404, "not_found");
    assert!(msg.contains("/v2/ready"), "{msg}");
    let r = agent.request("GET", "/v1/exec", Some(TOKEN), None);
    r.error(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("POST"));
    let r = agent.request("POST", "/v1/ready", Some(TOKEN), Some(b"{}"));
    r.error(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("GET"));
    agent
        .request("PUT", "/v1/info", Some(TOKEN), None)
        .error(405, "method_not_allowed");
}

#[test]
fn bad_exec_requests_are_400_saying_what_is_wrong() {
    let agent = Agent::local("errors-400");
    let cases: &[(&[u8], &str)] = &[
        (b"not json", "invalid exec request"),
        (
            b"{\"command\":\"true\",\"timeout\":5}",
            "unknown field `timeout`",
        ),
        (
            b"{\"command\":\"true\",\"command\":\"false\"}",
            "duplicate field `command`",
        ),
        (b"{\"command\":5}", "invalid type"),
        (b"{}", "missing field `command`"),
        (b"{\"command\":\"\"}", "command is empty"),
        (
            b"{\"command\":\"true\",\"timeout_secs\":0}",
            "timeout_secs is 0",
        ),
        (
            b"{\"command\":\"true\",\"max_output_bytes\":99999999}",
            "16 MiB",
        ),
        (
            b"{\"command\":\"true\",\"user\":\"no-such-user-xyz\"}",
            "unknown user `no-such-user-xyz`",
        ),
        (
            b"{\"command\":\"true\",\"cwd\":\"/no/such/dir\"}",
            "cwd `/no/such/dir` does not exist",
        ),
        (
            b"{\"command\":\"true\",\"cwd\":\"/etc/passwd\"}",
            "is not a directory",
        ),
        (
            b"{\"command\":\"true\",\"cwd\":\"relative\"}",
            "not an absolute path",
        ),
        (
            b"{\"command\":\"true\",\"env\":{\"A=B\":\"x\"}}",
            "environment variable",
        ),
        (b"{\"command\":\"a\\u0000b\"}", "NUL"),
        (b"\xff\xfe", "invalid exec request"),
    ];
    for (body, want) in cases {
        let r = agent.request("POST", "/v1/exec", Some(TOKEN), Some(body));
        let msg = r.error(400, "bad_request");
        assert!(
            msg.contains(want),
            "{}: {msg:?} lacks {want:?}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn a_cwd_the_user_cannot_enter_is_a_400_not_an_exit_code() {
    let agent = Agent::local("errors-cwd");
    let dir = agent.dir.join("private");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let r = agent.exec(json!({"command": "true", "user": "nobody", "cwd": dir}));
    let msg = r.error(400, "bad_request");
    assert!(msg.contains("Permission denied"), "{msg}");
    assert!(msg.contains("nobody"), "{msg}");
}

#[test]
fn bodies_over_one_mib_are_413() {
    let agent = Agent::local("errors-413");
    let big = format!("{{\"command\":\"{}\"}}", "x".repeat(1024 * 1024 + 10));
    agent
        .request("POST", "/v1/exec", Some(TOKEN), Some(big.as_bytes()))
        .error(413, "payload_too_large");
    // Without a Content-Length (chunked), the limit applies while reading.
    let mut raw = format!(
        "POST /v1/exec HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..20 {
        raw.extend_from_slice(format!("{:x}\r\n", 64 * 1024).as_bytes());
        raw.extend(std::iter::repeat_n(b'x', 64 * 1024));
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let r = agent.raw(&raw).expect("an answer");
    r.error(413, "payload_too_large");
    // Just under the body limit is fine: a big stdin.
    let ok = serde_json::json!({"command": "wc -c", "stdin": "x".repeat(1000 * 1000)}).to_string();
    let r = agent.request("POST", "/v1/exec", Some(TOKEN), Some(ok.as_bytes()));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["stdout"].as_str().unwrap().trim(), "1000000");
    // A command longer than one execve argument may be: a clear 400.
    let long = serde_json::json!({"command": format!(": {}", "x".repeat(200_000))}).to_string();
    let msg = agent
        .request("POST", "/v1/exec", Some(TOKEN), Some(long.as_bytes()))
        .error(400, "bad_request");
    assert!(msg.contains("in one argument"), "{msg}");
}

/// Past `--max-execs` an exec waits its turn in the agent (a short burst
/// costs a short wait, not a client's `Retry-After` second) and is served
/// as soon as a slot comes free.
#[test]
fn past_max_execs_an_exec_waits_its_turn() {
    let agent = Agent::builder("errors-queue")
        .no_cloud_init()
        .args(["--max-execs", "1"])
        .start();
    let addr = agent.addr;
    let marker = agent.dir.join("started");
    let first = std::thread::spawn({
        let marker = marker.clone();
        move || {
            exec_at(
                addr,
                &json!({"command": format!("touch {}; sleep 1", marker.display())}),
            )
        }
    });
    eventually(10, "the first exec to start", || {
        marker.exists().then_some(())
    });
    let second = agent.run(json!({"command": "echo second"}));
    assert_eq!(second["stdout"], "second\n");
    assert_eq!(first.join().unwrap().status, 200);
    assert!(!agent.log().contains("status=429"), "{}", agent.log());
}

/// The queue is bounded in places (4 per slot: past them 429 at once) and
/// in time (a queued exec whose slot does not come free within 5 s: 429),
/// each 429 with `Retry-After` and a message saying which; nothing queued
/// ran.
#[test]
fn past_the_queue_or_its_wait_is_429_with_retry_after() {
    let agent = Agent::builder("errors-429")
        .no_cloud_init()
        .args(["--max-execs", "1"])
        .start();
    let addr = agent.addr;
    let marker = agent.dir.join("started");
    let ran = agent.dir.join("ran");
    let slow = std::thread::spawn({
        let marker = marker.clone();
        move || {
            exec_at(
                addr,
                &json!({"command": format!("touch {}; sleep 8", marker.display())}),
            )
        }
    });
    eventually(10, "the first exec to start", || {
        marker.exists().then_some(())
    });
    let queued: Vec<_> = (0..4)
        .map(|_| {
            let ran = ran.clone();
            std::thread::spawn(move || {
                exec_at(
                    addr,
                    &json!({"command": format!("touch {}", ran.display())}),
                )
            })
        })
        .collect();
    // Once the four hold the queue's places (the agent has read their
    // requests: the handler takes its place in the same poll), a fifth is
    // refused at once.
    eventually(10, "the four to be queued", || {
        heads_read(addr.port(), 5).then_some(())
    });
    let r = agent.exec(json!({"command": "true"}));
    let msg = r.error(429, "busy");
    assert!(
        msg.contains("--max-execs) and as many more as it queues wait"),
        "{msg}"
    );
    assert_eq!(r.header("retry-after"), Some("1"));
    for q in queued {
        let r = q.join().unwrap();
        let msg = r.error(429, "busy");
        assert!(msg.contains("none ended within 5 s"), "{msg}");
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    assert!(!ran.exists(), "a refused exec ran");
    assert_eq!(slow.join().unwrap().status, 200);
    // The slot is free again.
    assert_eq!(agent.run(json!({"command": "true"}))["exit_code"], 0);
}

#[test]
fn garbage_gets_a_4xx_or_a_close_and_the_agent_keeps_serving() {
    let agent = Agent::local("errors-garbage");
    let inputs: &[&[u8]] = &[
        b"\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET /v1/ready HTTP/9.9\r\n\r\n",
        b"GET /v1/ready HTTP/1.1\r\nBad Header\r\n\r\n",
        b"\x00\x01\x02\x03",
        b"POST /v1/exec HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
        b"POST /v1/exec HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ];
    for input in inputs {
        if let Some(r) = agent.raw_eof(input) {
            assert!((400..500).contains(&r.status), "{input:?}: {}", r.status);
        }
    }
    let big_header = format!(
        "GET /v1/ready HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    if let Some(r) = agent.raw(big_header.as_bytes()) {
        assert_eq!(r.status, 431);
    }
    assert_eq!(agent.get("/v1/info").status, 200);
}

/// Regression: values the kernel refuses at exec time (a variable over one
/// execve string, a cwd longer than PATH_MAX, a symlink loop) were 500s.
/// They are the request's fault: 400, saying what is wrong. Found by the
/// schemathesis contract run.
#[test]
fn values_the_kernel_refuses_are_400_not_500() {
    let agent = Agent::local("errors-e2big");
    let big = "x".repeat(200_000);
    let msg = agent
        .exec(json!({"command": "true", "env": {"BIG": big}}))
        .error(400, "bad_request");
    assert!(msg.contains("environment variable `BIG`"), "{msg}");
    let long_cwd = format!("/{}", "a/".repeat(3000));
    let msg = agent
        .exec(json!({"command": "true", "cwd": long_cwd}))
        .error(400, "bad_request");
    assert!(msg.contains("too long"), "{msg}");
    let loop_dir = agent.dir.join("loop");
    std::os::unix::fs::symlink(&loop_dir, &loop_dir).unwrap();
    let msg = agent
        .exec(json!({"command": "true", "cwd": loop_dir}))
        .error(400, "bad_request");
    // The kernel's ELOOP in the libc's words: glibc's "Too many levels of
    // symbolic links" (this suite's agent), musl's "Symbolic link loop"
    // (the shipped one).
    assert!(msg.to_lowercase().contains("symbolic link"), "{msg}");
    // Just under the limit is fine.
    let fits = "y".repeat(131_071 - "FITS=".len());
    let r = agent.run(json!({"command": "printf %s \"$FITS\" | wc -c", "env": {"FITS": fits, "HOME": "/nonexistent"}}));
    assert_eq!(
        r["stdout"].as_str().unwrap().trim(),
        (131_071 - 5).to_string()
    );
}
