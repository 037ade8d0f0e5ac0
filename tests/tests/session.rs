//! A session (a lab of several VMs, `[[vms]]`) against real agents on
//! loopback: each agent is one VM, given that VM's variables the way a
//! payload gives them (`Lab::for_vm` → the env file → `lab-agent serve
//! --env-file`). Waited for as one (fail fast, naming the VM), graded as one
//! (each check on its VM, one report), nothing run while one is not ready.

use lab_agent_client::{CheckStatus, Client, Session, SessionError};
use lab_agent_proto::guest::render_env_file;
use lab_agent_proto::lab::Lab;
use lab_agent_tests::local::{Agent, AgentOptions, ReservedPort, TempDir};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Every byte a shell or a file format could trip on.
const HOSTILE: &str = "it's \"quoted\"\nnext line $HOME `id` $(id) \\ %s = é";

fn lab_toml(marker: &std::path::Path) -> String {
    format!(
        r#"
name = "two"
[[vms]]
name = "server"
[[vms]]
name = "client"
[[checks]]
name = "on the server"
vm = "server"
run = 'test "$LAB_VM" = server && test "$LAB_VMS" = "server client" && touch {marker}'
[[checks]]
name = "on the client, with the parameter"
vm = "client"
run = 'test "$LAB_VM" = client && printf %s "$LAB_PARAM_GREETING"'
points = 2
[[checks]]
name = "fails on the client"
vm = "client"
run = "exit 3"
fail_message = "not yet"
"#,
        marker = marker.display()
    )
}

