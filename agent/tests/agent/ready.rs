use crate::support::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn record(agent: &Agent, value: serde_json::Value) {
    std::fs::create_dir_all(agent.state_dir()).unwrap();
    let tmp = agent.state_dir().join(".tmp");
    std::fs::write(&tmp, value.to_string()).unwrap();
    std::fs::rename(tmp, agent.state_dir().join("setup.json")).unwrap();
}

fn finish_cloud_init(agent: &Agent, errors: serde_json::Value) {
    let data = agent.dir.join("var-lib-cloud-data-result.json");
    std::fs::write(
        &data,
        json!({"v1": {"datasource": "DataSourceNoCloud", "errors": errors}}).to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(agent.cloud_init_dir()).unwrap();
    std::os::unix::fs::symlink(&data, agent.cloud_init_dir().join("result.json")).unwrap();
}

fn ready(agent: &Agent) -> (u16, serde_json::Value) {
    let r = agent.get("/v1/ready");
    (r.status, r.json())
}

#[test]
pub(crate) fn walks_through_every_state_from_real_files() {
    let agent = Agent::builder("ready-states").start();
    let (status, v) = ready(&agent);
    assert_eq!((status, v["state"].as_str()), (503, Some("booting")), "{v}");
    assert_eq!(v["setup"]["state"], "pending");
    assert_eq!(v["cloud_init"]["done"], false);
    assert!(v["reason"].as_str().unwrap().contains("cloud-init"));

    // Running, by a live process (this test) during this boot.
    record(
        &agent,
        json!({"state": "running", "started_at": "2026-11-29T08:00:00Z",
        "pid": std::process::id(), "boot_id": boot_id()}),
    );
    std::fs::write(agent.state_dir().join("setup.log"), "installing things\n").unwrap();
    past_the_readiness_cache();
    let (status, v) = ready(&agent);
    assert_eq!(
        (status, v["state"].as_str()),
        (503, Some("setting_up")),
        "{v}"
    );
    assert_eq!(v["setup"]["state"], "running");
    assert_eq!(v["setup"]["log_tail"], "installing things\n");

    record(
        &agent,
        json!({"state": "succeeded", "started_at": "2026-11-29T08:00:00Z",
        "exit_code": 0, "duration_ms": 1234}),
    );
    past_the_readiness_cache();
    let (status, v) = ready(&agent);
    assert_eq!(
        (status, v["state"].as_str()),
        (503, Some("waiting_for_cloud_init")),
        "{v}"
    );
    assert_eq!(v["setup"]["exit_code"], 0);
    assert_eq!(v["setup"]["duration_ms"], 1234);

    finish_cloud_init(&agent, json!(["some module failed"]));
    past_the_readiness_cache();
    let (status, v) = ready(&agent);
    assert_eq!((status, v["state"].as_str()), (200, Some("ready")), "{v}");
    assert_eq!(v["cloud_init"]["done"], true);
    assert_eq!(
        v["cloud_init"]["errors"],
        json!(["some module failed"]),
        "errors are warnings"
    );
    assert!(v.get("reason").is_none(), "{v}");
}

#[test]
pub(crate) fn failed_setup_is_failed_at_once_with_reason_and_log() {
    let agent = Agent::builder("ready-failed").start();
    std::fs::create_dir_all(agent.state_dir()).unwrap();
    std::fs::write(
        agent.state_dir().join("setup.log"),
        "step 1\nE: package not found\n",
    )
    .unwrap();
    record(
        &agent,
        json!({"state": "failed", "started_at": "2026-11-29T08:00:00Z",
        "exit_code": 100, "duration_ms": 10}),
    );
    let (status, v) = ready(&agent);
    assert_eq!((status, v["state"].as_str()), (503, Some("failed")), "{v}");
    assert_eq!(v["setup"]["exit_code"], 100);
    assert!(
        v["reason"].as_str().unwrap().contains("exit code 100"),
        "{v}"
    );
    assert!(
        v["setup"]["log_tail"]
            .as_str()
            .unwrap()
            .contains("package not found")
    );
}

#[test]
fn cloud_init_done_without_setup_is_failed() {
    let agent = Agent::builder("ready-never").start();
    finish_cloud_init(&agent, json!([]));
    let (_, v) = ready(&agent);
    assert_eq!(v["state"], "failed", "{v}");
    assert!(v["reason"].as_str().unwrap().contains("never ran"), "{v}");
}

#[test]
fn a_setup_that_died_or_was_cut_by_a_reboot_is_failed() {
    let agent = Agent::builder("ready-dead").start();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    record(
        &agent,
        json!({"state": "running", "started_at": "x", "pid": dead_pid, "boot_id": boot_id()}),
    );
    let (_, v) = ready(&agent);
    assert_eq!(v["state"], "failed", "{v}");
    assert!(v["reason"].as_str().unwrap().contains("died"), "{v}");
    record(
        &agent,
        json!({"state": "running", "started_at": "x", "pid": std::process::id(), "boot_id": "another-boot"}),
    );
    past_the_readiness_cache();
    let (_, v) = ready(&agent);
    assert_eq!(v["state"], "failed", "{v}");
    assert!(v["reason"].as_str().unwrap().contains("reboot"), "{v}");
}

#[test]
fn corrupt_records_give_a_reason_not_a_crash() {
    let agent = Agent::builder("ready-corrupt").start();
    std::fs::create_dir_all(agent.state_dir()).unwrap();
    std::fs::write(agent.state_dir().join("setup.json"), "{\"state\": \"runn").unwrap();
    let (status, v) = ready(&agent);
    assert_eq!((status, v["state"].as_str()), (503, Some("failed")), "{v}");
    assert!(v["reason"].as_str().unwrap().contains("setup.json"), "{v}");
    // A result.json cloud-init left half-written: done, with a warning.
    std::fs::write(
        agent.state_dir().join("setup.json"),
        json!({"state":"succeeded","started_at":"x","exit_code":0}).to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(agent.cloud_init_dir()).unwrap();
    std::fs::write(agent.cloud_init_dir().join("result.json"), "{oops").unwrap();
    past_the_readiness_cache();
    let (status, v) = ready(&agent);
    assert_eq!((status, v["state"].as_str()), (200, Some("ready")), "{v}");
    assert!(
        v["cloud_init"]["errors"][0]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{v}"
    );
    assert_eq!(agent.get("/v1/info").status, 200, "still serving");
}

#[test]
pub(crate) fn long_poll_returns_when_the_state_becomes_ready() {
    let agent = Agent::builder("ready-longpoll").start();
    record(
        &agent,
        json!({"state": "succeeded", "started_at": "x", "exit_code": 0}),
    );
    let addr = agent.addr;
    let poll = std::thread::spawn(move || {
        let started = Instant::now();
        let raw = format!(
            "GET /v1/ready?wait=30 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        );
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut s, raw.as_bytes()).unwrap();
        let r = read_response(&mut std::io::BufReader::new(s)).unwrap();
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!poll.is_finished(), "a long poll must wait while not ready");
    finish_cloud_init(&agent, json!([]));
    let (r, took) = poll.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["state"], "ready");
    assert!(
        took < Duration::from_secs(30),
        "returned on the change, not at the end of the wait"
    );
}

#[test]
fn long_poll_ends_at_its_wait_when_nothing_changes() {
    let agent = Agent::builder("ready-wait").start();
    let started = Instant::now();
    let r = agent.get("/v1/ready?wait=1");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["state"], "booting");
    agent.get("/v1/ready?wait=61").error(400, "bad_request");
    agent.get("/v1/ready?wait=soon").error(400, "bad_request");
    agent.get("/v1/ready?when=1").error(400, "bad_request");
}
