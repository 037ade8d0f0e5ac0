//! Hostile agents: what a student who is root in the VM can answer on the
//! agent's port (`lab_agent_tests::hostile`). Each call must end by its
//! deadline, hold the answer to what the request allows, and say what the
//! guest did, with the guest's text escaped in its message.

use super::*;
use lab_agent_tests::hostile::{Behaviour, ESCAPES, HostileAgent};

/// A client whose every call allows the agent `answer` beyond what the
/// request itself asks for.
fn client_for(agent: &HostileAgent, answer: Duration) -> Client {
    Client::builder()
        .request_timeout(answer)
        .build(&agent.url(), "token")
        .unwrap()
}

/// Runs `call`, which must end within `bound` (a generous margin over
/// the deadline it was given), and returns its result and duration.
async fn bounded<T>(bound: Duration, call: impl std::future::Future<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let r = tokio::time::timeout(bound, call)
        .await
        .unwrap_or_else(|_| panic!("the call outlived {bound:?}"));
    (r, start.elapsed())
}

fn no_controls(text: &str) {
    assert!(
        !text.chars().any(lab_agent_proto::text::is_unsafe),
        "control characters reach the message: {text:?}"
    );
}

/// Regression: every 429 got a fresh timeout and its `Retry-After`
/// sleep on top, 21 attempts in all (`labctl exec --timeout 5` took
/// 914 s); now the call ends by its one deadline.
#[tokio::test]
async fn busy_forever_ends_by_the_deadline() {
    let agent = HostileAgent::start(Behaviour::Busy { retry_after: 1 });
    let c = client_for(&agent, Duration::from_secs(2));
    let req = ExecRequest::new("true").timeout_secs(1);
    // Deadline: 1 s + 2 s.
    let (r, took) = bounded(Duration::from_secs(5), c.exec(&req)).await;
    let err = r.unwrap_err();
    assert!(err.is_busy() && err.is_timeout(), "{err:?}");
    assert!(
        took <= Duration::from_secs(3) + Duration::from_millis(500),
        "{took:?}"
    );
    assert!(
        err.to_string()
            .starts_with("the agent was still busy after"),
        "{err}"
    );
    // A `Retry-After` longer than what is left is not slept at all.
    let agent = HostileAgent::start(Behaviour::Busy { retry_after: 10 });
    let c = client_for(&agent, Duration::from_secs(2));
    let (r, took) = bounded(Duration::from_secs(5), c.exec(&req)).await;
    assert!(r.unwrap_err().is_busy());
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(agent.requests.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// Regression: hyper drops interim responses silently, so a flood of
/// `100 Continue` kept a core busy until the timeout; then the call
/// ended at its next poll, after 13 to 1 453 heads. Now the connection
/// stops at the head past the limit, whatever the runtime is doing:
/// exactly one more than `MAX_INTERIM_RESPONSES`, with an error that
/// says so.
#[tokio::test]
async fn a_continue_flood_is_cut_at_exactly_the_limit() {
    use lab_agent_client::client::MAX_INTERIM_RESPONSES;
    let agent = HostileAgent::start(Behaviour::ContinueFlood);
    let c = client_for(&agent, Duration::from_secs(30));
    // Busy work beside the calls, on this same (current-thread) runtime:
    // the call is not polled while it runs, as on a backend grading a
    // fleet.
    let spinner = tokio::spawn(async {
        loop {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(20) {}
            tokio::task::yield_now().await;
        }
    });
    for _ in 0..5 {
        let (r, took) = bounded(Duration::from_secs(32), c.exec(&ExecRequest::new("true"))).await;
        let err = r.unwrap_err();
        assert!(
            matches!(err, Error::Interim { count, .. } if count == MAX_INTERIM_RESPONSES + 1),
            "{err:?} after {took:?}"
        );
        assert!(err.is_protocol_error() && err.is_hostile(), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "the agent sent 9 interim (1xx) responses and no answer when posting to {}/v1/exec (a call reads at most 8)",
                agent.url()
            )
        );
    }
    spinner.abort();
    let (r, _) = bounded(Duration::from_secs(32), c.ready()).await;
    let err = r.unwrap_err();
    assert!(matches!(err, Error::Interim { count: 9, .. }), "{err:?}");
    // A wait ends on it at once: retrying would meet the same flood.
    let (r, _) = bounded(Duration::from_secs(32), c.wait_ready(in_secs(25))).await;
    assert!(matches!(r.unwrap_err(), Error::Interim { count: 9, .. }));
}

/// Regression: a 2 GiB `Content-Length` was waited for (the body
/// trickling in) until the timeout; now it is refused from the head.
#[tokio::test]
async fn an_announced_huge_body_is_refused_unread() {
    let agent = HostileAgent::start(Behaviour::HugeContentLength);
    let c = client_for(&agent, Duration::from_secs(30));
    let (r, _) = bounded(Duration::from_secs(10), c.exec(&ExecRequest::new("true"))).await;
    let err = r.unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooLarge {
                declared: Some(2147483648),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("2147483648 bytes announced"),
        "{err}"
    );
    let (r, _) = bounded(Duration::from_secs(10), c.ready()).await;
    assert!(r.unwrap_err().is_too_large());
    let (r, _) = bounded(Duration::from_secs(10), c.info()).await;
    assert!(r.unwrap_err().is_too_large());
}

/// Regression: a check with the default 1 MiB cap accepted 8 MB of
/// stdout (the body limit is 12 × the cap, for escaping); now each
/// stream is held to what the cap allows once decoded, and the body to
/// 12 × the cap before.
#[tokio::test]
async fn output_past_the_request_cap_is_refused() {
    let agent = HostileAgent::start(Behaviour::Oversized {
        stdout_bytes: 8 << 20,
    });
    let c = client_for(&agent, Duration::from_secs(30));
    let (r, _) = bounded(Duration::from_secs(20), c.exec(&ExecRequest::new("true"))).await;
    let err = r.unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("8388608 bytes of stdout, more than `max_output_bytes` 1048576 allows"),
        "{err}"
    );
    let small = ExecRequest::new("true").max_output_bytes(1000);
    let (r, _) = bounded(Duration::from_secs(20), c.exec(&small)).await;
    let err = r.unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { limit, .. } if limit == lab_agent_client::client::exec_response_limit(1000)),
        "{err:?}"
    );
}

