//! `lab-agent-client` against the real `lab-agent` binary on loopback.

use lab_agent_client::{CheckStatus, Client, Error, PinnedBy, Progress, wait_all, wait_each};
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

/// A port forward that accepts before the guest listens (qemu's user
/// networking: its SYN to the guest goes unanswered) holds the first
/// connection open and silent; every later one reaches the agent. The wait
/// gives up on the silent attempt well before its request timeout (60 s
/// here) and sees the agent on the next. Regression: each such attempt
/// cost the whole request timeout, and `labctl wait` saw a failed setup
/// only after `labctl try` had stopped the VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_forwarded_connection_costs_an_attempt_not_the_wait() {
    let agent = Agent::start(AgentOptions::default());
    let target: std::net::SocketAddr = agent.addr.parse().unwrap();
    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", front.local_addr().unwrap());
    let forward = tokio::spawn(async move {
        let (silent, _) = front.accept().await.unwrap();
        loop {
            let (mut inbound, _) = front.accept().await.unwrap();
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
            // The silent one stays open (never read) as long as this task.
            let _ = &silent;
        }
    });
    let c = Client::builder()
        .request_timeout(Duration::from_secs(60))
        .build(&url, &agent.token)
        .unwrap();
    let mut seen = Vec::new();
    let started = Instant::now();
    let ready = c
        .wait_ready_with(in_secs(120), |p| seen.push(p.reason.clone()))
        .await
        .unwrap();
    let took = started.elapsed();
    forward.abort();
    assert_eq!(ready.state, ReadyState::Ready);
    assert_eq!(seen[0], "no response within 8s", "{seen:?}");
    assert!(took < Duration::from_secs(30), "{took:?}: {seen:?}");
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

/// `wait_each` hands out each VM as its wait ends: the ready one and the
/// failed one at once, the one that never answers at the deadline, last;
/// `wait_all` would have held all three until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_each_yields_each_vm_as_soon_as_it_is_known() {
    let ready = Agent::start(AgentOptions::default());
    let failed = Agent::start(AgentOptions::default().setup("exit 3"));
    let silent = ReservedPort::new();
    let clients = vec![
        client(&ready),
        Client::new(&silent.url(), "token").unwrap(),
        client(&failed),
    ];
    let mut each = wait_each(&clients, in_secs(5));
    assert_eq!(each.remaining(), 3);
    let mut order = Vec::new();
    while let Some((i, outcome)) = each.next().await {
        assert_eq!(outcome.url, clients[i].url());
        match i {
            0 => assert_eq!(outcome.result.unwrap().state, ReadyState::Ready),
            1 => {
                let e = outcome.result.unwrap_err();
                assert!(e.is_timeout() && e.is_unreachable(), "{e:?}");
            }
            _ => assert!(outcome.result.unwrap_err().is_setup_failed()),
        }
        order.push(i);
    }
    assert_eq!(each.remaining(), 0);
    order[..2].sort();
    assert_eq!(order, [0, 2, 1], "the silent VM held back none");
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

/// Past `--max-execs` the agent queues an exec briefly: both commands run,
/// the second as soon as the first ends, with no 429 and no client-side
/// pause (the client's retry after a 429 is `hostile::busy_*`'s).
#[tokio::test]
async fn exec_past_max_execs_waits_its_turn_in_the_agent() {
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
        !agent.log().contains("status=429"),
        "none was refused:\n{}",
        agent.log()
    );
}

mod hostile;

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

mod channels;
mod instance;
mod stream;
