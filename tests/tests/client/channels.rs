//! The channels beside TCP, on loopback: `vsock+unix://` through a
//! stand-in of vhost-device-vsock's hybrid socket and `kubevirt://`
//! through a stand-in of KubeVirt's vsock subresource
//! (`lab_agent_tests::relay`), each relaying to a real agent whose TCP
//! port stands for the guest's vsock port. The real relays and a guest's
//! real vsock: `tests/tests/vm_lifecycle/vsock.rs`.
//!
//! Every call as on TCP (wait, exec, stream, grade, info); a relay that
//! dies mid-answer is a transport error, never a result; a wrong port,
//! and each of KubeVirt's refusals, says what it is; a wait rides out the
//! refusals that pass (a VMI not running yet) and stops at those that do
//! not (RBAC).

use super::*;
use lab_agent_client::KubeApi;
use lab_agent_tests::relay::kubevirt::Account;
use lab_agent_tests::relay::{GuestVsock, HybridStandIn, KubevirtStandIn, StandInVmi};

const PORT: u32 = 8899;

fn guest(agent: &Agent) -> GuestVsock {
    GuestVsock::Loopback {
        port: PORT,
        agent: agent.addr.parse().unwrap(),
    }
}

fn grader() -> Account {
    Account {
        token: "grader-token".into(),
        user: "system:serviceaccount:lab-backend:grader".into(),
        vsock_in: vec!["labs".into()],
    }
}

fn kube_client(
    dir: &TempDir,
    k: &KubevirtStandIn,
    url: &str,
    api_token: &str,
    token: &str,
) -> Result<Client, Error> {
    // Read at each connection: in the test's own dir, which outlives the
    // client and goes with the test.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let token_file = dir.write(&format!("kube-token-{n}"), api_token, 0o600);
    let api = KubeApi::from_files(&k.server(), token_file, &k.certs().ca)?;
    Client::builder().kube_api(api).build(url, token)
}

/// What the calls of a backend do, through `c`: the same answers as on TCP.
async fn every_call(c: &Client, lab: &Lab) {
    let ready = c.wait_ready(in_secs(60)).await.unwrap();
    assert_eq!(ready.state, ReadyState::Ready);
    assert!(c.info().await.unwrap().version.starts_with("0."));
    let r = c
        .exec(&ExecRequest::new("echo out; echo err >&2; exit 3").profile(Profile::None))
        .await
        .unwrap();
    assert_eq!(
        (r.stdout.as_str(), r.stderr.as_str(), r.exit_code),
        ("out\n", "err\n", Some(3))
    );
    // A big answer crosses in many frames (and, through KubeVirt's relay,
    // in each of the shapes gorilla writes).
    let r = c
        .exec(&ExecRequest::new("head -c 3000000 /dev/zero | tr '\\0' x").profile(Profile::None))
        .await
        .unwrap();
    assert_eq!(
        r.stdout.len(),
        1 << 20,
        "capped at the default max_output_bytes"
    );
    assert!(r.stdout.bytes().all(|b| b == b'x') && r.stdout_truncated);
    // A request body of several frames: stdin.
    let stdin = "y".repeat(200_000);
    let r = c
        .exec(
            &ExecRequest::new("wc -c")
                .stdin(stdin)
                .profile(Profile::None),
        )
        .await
        .unwrap();
    assert_eq!(r.stdout.trim(), "200000");
    let r = c
        .exec_stream(&ExecRequest::new("echo a; sleep 0.2; echo b").profile(Profile::None))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    let report = c.grade(lab, "/opt/lab").await.unwrap();
    assert_eq!((report.passed, report.total), (1, 2), "{report:?}");
}

/// [`every_call`] through `c` and straight over TCP, and both kept alive:
/// the eight or more requests ride on a few connections, as many as ran at
/// once (the grade's two checks may, a stream's connection returns to the
/// pool only once drained). How many exactly is the pool's timing, so the
/// two channels are not held to the same count.
async fn every_call_as_on_tcp(c: &Client, agent: &Agent, lab: &Lab) {
    const KEPT_ALIVE: u64 = 3;
    every_call(c, lab).await;
    let tcp = client(agent);
    every_call(&tcp, lab).await;
    for (what, opened) in [
        (c.url(), c.connections_opened()),
        ("tcp", tcp.connections_opened()),
    ] {
        assert!(
            (1..=KEPT_ALIVE).contains(&opened),
            "{what}: {opened} connections for 8+ requests"
        );
    }
}

