//! `lab-agent-client` against the real `lab-agent` binary on loopback.

use lab_agent_client::{CheckStatus, Client, Error, Progress, wait_all};
use lab_agent_proto::exec::Profile;
use lab_agent_proto::lab::Lab;
use lab_agent_proto::{ExecRequest, ReadyState};
use lab_agent_tests::local::{Agent, AgentOptions, ReservedPort, TempDir, is_root, new_token};
use std::time::{Duration, Instant};

fn client(agent: &Agent) -> Client {
    Client::new(&agent.url(), &agent.token).unwrap()
}

fn in_secs(s: u64) -> Instant {
    Instant::now() + Duration::from_secs(s)
}

/// `toml` as the `lab.toml` in `lab_dir`, loaded, and a ready agent (with
/// a client) to grade it on.
async fn lab_on_a_ready_agent(lab_dir: &TempDir, toml: &str) -> (Lab, Agent, Client) {
    lab_dir.write("lab.toml", toml, 0o644);
    let lab = Lab::load(&lab_dir.path).unwrap();
    let agent = Agent::start(AgentOptions::default());
    let c = client(&agent);
    c.wait_ready(in_secs(60)).await.unwrap();
    (lab, agent, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_rides_out_an_agent_that_starts_late() {
    let port = ReservedPort::new();
    let token = new_token();
    let c = Client::new(&port.url(), &token).unwrap();
    // The agent starts once the waiter has reported the closed port.
    let (refused_tx, refused_rx) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn(async move {
        let mut refused_tx = Some(refused_tx);
        let mut seen: Vec<Progress> = Vec::new();
        let r = c
            .wait_ready_with(in_secs(120), |p| {
                if p.state.is_none() {
                    if let Some(tx) = refused_tx.take() {
                        let _ = tx.send(());
                    }
                }
                seen.push(p.clone());
            })
            .await;
        (r, seen)
    });
    refused_rx
        .await
        .expect("the waiter reported the closed port");
    let opts = AgentOptions::default()
        .listen(port.addr())
        .token(token)
        // Longer than the client's largest backoff, so it sees `setting_up`.
        .setup("echo preparing; sleep 4; echo prepared");
    let agent = tokio::task::spawn_blocking(move || Agent::start(opts))
        .await
        .unwrap();
    let (result, seen) = waiter.await.unwrap();
    let ready = result.unwrap_or_else(|e| panic!("{e}\n{}", agent.log()));
    assert_eq!(ready.state, ReadyState::Ready);
    assert!(
        seen.iter().any(|p| p.state.is_none()),
        "the closed port was reported: {seen:?}"
    );
    assert!(
        seen.iter().any(|p| p.state == Some(ReadyState::SettingUp)),
        "setup was seen running: {seen:?}"
    );
    assert_eq!(seen.last().unwrap().state, Some(ReadyState::Ready));
}

#[tokio::test]
async fn a_failed_setup_ends_the_wait_at_once_with_its_log() {
    let agent = Agent::start(
        AgentOptions::default().setup("echo 'step 1 of 2'; echo 'boom: disk full' >&2; exit 7"),
    );
    let err = client(&agent).wait_ready(in_secs(300)).await.unwrap_err();
    assert!(err.is_setup_failed(), "{err:?}");
    assert!(!err.is_timeout() && !err.is_unreachable());
    let r = err.ready_response().unwrap();
    assert_eq!(r.state, ReadyState::Failed);
    assert_eq!(r.setup.exit_code, Some(7));
    let tail = r.setup.log_tail.as_deref().unwrap_or_default();
    assert!(
        tail.contains("boom: disk full") && tail.contains("step 1 of 2"),
        "{tail:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&agent.url()), "{msg}");
    assert!(msg.contains('7'), "{msg}");
}

#[tokio::test]
async fn a_wrong_token_fails_fast() {
    let agent = Agent::start(AgentOptions::default());
    let c = Client::new(&agent.url(), "not-the-token-not-the-token-not-the-token").unwrap();
    let err = c.wait_ready(in_secs(300)).await.unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");
    assert!(!err.is_timeout() && !err.is_unreachable());
    assert_eq!(err.status().map(|s| s.as_u16()), Some(401));
    assert!(
        err.to_string()
            .starts_with(&format!("status 401 when getting {}/v1/ready", agent.url())),
        "{err}"
    );
    assert!(err.hint().unwrap().contains("token"));
    let err = c.exec(&ExecRequest::new("true")).await.unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");
}

#[tokio::test]
async fn exec_passes_status_output_and_signals_through() {
    let agent = Agent::start(AgentOptions::default());
    let c = client(&agent);
    c.wait_ready(in_secs(60)).await.unwrap();

    let r = c
        .exec(&ExecRequest::new("echo out; echo err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!((r.exit_code, r.signal, r.timed_out), (Some(3), None, false));
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("out\n", "err\n"));

    let r = c.exec(&ExecRequest::new("kill -TERM $$")).await.unwrap();
    assert_eq!((r.exit_code, r.signal), (None, Some(15)));
    assert_eq!(r.shell_status(), 143);

    let r = c
        .exec(
            &ExecRequest::new("echo \"$GREETING from $PWD\"")
                .env("GREETING", "hi")
                .cwd("/tmp"),
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, "hi from /tmp\n");

    let r = c
        .exec(&ExecRequest::new("sleep 30").timeout_secs(1))
        .await
        .unwrap();
    assert!(r.timed_out && !r.success(), "{r:?}");

    let err = c
        .exec(&ExecRequest::new("true").user("no-such-user-here"))
        .await
        .unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(400), "{err:?}");
    assert!(!err.is_unreachable());

    // Keep-alive: every request above went over one connection.
    assert_eq!(c.connections_opened(), 1);
}

#[tokio::test]
async fn info_names_the_agent() {
    let agent = Agent::start(AgentOptions::default());
    let info = client(&agent).info().await.unwrap();
    assert!(!info.version.is_empty());
    assert!(info.agent_uptime_secs >= 0.0);
}

#[tokio::test]
async fn grading_reports_passing_and_failing_checks_in_order() {
    let lab_dir = TempDir::new("gradelab");
    lab_dir.write("files/greeting", "hello\n", 0o644);
    let toml = r#"
name = "grading-test"
[files]
source = "files"
[[checks]]
name = "greeting exists"
run = 'test -f "$LAB_DIR/greeting" && cat "$LAB_DIR/greeting"'
[[checks]]
name = "fails with output"
run = "echo some output; echo why >&2; exit 3"
fail_message = "Do the thing."
[[checks]]
name = "runs as nobody"
run = "id -un"
user = "nobody"
[[checks]]
name = "no such user"
run = "true"
user = "no-such-user-here"
fail_message = "never runs"
[[checks]]
name = "too slow"
run = "sleep 30"
timeout_secs = 1
"#;
    let (lab, _agent, c) = lab_on_a_ready_agent(&lab_dir, toml).await;
    let staged = lab_dir.join("files");
    let mut order = Vec::new();
    let report = c
        .grade_with(&lab, staged.to_str().unwrap(), |r| {
            order.push(r.name.clone())
        })
        .await
        .unwrap();

    assert_eq!(report.lab, "grading-test");
    assert_eq!(report.total, 5);
    let names: Vec<_> = report.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "greeting exists",
            "fails with output",
            "runs as nobody",
            "no such user",
            "too slow"
        ]
    );
    assert_eq!(order, names);

    let [greeting, fails, nobody, no_user, slow] = &report.checks[..] else {
        unreachable!()
    };
    assert!(greeting.passed, "{greeting:?}");
    assert_eq!(
        (greeting.exit_code, greeting.stdout.as_str()),
        (Some(0), "hello\n")
    );
    assert_eq!(greeting.fail_message, None);

    assert!(!fails.passed);
    assert_eq!(fails.exit_code, Some(3));
    assert_eq!(
        (fails.stdout.as_str(), fails.stderr.as_str()),
        ("some output\n", "why\n")
    );
    assert_eq!(fails.fail_message.as_deref(), Some("Do the thing."));

    if is_root() {
        assert!(nobody.passed, "{nobody:?}");
        assert_eq!(nobody.stdout, "nobody\n");
    }

    // An unknown user is the lab's mistake: an error, not a failure, and
    // the student-facing message is not attached to it.
    assert!(!no_user.passed && no_user.exit_code.is_none());
    assert_eq!(no_user.status, CheckStatus::Error, "{no_user:?}");
    assert!(
        no_user
            .error
            .as_deref()
            .is_some_and(|e| e.contains("no-such-user-here")),
        "{no_user:?}"
    );
    assert_eq!(no_user.fail_message, None);

    assert!(!slow.passed && slow.timed_out, "{slow:?}");
    assert_eq!(slow.status, CheckStatus::Failed);

    assert_eq!(report.passed, if is_root() { 2 } else { 1 });
    assert_eq!(report.errors, 1);
    assert_eq!(report.passed + report.failed + report.errors, report.total);
    assert!(!report.all_passed() && report.has_errors());
}

/// The agent closes a kept-alive connection that sends no request head for
/// 10 s (`HEADER_READ_TIMEOUT`). A grading run after such a pause goes
/// over a fresh connection: the pool drops connections idle longer than
/// `POOL_IDLE_TIMEOUT`, so no check is written into one the agent is
/// closing (a POST lost that way cannot be retried and used to stop the
/// whole run with `Error::Transport`).
#[tokio::test]
async fn grading_again_after_the_agents_idle_close() {
    let lab_dir = TempDir::new("idlelab");
    let toml = r#"
name = "idle-test"
[[checks]]
name = "one"
run = "true"
[[checks]]
name = "two"
run = "echo two"
"#;
    let (lab, agent, c) = lab_on_a_ready_agent(&lab_dir, toml).await;
    let staged = lab_dir.path.to_str().unwrap().to_owned();
    let report = c.grade(&lab, &staged).await.unwrap();
    assert!(report.all_passed(), "{report:?}");
    assert_eq!(c.connections_opened(), 1);

    // Idle past the agent's close (the pause is what is tested).
    assert!(lab_agent_client::client::POOL_IDLE_TIMEOUT < Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(10_500)).await;

    let report = c
        .grade(&lab, &staged)
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", agent.log()));
    assert!(report.all_passed(), "{report:?}");
    assert_eq!(
        c.connections_opened(),
        2,
        "one fresh connection after the pause"
    );
}

/// An agent that restarts (a reboot, a crash, `systemctl restart`) leaves
/// the backend's kept-alive connections dead in its pool. Here the agent is
/// killed and started again on the same port between calls, 50 times, with
/// one client throughout (as `vm_lifecycle/runaway.rs` did when its exec
/// failed with `Transport(IncompleteMessage)`): every read after a restart
/// is answered, and an exec is answered or (its connection died under it)
/// fails with the distinct `AgentWentAway`, never a bare transport error.
/// The agent restarts while this (current-thread) runtime is blocked, so
/// the pooled connections see the close only when the next call runs.
#[tokio::test]
async fn an_agent_restarted_between_calls_is_not_a_broken_call() {
    const RESTARTS: usize = 50;
    let port = ReservedPort::new();
    let token = new_token();
    let opts = AgentOptions::default()
        .listen(port.addr())
        .token(token.clone());
    let c = Client::new(&port.url(), &token).unwrap();
    let within = Duration::from_secs(20);
    let mut agent = Agent::start(opts.clone());
    // No profile: root's login files here take ~1 s a shell.
    let exec = ExecRequest::new("true").profile(Profile::None);
    let (mut answered, mut went_away) = (0, 0);
    for round in 0..RESTARTS {
        let ready = tokio::time::timeout(within, c.ready())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no readiness answer within 20 s"));
        if let Err(e) = ready {
            panic!(
                "round {round}: ready() after a restart: {e:?}\n{}",
                agent.log()
            );
        }
        let info = tokio::time::timeout(within, c.info()).await.unwrap();
        if let Err(e) = info {
            panic!(
                "round {round}: info() after a restart: {e:?}\n{}",
                agent.log()
            );
        }
        // Three execs, so more than one connection may be pooled.
        for _ in 0..3 {
            match tokio::time::timeout(within, c.exec(&exec)).await.unwrap() {
                Ok(r) => {
                    assert_eq!(r.exit_code, Some(0), "round {round}: {r:?}");
                    answered += 1;
                }
                Err(e) if e.is_agent_went_away() => went_away += 1,
                Err(e) => panic!(
                    "round {round}: exec after a restart: {e:?}\n{}",
                    agent.log()
                ),
            }
        }
        // Killed and waited for, then started on the same port.
        drop(agent);
        agent = Agent::start(opts.clone());
    }
    eprintln!(
        "{RESTARTS} restarts: {answered} execs answered, {went_away} met a dead connection; \
         {} connections",
        c.connections_opened()
    );
    assert!(answered > 0);
}

/// The agent dies while an exec it started runs, on a kept-alive
/// connection: the call says the command may have started, and does not
/// send it again.
#[tokio::test]
async fn an_exec_the_agent_died_under_may_have_started() {
    let work = TempDir::new("wentaway");
    let marker = work.join("started");
    let mut agent = Agent::start(AgentOptions::default());
    let c = client(&agent);
    c.exec(&ExecRequest::new("true")).await.unwrap();
    // The first exec's connection goes back to the pool from a task of
    // hyper-util's, ready to run now; let it (see the client's unit tests).
    tokio::time::sleep(Duration::from_millis(10)).await;
    let cmd = format!("echo $$ >>{m}; sleep 5", m = marker.display());
    let running = tokio::spawn({
        let c = c.clone();
        async move { c.exec(&ExecRequest::new(&cmd)).await }
    });
    let deadline = in_secs(20);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "the command never started\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent.kill();
    let err = running.await.unwrap().unwrap_err();
    assert_eq!(
        c.connections_opened(),
        1,
        "the exec went over the kept-alive connection"
    );
    assert!(err.is_agent_went_away() && err.is_unreachable(), "{err:?}");
    assert_eq!(err.may_have_started(), Some(true), "{err}");
    assert!(err.to_string().contains("may have started"), "{err}");
    let started = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(started.lines().count(), 1, "run once: {started:?}");
}

#[tokio::test]
async fn waiting_on_several_vms_reports_each_one() {
    let good = Agent::start(AgentOptions::default().setup("echo ok"));
    let bad = Agent::start(AgentOptions::default().setup("echo 'cannot fetch image' >&2; exit 5"));
    let nothing_listens = ReservedPort::new();
    let unreachable = nothing_listens.url();
    let clients = vec![
        client(&good),
        client(&bad),
        Client::new(&unreachable, "whatever-token-whatever-token-whatever").unwrap(),
    ];
    let mut progressed = [false; 3];
    // One deadline for all three: the one nothing listens on uses it up,
    // and the good one's setup (a root login shell, ~1 s on a loaded
    // machine, more under load) must be done well within it.
    let outcomes = wait_all(&clients, in_secs(15), |i, _| progressed[i] = true).await;
    assert_eq!(outcomes.len(), 3);
    assert_eq!(outcomes[0].url, good.url());
    assert_eq!(
        outcomes[0].result.as_ref().unwrap().state,
        ReadyState::Ready
    );
    let err = outcomes[1].result.as_ref().unwrap_err();
    assert!(err.is_setup_failed(), "{err:?}");
    assert_eq!(err.ready_response().unwrap().setup.exit_code, Some(5));
    let err: &Error = outcomes[2].result.as_ref().unwrap_err();
    assert!(err.is_timeout() && err.is_unreachable(), "{err:?}");
    assert_eq!(progressed, [true; 3]);
}

/// A busy agent (429 + `Retry-After`) has not started the command: `exec`
/// waits and sends it again, so both commands run.
#[tokio::test]
async fn exec_sits_out_a_busy_agent() {
    let agent = Agent::start(AgentOptions {
        extra_args: vec!["--max-execs".into(), "1".into()],
        ..AgentOptions::default()
    });
    let c = client(&agent);
    c.wait_ready(in_secs(60)).await.unwrap();
    let (ra, rb) = (
        ExecRequest::new("sleep 1; echo a"),
        ExecRequest::new("sleep 1; echo b"),
    );
    let (a, b) = tokio::join!(c.exec(&ra), c.exec(&rb));
    assert_eq!(a.unwrap().stdout, "a\n");
    assert_eq!(b.unwrap().stdout, "b\n");
    assert!(
        agent.log().contains("429"),
        "one was refused first:\n{}",
        agent.log()
    );
}

/// Hostile agents: what a student who is root in the VM can answer on the
/// agent's port (`lab_agent_tests::hostile`). Each call must end by its
/// deadline, hold the answer to what the request allows, and say what the
/// guest did, with the guest's text escaped in its message.
mod hostile {
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
    async fn bounded<T>(
        bound: Duration,
        call: impl std::future::Future<Output = T>,
    ) -> (T, Duration) {
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
            let (r, took) =
                bounded(Duration::from_secs(32), c.exec(&ExecRequest::new("true"))).await;
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
            let (r, _) =
                bounded(Duration::from_secs(10), c.grade_unchecked(&lab, "/opt/lab")).await;
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
}

/// `grade_all`: every VM graded, in order, at most `concurrency` at once;
/// hostile VMs in the fleet end in their own errors and change no honest
/// VM's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grade_all_grades_each_vm_and_a_hostile_one_costs_only_itself() {
    use lab_agent_tests::hostile::{Behaviour, HostileAgent};
    let lab_dir = TempDir::new("grade-all");
    lab_dir.write(
        "lab.toml",
        // The check's own timeout is generous: root's login shell reads
        // this machine's dotfiles (~1 s alone, more under load).
        "name = \"l\"\n[[checks]]\nname = \"echo\"\nrun = \"echo hi\"\ntimeout_secs = 30\n",
        0o644,
    );
    let lab = Lab::load(&lab_dir.path).unwrap();
    let honest: Vec<Agent> = (0..3)
        .map(|_| Agent::start(AgentOptions::default()))
        .collect();
    let hostile: Vec<HostileAgent> = [
        Behaviour::ContinueFlood,
        Behaviour::RelativeLabDir,
        Behaviour::HugeContentLength,
        Behaviour::Exit {
            exit_code: Some(-1),
            signal: None,
        },
    ]
    .into_iter()
    .map(HostileAgent::start)
    .collect();
    let mut clients = Vec::new();
    for a in &honest {
        let c = client(a);
        c.wait_ready(in_secs(60)).await.unwrap();
        clients.push(c);
    }
    for h in &hostile {
        clients.push(
            Client::builder()
                .request_timeout(Duration::from_secs(5))
                .build(&h.url(), "token")
                .unwrap(),
        );
    }
    let start = Instant::now();
    let out = lab_agent_client::grade_all(&clients, &lab, 2).await;
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out.len(), clients.len());
    for (o, c) in out.iter().zip(&clients) {
        assert_eq!(o.url, c.url());
    }
    for o in &out[..3] {
        let r = o.result.as_ref().unwrap();
        assert!(r.all_passed(), "{r:?}");
        assert_eq!(r.checks[0].stdout, "hi\n");
    }
    // The flood and the relative lab_dir fail before grading; the huge
    // body and the lying exit code make the check an error.
    assert!(
        matches!(out[3].result, Err(Error::Interim { .. })),
        "{:?}",
        out[3].result
    );
    assert!(out[4].result.as_ref().unwrap_err().is_protocol_error());
    assert!(
        out[5].result.as_ref().unwrap_err().is_too_large(),
        "{:?}",
        out[5].result
    );
    let r = out[6].result.as_ref().unwrap();
    assert!(r.has_errors(), "{r:?}");
    assert!(
        r.checks[0]
            .error
            .as_deref()
            .unwrap()
            .contains("exit code -1"),
        "{r:?}"
    );
}

