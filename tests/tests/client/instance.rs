//! Which life of the VM: pinning a client to an instance, and the grading
//! rule (nothing graded on a VM that is not ready).

use super::*;

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
        assert!(
            matches!(
                e,
                Error::InstanceChanged {
                    pinned_by: PinnedBy::Caller,
                    ..
                }
            ),
            "{what}: {e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("was reset (instance {}", after.id))
                && msg.contains(&format!(
                    "is not the instance {} the client is pinned to",
                    before.id
                ))
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
    // The agent refused it before running anything, streamed or not.
    assert!(!marker.exists(), "the pinned exec ran on the reset VM");
    let e = fresh()
        .exec_stream(
            &ExecRequest::new(format!("touch {}", marker.display())).profile(Profile::None),
        )
        .await
        .unwrap_err();
    expect_changed(e, "exec_stream");
    assert!(!marker.exists(), "the pinned stream ran on the reset VM");
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

/// An agent older than `instance_id` in exec requests refuses the field
/// (a 400: nothing ran): a pinned client sends the exec again without it,
/// holds the answer's instance to its pin as before, and leaves the field
/// out of its later execs.
#[tokio::test]
async fn a_pinned_exec_to_an_older_agent_is_checked_on_its_answer() {
    use lab_agent_tests::hostile::{
        Behaviour, HostileAgent, OLDER_EXEC_INSTANCE, OLDER_READY_INSTANCE,
    };
    use std::sync::atomic::Ordering;
    let old = HostileAgent::start(Behaviour::OlderAgent);
    let pinned = Client::new(&old.url(), "token")
        .unwrap()
        .pinned(OLDER_READY_INSTANCE)
        .unwrap();
    assert_eq!(pinned.ready().await.unwrap().state, ReadyState::Ready);
    let sent = || old.requests.load(Ordering::Relaxed);
    for (call, requests) in [("first", 2), ("second", 1)] {
        let before = sent();
        let e = pinned.exec(&ExecRequest::new("true")).await.unwrap_err();
        match &e {
            Error::InstanceChanged {
                expected, found, ..
            } => assert_eq!(
                (expected.as_str(), found.as_str()),
                (OLDER_READY_INSTANCE, OLDER_EXEC_INSTANCE),
                "{call}"
            ),
            _ => panic!("{call}: {e:?}"),
        }
        assert_eq!(sent() - before, requests, "{call} exec's requests");
    }
    // Streamed: the result is held to the pin too (this agent answers the
    // plain way, so the stream's one event is read at once).
    let e = match pinned.exec_stream(&ExecRequest::new("true")).await {
        Err(e) => e,
        Ok(s) => s.collect().await.unwrap_err(),
    };
    assert!(e.is_instance_changed(), "{e:?}");
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