/// Regression: `exit_code: -1` and a signal of 2147483647 read as
/// success in `labctl exec` (clamped, or `128 + sig` wrapped).
#[tokio::test]
async fn exit_statuses_out_of_range_are_protocol_errors() {
    for (exit_code, signal, want) in [
        (Some(-1), None, "exit code -1 is outside 0..=255"),
        (Some(256), None, "exit code 256 is outside 0..=255"),
        (
            None,
            Some(2147483647),
            "signal 2147483647 is outside 1..=64",
        ),
        (None, Some(0), "signal 0 is outside 1..=64"),
    ] {
        let agent = HostileAgent::start(Behaviour::Exit { exit_code, signal });
        let c = client_for(&agent, Duration::from_secs(10));
        let (r, _) = bounded(Duration::from_secs(15), c.exec(&ExecRequest::new("true"))).await;
        let err = r.unwrap_err();
        assert!(err.is_protocol_error(), "{exit_code:?} {signal:?}: {err:?}");
        assert!(err.to_string().contains(want), "{err}");
    }
    let agent = HostileAgent::start(Behaviour::Exit {
        exit_code: Some(255),
        signal: None,
    });
    let c = client_for(&agent, Duration::from_secs(10));
    let r = c.exec(&ExecRequest::new("true")).await.unwrap();
    assert_eq!(r.shell_status(), 255);
}