const LAB: &str = r#"
name = "channels"
[[checks]]
name = "true holds"
run = "true"
[[checks]]
name = "false fails"
run = "false"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_vsock_carries_every_call() {
    let dir = TempDir::new("hybrid");
    dir.write("lab/lab.toml", LAB, 0o644);
    let lab = Lab::load(dir.join("lab")).unwrap();
    let agent = Agent::start(AgentOptions::default());
    let relay = HybridStandIn::start(&dir.join("vm.vsock"), guest(&agent), None);
    let url = relay.url(PORT);
    let c = Client::new(&url, &agent.token).unwrap();
    assert_eq!(c.url(), url);
    every_call_as_on_tcp(&c, &agent, &lab).await;

    // A wrong port: the relay closes without `OK`; a wait rides it out
    // (the agent may not listen yet) and ends unreachable.
    let wrong = Client::new(&relay.url(9999), &agent.token).unwrap();
    let e = wrong.ready().await.unwrap_err();
    assert!(
        matches!(e, Error::Connect { .. }) && e.is_unreachable(),
        "{e:?}"
    );
    let text = format!("{e}: {}", std::error::Error::source(&e).unwrap());
    assert!(text.contains("/v1/ready via vsock+unix://"), "{text}");
    assert!(
        text.contains("nothing listens on vsock port 9999"),
        "{text}"
    );
    assert!(e.hint().unwrap().contains("vsock"), "{:?}", e.hint());
    let e = wrong
        .wait_ready(Instant::now() + Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::WaitTimeout { .. }) && e.is_unreachable(),
        "{e}"
    );

    // No socket at all: said so.
    let gone = format!("vsock+unix://{}?port=8899", dir.join("no.vsock").display());
    let e = Client::new(&gone, &agent.token)
        .unwrap()
        .info()
        .await
        .unwrap_err();
    let cause = std::error::Error::source(&e).unwrap().to_string();
    assert!(cause.contains("no such socket"), "{cause}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_dies_mid_answer_is_a_transport_error() {
    let dir = TempDir::new("dying-relay");
    let agent = Agent::start(AgentOptions::default());
    Client::new(&agent.url(), &agent.token)
        .unwrap()
        .wait_ready(in_secs(60))
        .await
        .unwrap();
    let hybrid = HybridStandIn::start(&dir.join("vm.vsock"), guest(&agent), Some(300));
    let kubevirt = KubevirtStandIn::start(
        &dir.path,
        vec![StandInVmi::running("labs", "vm-1", guest(&agent))],
        vec![grader()],
        Some(300),
    );
    let clients = [
        Client::new(&hybrid.url(PORT), &agent.token).unwrap(),
        kube_client(
            &dir,
            &kubevirt,
            "kubevirt://labs/vm-1",
            "grader-token",
            &agent.token,
        )
        .unwrap(),
    ];
    for c in &clients {
        // 300 bytes: the head and a little of the body, never all of it.
        let e = c
            .exec(&ExecRequest::new("seq 100000").profile(Profile::None))
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::Transport { .. }) && e.is_unreachable(),
            "{}: {e:?}",
            c.url()
        );
        let mut s = c
            .exec_stream(&ExecRequest::new("seq 100000").profile(Profile::None))
            .await
            .unwrap();
        let e = loop {
            match s.next_event().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{}: a cut stream ended as if whole", c.url()),
                Err(e) => break e,
            }
        };
        assert!(e.is_unreachable(), "{}: {e:?}", c.url());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubevirt_carries_every_call_as_kubevirt_relays_it() {
    let dir = TempDir::new("kubevirt");
    dir.write("lab/lab.toml", LAB, 0o644);
    let lab = Lab::load(dir.join("lab")).unwrap();
    let agent = Agent::start(AgentOptions::default());
    let k = KubevirtStandIn::start(
        &dir.path,
        vec![StandInVmi::running("labs", "vm-1", guest(&agent))],
        vec![grader()],
        None,
    );
    let c = kube_client(
        &dir,
        &k,
        "kubevirt://labs/vm-1",
        "grader-token",
        &agent.token,
    )
    .unwrap();
    assert_eq!(c.url(), "kubevirt://labs/vm-1?port=8899");
    every_call_as_on_tcp(&c, &agent, &lab).await;
    // What the client asked for: the subresource, the agent's port,
    // `tls=false`, KubeVirt's subprotocol.
    let seen = k.seen();
    assert_eq!(seen.len() as u64, c.connections_opened(), "{seen:?}");
    assert_eq!(
        seen[0],
        (
            "/apis/subresources.kubevirt.io/v1/namespaces/labs/virtualmachineinstances/vm-1/vsock?port=8899&tls=false".to_owned(),
            "plain.kubevirt.io".to_owned()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubevirt_s_refusals_say_what_they_are_and_a_wait_stops_at_the_final_ones() {
    let dir = TempDir::new("kubevirt-refusals");
    let agent = Agent::start(AgentOptions::default());
    let mut starting = StandInVmi::running("labs", "vm-starting", guest(&agent));
    starting.phase = "Scheduling".into();
    let mut no_vsock = StandInVmi::running("labs", "vm-no-vsock", guest(&agent));
    no_vsock.autoattach_vsock = false;
    let k = KubevirtStandIn::start(
        &dir.path,
        vec![
            StandInVmi::running("labs", "vm-1", guest(&agent)),
            StandInVmi::running("other", "vm-1", guest(&agent)),
            starting,
            no_vsock,
        ],
        vec![grader()],
        None,
    );
    let refusal = |url: &str, api_token: &str| {
        let c = kube_client(&dir, &k, url, api_token, &agent.token).unwrap();
        async move { c.ready().await.unwrap_err() }
    };
    for (url, api_token, status, says) in [
        ("kubevirt://labs/vm-1", "wrong", 401, "Unauthorized"),
        (
            "kubevirt://other/vm-1",
            "grader-token",
            403,
            "cannot get resource \"virtualmachineinstances/vsock\" in API group \"subresources.kubevirt.io\" in the namespace \"other\"",
        ),
        (
            "kubevirt://labs/vm-9",
            "grader-token",
            404,
            "virtualmachineinstance.kubevirt.io \"vm-9\" not found",
        ),
        (
            "kubevirt://labs/vm-no-vsock",
            "grader-token",
            400,
            "VSOCK is not attached.",
        ),
        (
            "kubevirt://labs/vm-starting",
            "grader-token",
            400,
            "because phase is Scheduling instead of Running or Scheduled",
        ),
    ] {
        let e = refusal(url, api_token).await;
        assert_eq!(e.relay_status(), Some(status), "{url}: {e:?}");
        assert!(e.is_unreachable(), "{url}: {e:?}");
        let text = e.to_string();
        assert!(text.contains(says), "{url}: {text}");
        assert!(
            text.contains(&format!("/v1/ready via {url}?port=8899")),
            "{text}"
        );
        assert!(e.hint().is_some(), "{url}");
    }
    // RBAC does not pass with waiting: a wait ends at once.
    let c = kube_client(
        &dir,
        &k,
        "kubevirt://other/vm-1",
        "grader-token",
        &agent.token,
    )
    .unwrap();
    let started = Instant::now();
    let e = c.wait_ready(in_secs(30)).await.unwrap_err();
    assert_eq!(e.relay_status(), Some(403), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // A VMI still starting may pass: the wait goes on to its deadline.
    let c = kube_client(
        &dir,
        &k,
        "kubevirt://labs/vm-starting",
        "grader-token",
        &agent.token,
    )
    .unwrap();
    let e = c
        .wait_ready(Instant::now() + Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::WaitTimeout { .. }), "{e:?}");

    // A wrong port: KubeVirt upgrades, then closes (virt-handler dials the
    // guest after the upgrade): no answer, a transport error.
    let c = kube_client(
        &dir,
        &k,
        "kubevirt://labs/vm-1?port=9999",
        "grader-token",
        &agent.token,
    )
    .unwrap();
    let e = c.ready().await.unwrap_err();
    assert!(matches!(e, Error::Transport { .. }), "{e:?}");
    assert!(e.hint().unwrap().contains("vsock port"), "{:?}", e.hint());

    // A server whose certificate the CA given did not sign: no status.
    let token_file = dir.write("api-token", "grader-token", 0o600);
    let api = KubeApi::from_files(&k.server(), token_file, &k.certs().other_ca).unwrap();
    let c = Client::builder()
        .kube_api(api)
        .build("kubevirt://labs/vm-1", &agent.token)
        .unwrap();
    let e = c.ready().await.unwrap_err();
    assert!(matches!(e, Error::Relay { status: None, .. }), "{e:?}");
    assert!(
        e.to_string().contains("TLS with the Kubernetes API server"),
        "{e}"
    );
}