/// A [`lab_agent_client::Dialer`] that reaches the agent wherever the URL
/// points (here a name that resolves nowhere), counting its calls.
struct ToAgent {
    addr: std::net::SocketAddr,
    calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl lab_agent_client::Dialer for ToAgent {
    fn dial(&self, host: &str, port: u16) -> lab_agent_client::Dialing {
        assert_eq!((host, port), ("agent.invalid", 8899));
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let addr = self.addr;
        Box::pin(tokio::net::TcpStream::connect(addr))
    }
}

#[tokio::test]
async fn a_dialer_opens_the_connections() {
    let agent = Agent::start(AgentOptions::default());
    let addr: std::net::SocketAddr = agent.url().trim_start_matches("http://").parse().unwrap();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let c = Client::builder()
        .dialer(std::sync::Arc::new(ToAgent {
            addr,
            calls: calls.clone(),
        }))
        .build("http://agent.invalid:8899", &agent.token)
        .unwrap();
    c.wait_ready(in_secs(60)).await.unwrap();
    let r = c.exec(&ExecRequest::new("echo hi")).await.unwrap();
    assert_eq!(r.stdout, "hi\n");
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::Relaxed) as u64,
        c.connections_opened()
    );
    assert!(c.connections_opened() >= 1);
}

/// Streamed exec: events as the command writes, the result last, bounded
/// like every call; the setup log followed from an offset.
mod stream {
    use super::*;
    use lab_agent_proto::{Profile, SetupState, StreamEvent};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn events_come_while_the_command_runs_and_the_result_last() {
        let agent = Agent::start(AgentOptions::default());
        let c = client(&agent);
        c.wait_ready(in_secs(60)).await.unwrap();
        // The command waits, after its first line, for a file the test makes
        // only once it has that line: the event came while the command ran,
        // whatever the machine's speed. No profile: a login shell's own
        // noise (this machine's ~/.bashrc can print pyenv's rehash races to
        // stderr) is not what this test is about.
        let gate =
            std::env::temp_dir().join(format!("lab-agent-stream-gate-{}", std::process::id()));
        let _ = std::fs::remove_file(&gate);
        let mut s = c
            .exec_stream(
                &ExecRequest::new(format!(
                    "echo 1; while [ ! -e '{}' ]; do sleep 0.02; done; echo 2; echo 3; echo e >&2; exit 4",
                    gate.display()
                ))
                .timeout_secs(60)
                .profile(Profile::None),
            )
            .await
            .unwrap();
        let first = s.next_event().await.unwrap().unwrap();
        assert_eq!(first, StreamEvent::Stdout("1\n".into()));
        std::fs::write(&gate, "").unwrap();
        let r = s.collect().await.unwrap();
        let _ = std::fs::remove_file(&gate);
        assert!(!r.timed_out, "{r:?}");
        assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("2\n3\n", "e\n"));
        assert_eq!(r.exit_code, Some(4));