/// The guest's text reaches messages escaped, and the raw value stays
/// in the error's fields for a program.
#[tokio::test]
async fn guest_text_in_errors_is_escaped() {
    let agent = HostileAgent::start(Behaviour::Escapes);
    let c = client_for(&agent, Duration::from_secs(10));
    let (r, _) = bounded(Duration::from_secs(15), c.wait_ready(in_secs(10))).await;
    let err = r.unwrap_err();
    assert!(err.is_setup_failed(), "{err:?}");
    no_controls(&err.to_string());
    assert!(err.to_string().contains("\\x1b]0;pwned\\x07"), "{err}");
    let ready = err.ready_response().unwrap();
    assert!(ready.reason.as_deref().unwrap().contains(ESCAPES));

    let (r, _) = bounded(Duration::from_secs(15), c.exec(&ExecRequest::new("true"))).await;
    let err = r.unwrap_err();
    no_controls(&err.to_string());
    assert!(
        matches!(&err, Error::Status { message, .. } if message == ESCAPES),
        "{err:?}"
    );

    let agent = HostileAgent::start(Behaviour::NonJsonError);
    let c = client_for(&agent, Duration::from_secs(10));
    let (r, _) = bounded(Duration::from_secs(15), c.exec(&ExecRequest::new("true"))).await;
    let err = r.unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(500));
    no_controls(&err.to_string());
    assert!(err.to_string().contains("<html>\\x1b]0;pwned"), "{err}");
}

/// Regression: a 503 with a state this client does not know read as
/// "the agent never answered"; it is the agent's answer, and a wrong one.
#[tokio::test]
async fn an_unknown_state_is_a_malformed_answer() {
    let agent = HostileAgent::start(Behaviour::UnknownState);
    let c = client_for(&agent, Duration::from_secs(10));
    let (r, took) = bounded(Duration::from_secs(15), c.wait_ready(in_secs(10))).await;
    let err = r.unwrap_err();
    assert!(err.is_malformed() && !err.is_unreachable(), "{err:?}");
    assert!(took < Duration::from_secs(5), "ended at once: {took:?}");
}

/// Regression: a grade sent every check to an agent that stayed busy
/// (or answered as no lab-agent does), each costing its own deadline
/// (`labctl grade hello-lab` took 800 s against a 429-forever agent);
/// now the first such answer ends the sending, the rest are errors.
#[tokio::test]
async fn a_grade_stops_at_the_first_hostile_answer() {
    let lab_dir = TempDir::new("hostile-grade");
    lab_dir.write(
        "lab.toml",
        "name = \"l\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\ntimeout_secs = 1\n\
         [[checks]]\nname = \"b\"\nrun = \"true\"\ntimeout_secs = 1\n\
         [[checks]]\nname = \"c\"\nrun = \"true\"\ntimeout_secs = 1\n",
        0o644,
    );
    let lab = Lab::load(&lab_dir.path).unwrap();
    for b in [
        Behaviour::Busy { retry_after: 10 },
        Behaviour::Exit {
            exit_code: Some(-1),
            signal: None,
        },
    ] {
        let agent = HostileAgent::start(b.clone());
        let c = client_for(&agent, Duration::from_secs(2));
        // The check loop itself: `grade` would stop at a busy
        // agent's `/v1/ready` already, before any check.
        let (r, _) = bounded(Duration::from_secs(10), c.grade_unchecked(&lab, "/opt/lab")).await;
        let report = r.unwrap();
        assert_eq!(report.errors, 3, "{b:?}: {report:?}");
        assert_eq!(
            agent.requests.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "{b:?}"
        );
        let why = report.checks[1].error.as_deref().unwrap();
        assert!(
            why.starts_with("not run: the agent's answer to check `a`"),
            "{why}"
        );
    }
}

/// Regression: a relative `lab_dir` from `/v1/info` was used as every
/// check's `LAB_DIR`, although `--lab-dir` refuses one.
#[tokio::test]
async fn a_relative_lab_dir_is_refused() {
    let agent = HostileAgent::start(Behaviour::RelativeLabDir);
    let c = client_for(&agent, Duration::from_secs(10));
    let err = c.info().await.unwrap_err();
    assert!(err.is_protocol_error(), "{err:?}");
    assert!(
        err.to_string()
            .contains("`opt/lab` is not an absolute path"),
        "{err}"
    );
}
