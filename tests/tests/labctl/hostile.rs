//! `labctl wait/exec/grade` against hostile fake agents
//! (`lab_agent_tests::hostile`): each run ends by its deadline with the exit
//! status that says what happened (3: the guest answered wrongly), and no
//! control character from the guest reaches the terminal raw, on stderr or
//! (with `--json`) on stdout.

use super::*;
use lab_agent_tests::hostile::{Behaviour, ESCAPES, HostileAgent};
use std::process::Output;
use std::time::{Duration, Instant};

/// What a finished `labctl` cost, from `wait4`'s `rusage`.
#[derive(Debug, Clone, Copy)]
struct Usage {
    /// Peak resident set (`ru_maxrss`), KiB.
    max_rss_kib: u64,
    /// User + system CPU.
    cpu: Duration,
}

/// `labctl VERB --url … --token-file … ARGS…` against `agent`; killed
/// (and the test failed) if it outlives `bound`.
fn run(agent: &HostileAgent, verb: &[&str], args: &[&str], bound: Duration) -> (Output, Duration) {
    let (out, took, _) = run_measured(agent, verb, args, bound);
    (out, took)
}

/// [`run`], and what labctl cost, as `rusage-run` (its parent) reaped
/// it: not from here, where `wait4` would report this test process's
/// peak RSS if larger (Linux folds the memory a process had before
/// `execve` into its `ru_maxrss`).
fn run_measured(
    agent: &HostileAgent,
    verb: &[&str],
    args: &[&str],
    bound: Duration,
) -> (Output, Duration, Usage) {
    let dir = TempDir::new("hostile");
    let token = dir.join("token");
    write_token(&token, "token-for-a-hostile-agent-xxxxxxxxxxxx");
    let report = dir.join("rusage");
    let start = Instant::now();
    let mut child = Command::new(lab_agent_tests::local::rusage_run_bin())
        .arg(&report)
        .arg(labctl_bin())
        .args(verb)
        .args(["--url", &agent.url(), "--token-file"])
        .arg(&token)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > bound {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("labctl outlived {bound:?}:\n{}", describe(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = start.elapsed();
    let out = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no rusage report ({e}):\n{}", describe(&out)));
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().unwrap());
    let usage = Usage {
        max_rss_kib: fields.next().unwrap(),
        cpu: Duration::from_micros(fields.next().unwrap()),
    };
    (out, took, usage)
}

/// `LABEL: usage in took, honest base`, printed (the figures a
/// passing run leaves in the log) and returned for the asserts.
fn usage_line(label: &str, usage: Usage, took: Duration, base: Usage) -> String {
    let what = format!("{label}: {usage:?} in {took:?}, honest {base:?}");
    eprintln!("{what}");
    what
}

/// The caps of a call that met a hostile answer held to `limit_kib`,
/// against `base`, the same call answered at once by an honest fake.
/// Memory: peak RSS at most `base`'s plus twice the limit (one answer
/// held at the limit, and as much again for what holding it costs: the
/// buffer's growth, the decoded strings). CPU: at most `base`'s, plus a
/// tenth of the wall time the call took (`took`), plus 200 ms of
/// start-up noise; a flood read until the deadline costs about its
/// whole wall time.
fn assert_within_caps(what: &str, usage: Usage, took: Duration, base: Usage, limit_kib: u64) {
    let rss_bound = base.max_rss_kib + 2 * limit_kib;
    assert!(
        usage.max_rss_kib <= rss_bound,
        "{what}: peak RSS over {rss_bound} KiB"
    );
    let cpu_bound = base.cpu + took / 10 + Duration::from_millis(200);
    assert!(usage.cpu <= cpu_bound, "{what}: CPU over {cpu_bound:?}");
}

/// No control character but newlines (and JSON's own escapes) in
/// what labctl printed.
fn no_raw_controls(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| c != '\n' && lab_agent_proto::text::is_unsafe(c))
        .collect();
    assert!(bad.is_empty(), "{what} carries {bad:?} raw:\n{text}");
}

const EXEC: &[&str] = &["exec"];

/// Regression: `labctl exec --timeout 5 -- true` took 914 s against an
/// agent answering 429 forever; now the call ends by `--timeout` +
/// `--answer-timeout`.
#[test]
fn exec_on_a_busy_agent_ends_by_its_deadline() {
    let agent = HostileAgent::start(Behaviour::Busy { retry_after: 1 });
    let args = ["--timeout", "1", "--answer-timeout", "2", "--", "true"];
    let (out, took) = run(&agent, EXEC, &args, Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(took <= Duration::from_secs(3 + 2), "{took:?}");
    assert!(
        stderr(&out).contains("still busy after"),
        "{}",
        describe(&out)
    );
}

/// Regression: a `100 Continue` flood held `labctl exec` (and a core)
/// for the whole timeout; now it ends at once, saying so.
#[test]
fn exec_on_a_continue_flood_ends_and_says_so() {
    let agent = HostileAgent::start(Behaviour::ContinueFlood);
    let args = ["--timeout", "1", "--answer-timeout", "20", "--", "true"];
    let (out, took) = run(&agent, EXEC, &args, Duration::from_secs(21 + 2));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        stderr(&out).contains("interim (1xx) responses"),
        "{}",
        describe(&out)
    );
    assert!(took < Duration::from_secs(21), "{took:?}");
}

/// What a hostile answer can cost `labctl exec`, asserted on the
/// child's own `rusage`. Memory: the peak RSS stays under that of the
/// same call answered at once by an honest fake, plus twice the body
/// limit of the request (`exec_response_limit` of the default 1 MiB
/// `max_output_bytes`: 12 MiB + 64 KiB): one answer held at the limit,
/// and as much again for what holding it costs (the buffer's growth,
/// the decoded strings). CPU: at most the honest call's, plus a tenth
/// of the wall time the call took, plus 200 ms of start-up noise; a
/// flood read until the deadline (31 s here) costs about its whole wall
/// time. Each bound fails if the cap it checks is lifted (tried:
/// without the body limit the endless body peaked at 678 MiB; without
/// the interim cut the flood call spun past the test's bound).
#[test]
fn exec_memory_and_cpu_stay_within_the_requests_caps() {
    let honest = HostileAgent::start(Behaviour::Honest);
    let (out, _, base) = run_measured(&honest, EXEC, &["--", "true"], Duration::from_secs(40));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let limit_kib = lab_agent_client::client::exec_response_limit(
        lab_agent_proto::exec::DEFAULT_MAX_OUTPUT_BYTES,
    ) as u64
        / 1024;
    // A deadline far past what each call needs (a loaded machine must
    // not turn a `TooLarge` into a `Timeout`), but for the drip, which
    // only its deadline ends.
    let args = ["--timeout", "1", "--answer-timeout", "30", "--", "true"];
    let drip_args = ["--timeout", "1", "--answer-timeout", "4", "--", "true"];
    for (behaviour, want) in [
        (Behaviour::EndlessBody, "response larger than"),
        (Behaviour::HugeContentLength, "2147483648 bytes announced"),
        (
            Behaviour::Oversized {
                stdout_bytes: 8 << 20,
            },
            "more than `max_output_bytes`",
        ),
        (Behaviour::ContinueFlood, "9 interim (1xx) responses"),
        (Behaviour::Drip, "no response within 5s"),
    ] {
        let agent = HostileAgent::start(behaviour.clone());
        let args = if behaviour == Behaviour::Drip {
            &drip_args
        } else {
            &args
        };
        let (out, took, usage) = run_measured(&agent, EXEC, args, Duration::from_secs(40));
        let what = usage_line(&format!("{behaviour:?}"), usage, took, base);
        assert_eq!(out.status.code(), Some(3), "{what}\n{}", describe(&out));
        assert!(stderr(&out).contains(want), "{what}\n{}", describe(&out));
        assert_within_caps(&what, usage, took, base, limit_kib);
    }
}

/// [`exec_memory_and_cpu_stay_within_the_requests_caps`] for `labctl wait`
/// and `labctl grade`, which meet a hostile body first on `/v1/ready`
/// (held to `READY_RESPONSE_LIMIT`), and `grade` then on `/v1/exec` (a
/// VM that is ready and answers a check with 8 MiB of stdout, held to the
/// check's `max_output_bytes`). Same bounds: the honest call's peak RSS
/// plus twice the limit of the answer met, the honest call's CPU plus a
/// tenth of the wall time plus 200 ms.
#[test]
fn wait_and_grade_memory_and_cpu_stay_within_the_requests_caps() {
    use lab_agent_client::client::{READY_RESPONSE_LIMIT, exec_response_limit};
    let lab = one_check_lab();
    let lab_arg = lab.path.display().to_string();
    let wait: &[&str] = &["wait"];
    let grade: &[&str] = &["grade", &lab_arg];
    let ready_kib = READY_RESPONSE_LIMIT as u64 / 1024;
    let exec_kib =
        exec_response_limit(lab_agent_proto::exec::DEFAULT_MAX_OUTPUT_BYTES) as u64 / 1024;
    // The deadline far past what each refusal needs, but for the drip,
    // which only the deadline ends.
    let args = ["--timeout", "30"];
    let drip_args = ["--timeout", "4"];
    for (verb, drip_says) in [
        (wait, "the agent never answered"),
        (grade, "no response within 4s"),
    ] {
        let honest = HostileAgent::start(Behaviour::Honest);
        let (out, _, base) = run_measured(&honest, verb, &args, Duration::from_secs(40));
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let mut cases = vec![
            (Behaviour::EndlessBody, 3, "response larger than", ready_kib),
            (
                Behaviour::HugeContentLength,
                3,
                "2147483648 bytes announced",
                ready_kib,
            ),
            (
                Behaviour::ContinueFlood,
                3,
                "9 interim (1xx) responses",
                ready_kib,
            ),
            (Behaviour::Drip, 3, drip_says, ready_kib),
        ];
        if verb == grade {
            // Ready, then an answer to the check past its cap: the check
            // is an error (exit 5), the rest of the grade goes on.
            cases.push((
                Behaviour::Oversized {
                    stdout_bytes: 8 << 20,
                },
                5,
                "more than `max_output_bytes` 1048576 allows",
                exec_kib,
            ));
        }
        for (behaviour, code, want, limit_kib) in cases {
            let agent = HostileAgent::start(behaviour.clone());
            let args = if behaviour == Behaviour::Drip {
                &drip_args
            } else {
                &args
            };
            let (out, took, usage) = run_measured(&agent, verb, args, Duration::from_secs(40));
            let what = usage_line(&format!("{verb:?} {behaviour:?}"), usage, took, base);
            assert_eq!(out.status.code(), Some(code), "{what}\n{}", describe(&out));
            let text = format!("{}{}", stderr(&out), stdout(&out));
            assert!(text.contains(want), "{what}\n{}", describe(&out));
            assert_within_caps(&what, usage, took, base, limit_kib);
        }
    }
}

/// Regression: `exit_code: -1` and signal 2147483647 made `labctl exec`
/// exit 0.
#[test]
fn exec_exit_statuses_cannot_lie() {
    for (exit_code, signal, want) in [
        (Some(-1), None, "exit code -1 is outside 0..=255"),
        (
            None,
            Some(2147483647),
            "signal 2147483647 is outside 1..=64",
        ),
        (Some(256), None, "exit code 256"),
    ] {
        let agent = HostileAgent::start(Behaviour::Exit { exit_code, signal });
        let (out, _) = run(&agent, EXEC, &["--", "true"], Duration::from_secs(40));
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert!(stderr(&out).contains(want), "{}", describe(&out));
    }
    let agent = HostileAgent::start(Behaviour::Exit {
        exit_code: None,
        signal: Some(9),
    });
    let (out, _) = run(&agent, EXEC, &["--", "true"], Duration::from_secs(40));
    assert_eq!(out.status.code(), Some(137), "{}", describe(&out));
}

/// Regression: 8 MB of stdout was accepted (and printed) for a 1 MiB cap.
#[test]
fn exec_output_past_the_cap_is_refused() {
    let agent = HostileAgent::start(Behaviour::Oversized {
        stdout_bytes: 8 << 20,
    });
    let (out, _) = run(&agent, EXEC, &["--", "true"], Duration::from_secs(40));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("more than `max_output_bytes`"),
        "{}",
        describe(&out)
    );
}