/// A lab in `dir`, and an agent for VM `vm` whose setup is `setup` and
/// whose env file is what `labctl secret --vm VM --param …` renders.
fn vm_agent(lab: &Lab, dir: &TempDir, vm: &str, setup: &str) -> Agent {
    let params = BTreeMap::from([("GREETING".to_owned(), HOSTILE.to_owned())]);
    let for_vm = lab.for_vm(Some(vm), &params).unwrap();
    let env = render_env_file(for_vm.vm_env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let env_file = dir.join(format!("{vm}.env"));
    std::fs::write(&env_file, env).unwrap();
    Agent::start(AgentOptions {
        extra_args: vec!["--env-file".into(), env_file.display().to_string()],
        ..AgentOptions::default().setup(setup)
    })
}

fn session(vms: &[(&str, &Agent)]) -> Session {
    Session::new(
        vms.iter()
            .map(|(n, a)| ((*n).to_owned(), Client::new(&a.url(), &a.token).unwrap())),
    )
    .unwrap()
}

fn in_secs(s: u64) -> Instant {
    Instant::now() + Duration::from_secs(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_graded_as_one_each_check_on_its_vm() {
    let dir = TempDir::new("session");
    let marker = dir.join("server-check-ran");
    dir.write("lab.toml", &lab_toml(&marker), 0o644);
    let lab = Lab::load(&dir.path).unwrap();
    // Each setup sees its VM's variables too.
    let saw = |vm: &str| {
        format!(
            "printf '%s|%s|%s' \"$LAB_VM\" \"$LAB_VMS\" \"$LAB_PARAM_GREETING\" >{}",
            dir.join(format!("{vm}-setup-saw")).display()
        )
    };
    let server = vm_agent(&lab, &dir, "server", &saw("server"));
    let client = vm_agent(&lab, &dir, "client", &saw("client"));
    // Given in another order than the lab's: the report keeps the lab's.
    let s = session(&[("client", &client), ("server", &server)]);
    let ready = s.wait_ready(in_secs(60)).await.unwrap();
    assert_eq!(
        ready.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["client", "server"]
    );
    for vm in ["server", "client"] {
        let seen = std::fs::read_to_string(dir.join(format!("{vm}-setup-saw"))).unwrap();
        assert_eq!(seen, format!("{vm}|server client|{HOSTILE}"));
    }

    let report = s.grade(&lab, None).await.unwrap();
    let got: Vec<(&str, Option<&str>, CheckStatus)> = report
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.vm.as_deref(), c.status))
        .collect();
    assert_eq!(
        got,
        [
            ("on the server", Some("server"), CheckStatus::Passed),
            (
                "on the client, with the parameter",
                Some("client"),
                CheckStatus::Passed
            ),
            ("fails on the client", Some("client"), CheckStatus::Failed),
        ],
        "{report:#?}"
    );
    assert!(marker.exists(), "the server's check ran");
    assert_eq!(report.checks[1].stdout, HOSTILE);
    assert_eq!(report.checks[2].fail_message.as_deref(), Some("not yet"));
    assert_eq!(
        (
            report.passed,
            report.failed,
            report.total,
            report.score,
            report.max_score
        ),
        (2, 1, 3, 3, 4)
    );
    assert_eq!(report.instance, None);
    assert_eq!(
        report.instances.keys().collect::<Vec<_>>(),
        ["client", "server"]
    );
    assert_ne!(report.instances["client"].id, report.instances["server"].id);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["checks"][0]["vm"], "server");
    assert_eq!(json["checks"][2]["vm"], "client");

    // The session must be the lab's VMs.
    let short = session(&[("server", &server)]);
    let e = short.grade(&lab, None).await.unwrap_err();
    assert!(
        matches!(&e, SessionError::Mismatch(m) if m.contains("missing: client")),
        "{e}"
    );
    // A lab of one VM reports as it always did: no `vm`.
    let one = TempDir::new("session-one");
    one.write(
        "lab.toml",
        "name = \"one\"\n[[checks]]\nname = \"a\"\nrun = 'test -z \"$LAB_VM\"'\n",
        0o644,
    );
    let one_lab = Lab::load(&one.path).unwrap();
    let plain = Agent::start(AgentOptions::default());
    let one_vm = session(&[("any", &plain)]);
    one_vm.wait_ready(in_secs(60)).await.unwrap();
    let report = one_vm.grade(&one_lab, None).await.unwrap();
    assert!(
        report.all_passed() && report.instance.is_some(),
        "{report:?}"
    );
    let json = serde_json::to_string(&report).unwrap();
    assert!(
        !json.contains("\"vm\"") && !json.contains("instances"),
        "{json}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_vm_ends_the_sessions_wait_at_once_naming_it() {
    let dir = TempDir::new("session-fail");
    dir.write("lab.toml", &lab_toml(&dir.join("m")), 0o644);
    let lab = Lab::load(&dir.path).unwrap();
    let server = vm_agent(&lab, &dir, "server", "true");
    let client = vm_agent(
        &lab,
        &dir,
        "client",
        "echo 'cannot reach the mirror' >&2; exit 7",
    );
    // A third VM nothing answers for: without failing fast, the wait would
    // last the whole deadline.
    let silent = ReservedPort::new();
    let s = Session::new([
        (
            "server".to_owned(),
            Client::new(&server.url(), &server.token).unwrap(),
        ),
        (
            "client".to_owned(),
            Client::new(&client.url(), &client.token).unwrap(),
        ),
        (
            "db".to_owned(),
            Client::new(&silent.url(), &server.token).unwrap(),
        ),
    ])
    .unwrap();
    let deadline = Duration::from_secs(300);
    let started = Instant::now();
    let e = s.wait_ready(Instant::now() + deadline).await.unwrap_err();
    assert!(
        started.elapsed() < deadline / 2,
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(e.vm(), Some("client"), "{e}");
    let error = e.error().unwrap();
    assert!(error.is_setup_failed(), "{error:?}");
    let ready = error.ready_response().unwrap();
    assert_eq!(ready.setup.exit_code, Some(7));
    assert!(
        ready
            .setup
            .log_tail
            .as_deref()
            .unwrap_or_default()
            .contains("cannot reach the mirror")
    );
    assert!(e.to_string().starts_with("VM `client`: "), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_not_ready_means_nothing_is_graded_anywhere() {
    let dir = TempDir::new("session-not-ready");
    let marker = dir.join("server-check-ran");
    dir.write("lab.toml", &lab_toml(&marker), 0o644);
    let lab = Lab::load(&dir.path).unwrap();
    let go = dir.join("go");
    let server = vm_agent(&lab, &dir, "server", "true");
    let client = vm_agent(
        &lab,
        &dir,
        "client",
        &format!("while [ ! -e {} ]; do sleep 0.1; done", go.display()),
    );
    let s = session(&[("server", &server), ("client", &client)]);
    Client::new(&server.url(), &server.token)
        .unwrap()
        .wait_ready(in_secs(60))
        .await
        .unwrap();
    let e = s.grade(&lab, None).await.unwrap_err();
    assert_eq!(e.vm(), Some("client"), "{e}");
    let error = e.error().unwrap();
    assert!(
        error.is_not_ready() && !error.is_setup_failed(),
        "{error:?}"
    );
    assert!(
        !marker.exists(),
        "a check ran while a VM of the session was not ready"
    );
    // Once it is ready, the session is graded.
    std::fs::write(&go, "").unwrap();
    s.wait_ready(in_secs(60)).await.unwrap();
    let report = s.grade(&lab, Some("/opt/lab")).await.unwrap();
    assert_eq!(report.total, 3);
    assert!(marker.exists());
}

/// A broken env file stops the agent (exit 2, naming the file) rather than
/// running commands without the lab's variables; none at all is fine.
#[test]
fn a_broken_env_file_is_refused_and_a_missing_one_is_nothing() {
    let dir = TempDir::new("env-file");
    let bad = dir.write("env", "", 0o600);
    std::fs::write(&bad, b"LAB_VM=a\0NOEQUALS\0").unwrap();
    for cmd in ["serve", "setup"] {
        let out = std::process::Command::new(lab_agent_tests::local::agent_bin())
            .args([cmd, "--env-file"])
            .arg(&bad)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert!(
            stderr.contains("the lab's env file") && stderr.contains("is not NUL-ended KEY=VALUE"),
            "{cmd}: {stderr}"
        );
    }
    let missing = dir.join("no-such-env");
    let out = std::process::Command::new(lab_agent_tests::local::agent_bin())
        .args(["setup", "--state-dir"])
        .arg(dir.join("state"))
        .arg("--env-file")
        .arg(&missing)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}