        // Timed out: what it printed, then the result.
        let r = c
            .exec_stream(&ExecRequest::new("echo a; sleep 30").timeout_secs(1))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert!(r.timed_out && r.stdout == "a\n", "{r:?}");

        // Capped: the bytes and the flag.
        let r = c
            .exec_stream(&ExecRequest::new("seq 100000").max_output_bytes(1000))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(r.stdout.len(), 1000);
        assert!(r.stdout_truncated && !r.stderr_truncated);

        // Refused before it starts: the call's error, as for exec.
        let err = c
            .exec_stream(&ExecRequest::new("true").user("no-such-user-here"))
            .await
            .unwrap_err();
        assert_eq!(err.status().map(|s| s.as_u16()), Some(400), "{err:?}");
    }

    /// A stand-in agent that answers 200 with one line and then ends the
    /// stream (or closes it mid-line): never a success.
    async fn cut_short(body: &'static str) -> Error {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 65536];
            let _ = s.read(&mut buf).await;
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";
            let chunk = format!("{:x}\r\n{body}\r\n", body.len());
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(chunk.as_bytes()).await;
            let _ = s.write_all(b"0\r\n\r\n").await;
        });
        let c = Client::new(&url, &new_token()).unwrap();
        let mut s = c.exec_stream(&ExecRequest::new("x")).await.unwrap();
        loop {
            match s.next_event().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("a stream without a result ended as a success"),
                Err(e) => return e,
            }
        }
    }

    #[tokio::test]
    async fn a_stream_without_its_result_is_a_transport_error() {
        let err = cut_short("{\"stdout\":\"partial\\n\"}\n").await;
        assert!(matches!(err, Error::Transport { .. }), "{err:?}");
        assert!(format!("{err:#}").contains("connection lost"), "{err}");
        let err = cut_short("{\"stdout\":\"no newline\"}").await;
        assert!(matches!(err, Error::Transport { .. }), "{err:?}");
        let err = cut_short("{\"exit_code\":0}\n").await;
        assert!(matches!(err, Error::Decode { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn the_setup_log_is_followed_from_an_offset() {
        let agent = Agent::start(
            AgentOptions::default().setup("echo first; sleep 2; echo second; sleep 1; echo third"),
        );
        let c = client(&agent);
        let mut offset = 0;
        let mut text = String::new();
        let mut states = Vec::new();
        let deadline = in_secs(60);
        loop {
            assert!(Instant::now() < deadline, "still following: {text:?}");
            let log = c.setup_log(offset, 10).await.unwrap();
            assert!(!log.restarted);
            assert_eq!(log.next_offset, offset + log.bytes.len() as u64);
            offset = log.next_offset;
            text.push_str(&String::from_utf8_lossy(&log.bytes));
            states.push(log.state);
            if matches!(log.state, SetupState::Succeeded | SetupState::Failed)
                && log.bytes.is_empty()
            {
                break;
            }
        }
        assert!(
            text.contains("first\n") && text.ends_with("second\nthird\n"),
            "{text:?}"
        );
        assert!(states.contains(&SetupState::Running), "{states:?}");
        assert_eq!(states.last(), Some(&SetupState::Succeeded));
        // From the middle.
        let log = c.setup_log(offset - 6, 0).await.unwrap();
        assert_eq!(&log.bytes[..], b"third\n");
        // Past the end: from 0 again, said so.
        let log = c.setup_log(offset + 100, 0).await.unwrap();
        assert!(log.restarted && log.next_offset == offset, "{log:?}");
        assert!(c.setup_log(0, 61).await.is_err());
    }
}

/// The instance id an agent reports, checked for its shape.
async fn instance_of(c: &Client) -> lab_agent_proto::lifecycle::Instance {
    let i = c
        .ready()
        .await
        .unwrap()
        .instance
        .expect("the agent names its instance");
    assert!(lab_agent_proto::lifecycle::is_instance_id(&i.id), "{i:?}");
    i
}

/// A VM reset onto a fresh disk: the agent stopped, its `instance.json`
/// gone (the containerDisk's write layer), started again on the same port
/// with the same state dir. A client pinned to the instance before gets
/// `InstanceChanged` from every kind of answer; a plain restart (a reboot,
/// `instance.json` kept) is the same instance and passes the pin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_client_tells_a_reset_vm_from_a_rebooted_one() {
    let disk = TempDir::new("pinned-disk");
    let state = disk.join("state");
    let port = ReservedPort::new();
    let token = new_token();
    let opts = AgentOptions::default()
        .listen(port.addr())
        .token(token.clone())
        .state_dir(&state);
    let mut agent = Agent::start(opts.clone());
    let c = client(&agent);
    c.wait_ready(in_secs(60)).await.unwrap();
    let before = instance_of(&c).await;
    let pinned = Client::builder()
        .instance(&before.id)
        .build(&port.url(), &token)
        .unwrap();
    assert_eq!(pinned.ready().await.unwrap().state, ReadyState::Ready);
    assert_eq!(pinned.info().await.unwrap().instance.unwrap().id, before.id);
    let r = pinned
        .exec(&ExecRequest::new("true").profile(Profile::None))
        .await
        .unwrap();
    assert_eq!(r.instance_id.as_deref(), Some(before.id.as_str()));

    // A reboot: same disk, same instance, one boot more.
    agent.kill();
    agent = Agent::start(opts.clone());
    let pinned = Client::new(&port.url(), &token)
        .unwrap()
        .pinned(&before.id)
        .unwrap();
    pinned.wait_ready(in_secs(60)).await.unwrap();
    assert_eq!(instance_of(&pinned).await.id, before.id);

    // A reset: the instance file is gone with the disk's write layer.
    agent.kill();
    std::fs::remove_file(state.join("instance.json")).unwrap();
    let agent = Agent::start(opts);
    let plain = client(&agent);
    plain.wait_ready(in_secs(60)).await.unwrap();
    let after = instance_of(&plain).await;
    assert_ne!(after.id, before.id);

    // A fresh pinned client for each call: no connection of the agent
    // that was is left in its pool to blur what is tested.
    let fresh = || {
        Client::new(&port.url(), &token)
            .unwrap()
            .pinned(&before.id)
            .unwrap()
    };
    let expect_changed = |e: Error, what: &str| {
        assert!(e.is_instance_changed(), "{what}: {e:?}");
        assert!(!e.is_unreachable() && !e.is_timeout(), "{what}: {e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("was reset (instance {}", after.id))
                && msg.contains(&format!("is not the instance {} graded before", before.id))
                && msg.ends_with("the student's work inside it is gone"),
            "{what}: {msg}"
        );
        e
    };
    let e = expect_changed(fresh().ready().await.unwrap_err(), "ready");
    assert!(
        e.to_string()
            .contains(&format!("first booted at {}", after.first_boot_at)),
        "{e}"
    );
    expect_changed(fresh().info().await.unwrap_err(), "info");
    // A waiter stops at once: waiting longer cannot bring the old VM back.
    expect_changed(
        fresh().wait_ready(in_secs(300)).await.unwrap_err(),
        "wait_ready",
    );
    let work = TempDir::new("pinned-exec");
    let marker = work.join("ran");
    let e = fresh()
        .exec(&ExecRequest::new(format!("touch {}", marker.display())).profile(Profile::None))
        .await
        .unwrap_err();
    expect_changed(e, "exec");
    // A lone exec is checked on its answer: it ran (grade asks first).
    assert!(marker.exists());
    // Grading pinned to the old instance runs nothing.
    let lab_dir = TempDir::new("pinned-grade");
    lab_dir.write(
        "lab.toml",
        &format!(
            "name = \"l\"\n[[checks]]\nname = \"a\"\nrun = \"touch {}\"\n",
            work.join("graded").display()
        ),
        0o644,
    );
    let lab = Lab::load(&lab_dir.path).unwrap();
    expect_changed(fresh().grade(&lab, "/opt/lab").await.unwrap_err(), "grade");
    let out = lab_agent_client::grade_all(&[fresh()], &lab, 1).await;
    expect_changed(
        out.into_iter().next().unwrap().result.unwrap_err(),
        "grade_all",
    );
    assert!(
        !work.join("graded").exists(),
        "a check ran on the wrong instance"
    );
    // Unpinned, the new instance grades, and the report says which it was.
    let report = plain.grade(&lab, "/opt/lab").await.unwrap();
    assert!(report.all_passed(), "{report:?}");
    assert_eq!(
        report.instance.as_ref().map(|i| i.id.as_str()),
        Some(after.id.as_str())
    );
}

/// An agent that names no instance (one older than instance identity)
/// cannot be verified: a pinned client refuses its answers, an unpinned
/// one takes them.
#[tokio::test]
async fn a_pinned_client_refuses_an_agent_that_names_no_instance() {
    use lab_agent_tests::hostile::{Behaviour, HostileAgent};
    let old = HostileAgent::start(Behaviour::Honest);
    let unpinned = Client::new(&old.url(), "token").unwrap();
    assert!(unpinned.ready().await.unwrap().instance.is_none());
    let pinned = unpinned.pinned("0123456789abcdef0123456789abcdef").unwrap();
    let e = pinned.ready().await.unwrap_err();
    assert!(e.is_instance_unknown() && !e.is_instance_changed(), "{e:?}");
    assert!(e.to_string().contains("cannot be verified"), "{e}");
    assert!(pinned.info().await.unwrap_err().is_instance_unknown());
    assert!(
        pinned
            .exec(&ExecRequest::new("true"))
            .await
            .unwrap_err()
            .is_instance_unknown()
    );
}

/// The grading rule is the library's: `grade` and `grade_all` on a VM
/// still setting up run nothing and say why, with the agent's state and
/// reason; `grade_unchecked` (a local tool's explicit opt-out) runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grade_and_grade_all_refuse_a_vm_that_is_not_ready() {
    let work = TempDir::new("not-ready");
    let go = work.join("go");
    // Setup runs until the test lets it end.
    let agent = Agent::start(AgentOptions::default().setup(&format!(
        "while [ ! -e {} ]; do sleep 0.1; done",
        go.display()
    )));
    let c = client(&agent);
    let graded = work.join("graded");
    work.write(
        "lab.toml",
        &format!(
            "name = \"l\"\n[[checks]]\nname = \"a\"\nrun = \"touch {}\"\n",
            graded.display()
        ),
        0o644,
    );
    let lab = Lab::load(&work.path).unwrap();
    // `setting_up` for as long as `go` is absent: no race in what follows.
    assert_eq!(c.ready().await.unwrap().state, ReadyState::SettingUp);
    let e = c.grade(&lab, "/opt/lab").await.unwrap_err();
    assert!(e.is_not_ready() && !e.is_setup_failed(), "{e:?}");
    let r = e.ready_response().unwrap();
    assert_eq!(r.state, ReadyState::SettingUp);
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "the VM at {} is not ready, so it was not graded: its state is `setting_up`",
            agent.url()
        )),
        "{msg}"
    );
    if let Some(reason) = &r.reason {
        assert!(msg.contains(reason.as_str()), "{msg}");
    }
    let out = lab_agent_client::grade_all(std::slice::from_ref(&c), &lab, 1).await;
    let e = out.into_iter().next().unwrap().result.unwrap_err();
    assert!(e.is_not_ready(), "{e:?}");
    assert!(!graded.exists(), "a check ran on a VM still setting up");
    // The explicit opt-out runs.
    let report = c.grade_unchecked(&lab, "/opt/lab").await.unwrap();
    assert!(
        report.all_passed() && report.instance.is_none(),
        "{report:?}"
    );
    assert!(graded.exists());
    std::fs::remove_file(&graded).unwrap();
    // Ready: graded, with the instance that answered.
    std::fs::write(&go, "").unwrap();
    c.wait_ready(in_secs(60)).await.unwrap();
    let report = c.grade(&lab, "/opt/lab").await.unwrap();
    assert!(report.all_passed(), "{report:?}");
    assert_eq!(report.instance.unwrap().id, instance_of(&c).await.id);
}