/// Regression: the agent's error text (or a non-JSON body's start)
/// reached the terminal raw.
#[test]
fn exec_errors_are_escaped() {
    for b in [Behaviour::Escapes, Behaviour::NonJsonError] {
        let agent = HostileAgent::start(b.clone());
        let (out, _) = run(&agent, EXEC, &["--", "true"], Duration::from_secs(40));
        no_raw_controls("stderr", &out.stderr);
        assert!(
            stderr(&out).contains("\\x1b]0;pwned\\x07"),
            "{b:?}: {}",
            describe(&out)
        );
        // A 400 to an exec is the agent refusing our command (2); a
        // 500 is the guest's (3).
        let want = if b == Behaviour::Escapes { 2 } else { 3 };
        assert_eq!(out.status.code(), Some(want), "{b:?}: {}", describe(&out));
    }
}

/// Regression: `reason` and `log_tail` of a failed setup reached the
/// terminal raw (a `\r` overwrote lines, `\n` forged one); `--json`
/// carries them only as JSON escapes.
#[test]
fn wait_escapes_the_guests_reason_and_log() {
    let agent = HostileAgent::start(Behaviour::Escapes);
    let (out, _) = run(
        &agent,
        &["wait"],
        &["--timeout", "10"],
        Duration::from_secs(15),
    );
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    no_raw_controls("stderr", &out.stderr);
    let err = stderr(&out);
    assert!(
        err.contains("  │ \\x1b]0;pwned\\x07\\x1b[2J\\rforged"),
        "{err}"
    );
    assert!(
        !err.lines().any(|l| l.starts_with("error: forged line")),
        "{err}"
    );

    let (out, _) = run(
        &agent,
        &["wait"],
        &["--timeout", "10", "--json"],
        Duration::from_secs(15),
    );
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    no_raw_controls("stdout", &out.stdout);
    no_raw_controls("stderr", &out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON alone");
    let reason = v["vms"][0]["ready"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(ESCAPES),
        "the raw value is in the JSON: {reason:?}"
    );
}

/// Regression: a hostile 400 on `/v1/ready` exited 2 ("usage"); a 503
/// with an unknown state read "the agent never answered".
#[test]
fn wait_on_wrong_answers_exits_3() {
    let agent = HostileAgent::start(Behaviour::Ready400);
    let (out, _) = run(
        &agent,
        &["wait"],
        &["--timeout", "10"],
        Duration::from_secs(15),
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let agent = HostileAgent::start(Behaviour::UnknownState);
    let (out, took) = run(
        &agent,
        &["wait"],
        &["--timeout", "10"],
        Duration::from_secs(15),
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        !stderr(&out).contains("never answered"),
        "{}",
        describe(&out)
    );
    assert!(
        stderr(&out).contains("unexpected response body (status 503)"),
        "{}",
        describe(&out)
    );
    assert!(took < Duration::from_secs(10), "ended at once: {took:?}");
}

fn one_check_lab() -> TempDir {
    lab_folder(
        "hostile-lab",
        "name = \"l\"\n[[checks]]\nname = \"true\"\nrun = \"true\"\ntimeout_secs = 1\n",
    )
}

/// Regression: the agent-reported `lab_dir` was printed raw (even with
/// `--json`), and a relative one was used although `--lab-dir`
/// refuses one.
#[test]
fn grade_escapes_and_checks_the_reported_lab_dir() {
    let lab = one_check_lab();
    let lab_arg = lab.path.display().to_string();
    let agent = HostileAgent::start(Behaviour::EscapedLabDir);
    for json in [false, true] {
        let mut args = vec![];
        if json {
            args.push("--json");
        }
        let (out, _) = run(&agent, &["grade", &lab_arg], &args, Duration::from_secs(40));
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        no_raw_controls("stdout", &out.stdout);
        no_raw_controls("stderr", &out.stderr);
        assert!(
            stderr(&out).contains("LAB_DIR=/opt/lab\\x1b]0;pwned"),
            "{}",
            describe(&out)
        );
        if json {
            let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON alone");
            assert_eq!(v["passed"], 1);
        }
    }
    let agent = HostileAgent::start(Behaviour::RelativeLabDir);
    let (out, _) = run(&agent, &["grade", &lab_arg], &[], Duration::from_secs(40));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        stderr(&out).contains("`opt/lab` is not an absolute path"),
        "{}",
        describe(&out)
    );
}

/// A VM whose agent reports a failed setup with escapes in its reason,
/// and one answering 429 to everything: refused within bounds, the
/// guest's words escaped.
#[test]
fn grade_on_hostile_agents_is_bounded_and_escaped() {
    let lab = one_check_lab();
    let lab_arg = lab.path.display().to_string();
    let agent = HostileAgent::start(Behaviour::Escapes);
    let (out, _) = run(&agent, &["grade", &lab_arg], &[], Duration::from_secs(40));
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    no_raw_controls("stderr", &out.stderr);
    assert!(
        stderr(&out).contains("setup failed: \\x1b]0;pwned"),
        "{}",
        describe(&out)
    );

    let agent = HostileAgent::start(Behaviour::Busy { retry_after: 1 });
    let (out, took) = run(
        &agent,
        &["grade", &lab_arg],
        &["--timeout", "2"],
        Duration::from_secs(10),
    );
    // `/v1/ready` is busy too: not ready, exit 3, at once.
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(took < Duration::from_secs(5), "{took:?}");
}
