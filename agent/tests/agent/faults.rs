//! Faults around state: `lab-agent setup` killed at random points, the
//! agent killed and restarted, state files that are corrupt, unreadable,
//! enormous or not files at all, and a full disk under the state dir.

use crate::corpus::Rng;
use crate::support::*;
use lab_agent::{SetupRecord, read_setup_record};
use lab_agent_proto::SetupState;
use serde_json::{Value, json};
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A named way to break a file, and what the reason must then say.
type Case<'a> = (&'a str, Box<dyn Fn() + 'a>, &'a str);

/// `/v1/ready`, failing (instead of hanging) when no answer comes in 5 s.
fn ready_within(agent: &Agent) -> (u16, Value) {
    past_the_readiness_cache();
    let mut s = TcpStream::connect(agent.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /v1/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    .unwrap();
    let r = read_response(&mut BufReader::new(s)).expect("/v1/ready did not answer within 5 s");
    (r.status, r.json())
}

fn finish_cloud_init(agent: &Agent) {
    let data = agent.dir.join("cloud-data-result.json");
    std::fs::write(&data, r#"{"v1":{"datasource":"x","errors":[]}}"#).unwrap();
    std::fs::create_dir_all(agent.cloud_init_dir()).unwrap();
    std::os::unix::fs::symlink(&data, agent.cloud_init_dir().join("result.json")).unwrap();
}

fn kill_group_in(pidfile: &Path) {
    if let Ok(pid) = std::fs::read_to_string(pidfile)
        && !pid.trim().is_empty()
    {
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{}", pid.trim())])
            .status();
    }
}

/// `lab-agent setup` SIGKILLed after a random delay, again and again:
/// `setup.json` is absent or a complete record, never torn, and what the
/// agent says about it is true.
#[test]
fn setup_killed_at_random_points_never_leaves_a_torn_record() {
    const RUNS: usize = 60;
    let agent = Agent::builder("faults-kill-setup").start();
    let state = agent.state_dir();
    let lab = agent.dir.join("lab");
    write_file(
        &lab.join("setup.sh"),
        "#!/bin/sh\necho $$ > \"$LAB_DIR/pid\"\necho start\nsleep 0.0$(($$ % 3))\necho done\n",
        0o755,
    );
    let mut rng = Rng::new(0x5e7);
    let (mut absent, mut died, mut finished) = (0, 0, 0);
    for run in 0..RUNS {
        let _ = std::fs::remove_dir_all(&state);
        let mut child = agent_command()
            .args(["setup", "--timeout", "30", "--script"])
            .arg(lab.join("setup.sh"))
            .arg("--state-dir")
            .arg(&state)
            .arg("--lab-dir")
            .arg(&lab)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Anywhere from before main() to after the last record: half the
        // runs densely around the first write, half across the whole run.
        let range = if run % 2 == 0 { 40_000 } else { 800_000 };
        std::thread::sleep(Duration::from_micros(rng.below(range) as u64));
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        kill_group_in(&lab.join("pid"));

        let record = read_setup_record(&state)
            .unwrap_or_else(|e| panic!("run {run}: a torn or unreadable record: {e}"));
        let (_, v) = ready_within(&agent);
        let reason = v["reason"].as_str().unwrap_or("");
        match record {
            None => {
                absent += 1;
                assert_eq!(v["state"], "booting", "run {run}: {v}");
            }
            Some(SetupRecord {
                state: SetupState::Running,
                pid,
                ..
            }) => {
                died += 1;
                assert_eq!(pid, Some(child.id()), "run {run}");
                assert_eq!(v["state"], "failed", "run {run}: {v}");
                assert!(reason.contains("died without recording"), "run {run}: {v}");
            }
            Some(rec) => {
                finished += 1;
                // It finished before the kill: the record is the outcome.
                assert!(
                    status.code().is_some() || status.signal_is_kill(),
                    "run {run}"
                );
                assert_eq!(rec.state, SetupState::Succeeded, "run {run}: {rec:?}");
                assert_eq!(v["state"], "waiting_for_cloud_init", "run {run}: {v}");
            }
        }
    }
    eprintln!(
        "setup kill -9: {RUNS} runs: {absent} before the first record, {died} while running, {finished} after the last"
    );
    assert!(
        died > 0,
        "no kill landed while the setup ran: the test saw nothing"
    );
    assert!(!agent.log().contains("panicked"));
}

trait KillStatus {
    fn signal_is_kill(&self) -> bool;
}

impl KillStatus for std::process::ExitStatus {
    fn signal_is_kill(&self) -> bool {
        std::os::unix::process::ExitStatusExt::signal(self) == Some(9)
    }
}

/// The agent SIGKILLed and restarted (as systemd does) while the setup
/// runs and after it finished: readiness is exactly what it was.
#[test]
fn an_agent_restart_does_not_change_readiness() {
    let mut agent = Agent::builder("faults-restart").start();
    let lab = agent.dir.join("lab");
    write_file(
        &lab.join("setup.sh"),
        // Also ends once the test's dir is gone (a failed test's).
        "#!/bin/sh\necho preparing\nwhile [ ! -e \"$LAB_DIR/go\" ] && [ -d \"$LAB_DIR\" ]; do sleep 0.05; done\necho done\n",
        0o755,
    );
    let mut setup = agent_command()
        .args(["setup", "--script"])
        .arg(lab.join("setup.sh"))
        .arg("--state-dir")
        .arg(agent.state_dir())
        .arg("--lab-dir")
        .arg(&lab)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let running = eventually(10, "setting_up", || {
        let (_, v) = ready_within(&agent);
        (v["state"] == "setting_up" && v["setup"]["log_tail"] == "preparing\n").then_some(v)
    });
    // What a restart changes: when this agent started; and the disk's
    // free and written bytes move with whatever else the machine does.
    let without_agent_start = |mut v: serde_json::Value| {
        v["timeline"]
            .as_object_mut()
            .and_then(|t| t.remove("agent_started_secs"))
            .expect("a timeline with the agent's start");
        v.as_object_mut()
            .and_then(|o| o.remove("root"))
            .expect("root");
        v
    };
    for _ in 0..3 {
        agent = agent.kill_and_restart();
        let (status, now) = ready_within(&agent);
        assert_eq!(
            (status, without_agent_start(now)),
            (503, without_agent_start(running.clone())),
            "after a restart mid-setup"
        );
    }
    std::fs::write(lab.join("go"), "").unwrap();
    assert!(setup.wait().unwrap().success());
    finish_cloud_init(&agent);
    let ready = ready_within(&agent);
    assert_eq!(ready.0, 200, "{}", ready.1);
    for _ in 0..3 {
        agent = agent.kill_and_restart();
        let (status, now) = ready_within(&agent);
        assert_eq!(
            (status, without_agent_start(now)),
            (200, without_agent_start(ready.1.clone())),
            "after a restart once ready"
        );
    }
}

/// Every kind of broken `setup.json`: a reason that names the file, 503,
/// and the agent keeps serving.
#[test]
fn corrupt_unreadable_and_strange_setup_records_give_a_reason() {
    let agent = Agent::builder("faults-records").start();
    let state = agent.state_dir();
    std::fs::create_dir_all(&state).unwrap();
    let path = state.join("setup.json");
    let reset = || {
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(&path);
    };
    let cases: Vec<Case> = vec![
        (
            "truncated",
            Box::new(|| std::fs::write(&path, "{\"state\":\"runn").unwrap()),
            "not a valid setup record",
        ),
        (
            "empty",
            Box::new(|| std::fs::write(&path, "").unwrap()),
            "not a valid setup record",
        ),
        (
            "an array",
            Box::new(|| std::fs::write(&path, "[]").unwrap()),
            "not a valid setup record",
        ),
        (
            "an unknown state",
            Box::new(|| std::fs::write(&path, r#"{"state":"exploded","started_at":"x"}"#).unwrap()),
            "not a valid setup record",
        ),
        (
            "no started_at",
            Box::new(|| std::fs::write(&path, r#"{"state":"running"}"#).unwrap()),
            "not a valid setup record",
        ),
        (
            "a negative pid",
            Box::new(|| {
                std::fs::write(&path, r#"{"state":"running","started_at":"x","pid":-1}"#).unwrap()
            }),
            "not a valid setup record",
        ),
        (
            "binary",
            Box::new(|| std::fs::write(&path, b"\xff\xfe\x00\x01").unwrap()),
            "not a valid setup record",
        ),
        (
            "a directory",
            Box::new(|| std::fs::create_dir(&path).unwrap()),
            "failed to read",
        ),
        (
            "a named pipe",
            Box::new(|| mkfifo(&path)),
            "not a regular file",
        ),
        (
            "enormous",
            Box::new(|| {
                let mut f = std::fs::File::create(&path).unwrap();
                f.write_all(b"{\"state\":\"succeeded\",\"started_at\":\"")
                    .unwrap();
                f.write_all(&vec![b'x'; 20 << 20]).unwrap();
                f.write_all(b"\"}").unwrap();
            }),
            "larger than",
        ),
    ];
    for (name, make, want) in &cases {
        reset();
        make();
        let started = Instant::now();
        let (status, v) = ready_within(&agent);
        let reason = v["reason"].as_str().unwrap_or("");
        assert_eq!(
            (status, v["state"].as_str()),
            (503, Some("failed")),
            "{name}: {v}"
        );
        assert!(
            reason.contains("setup.json") && reason.contains(want),
            "{name}: {reason:?} lacks {want:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{name}: took {:?}",
            started.elapsed()
        );
    }
    reset();
    // A symlink is never a record the agent wrote: refused, not followed
    // (not even a dangling one).
    std::os::unix::fs::symlink("/no/such/record", &path).unwrap();
    let (_, v) = ready_within(&agent);
    assert_eq!(v["state"], "failed", "{v}");
    assert!(v["reason"].as_str().unwrap().contains("symlink"), "{v}");
    reset();
    assert_eq!(agent.get("/v1/info").status, 200);
    assert!(!agent.log().contains("panicked"));
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

/// cloud-init's `result.json` and the setup log, broken the same ways: the
/// agent still answers at once, with the problem as a warning.
#[test]
fn strange_result_json_and_setup_log_never_hang_the_agent() {
    let agent = Agent::builder("faults-result").start();
    let state = agent.state_dir();
    write_file(
        &state.join("setup.json"),
        &json!({"state": "succeeded", "started_at": "x", "exit_code": 0}).to_string(),
        0o644,
    );
    let ci = agent.cloud_init_dir();
    std::fs::create_dir_all(&ci).unwrap();
    let target = agent.dir.join("result-target");
    let link = ci.join("result.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let cases: Vec<Case> = vec![
        ("dangling", Box::new(|| {}), "cannot read"),
        (
            "a named pipe",
            Box::new(|| mkfifo(&target)),
            "not a regular file",
        ),
        (
            "a directory",
            Box::new(|| std::fs::create_dir(&target).unwrap()),
            "cannot read",
        ),
        (
            "not JSON",
            Box::new(|| std::fs::write(&target, "{oops").unwrap()),
            "not valid JSON",
        ),
        (
            "enormous",
            Box::new(|| std::fs::write(&target, vec![b' '; 20 << 20]).unwrap()),
            "larger than",
        ),
        (
            "errors not a list",
            Box::new(|| std::fs::write(&target, r#"{"v1":{"errors":{"a":1}}}"#).unwrap()),
            "{\"a\":1}",
        ),
    ];
    for (name, make, want) in &cases {
        let _ = std::fs::remove_file(&target);
        let _ = std::fs::remove_dir_all(&target);
        make();
        let started = Instant::now();
        let (status, v) = ready_within(&agent);
        // cloud-init finished (the link is there); its trouble is a warning.
        assert_eq!(
            (status, v["state"].as_str()),
            (200, Some("ready")),
            "{name}: {v}"
        );
        let errors: Vec<&str> = v["cloud_init"]["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        let errors = errors.join("; ");
        assert!(errors.contains(want), "{name}: {errors} lacks {want:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "{name}");
    }
    // A named pipe in place of the log: no tail, no hang.
    mkfifo(&state.join("setup.log"));
    let (status, v) = ready_within(&agent);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["setup"]["log_tail"], Value::Null, "{v}");
}

/// A tmpfs mounted for one test, unmounted even when the test fails.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "failed to mount a tmpfs on `{}`: {}\nhint: the disk-full tests need root (CAP_SYS_ADMIN) to mount a small tmpfs",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn run_setup(dir: &TempDir, state: &Path, script: &str) -> (i32, String) {
    write_file(&dir.join("setup.sh"), script, 0o755);
    let out = agent_command()
        .args(["setup", "--script"])
        .arg(dir.join("setup.sh"))
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The state dir on a 64 KiB tmpfs. A setup whose output fills it still
/// records its outcome (the log is sacrificed); a disk full before the
/// setup starts is an exit status and a message naming the problem.
#[test]
fn a_full_disk_under_the_state_dir_loses_no_outcome() {
    let dir = TempDir::new("faults-full");
    let state = dir.join("state");
    let _mount = Tmpfs::mount(&state, "64k");
    let record = || -> Value {
        serde_json::from_slice(&std::fs::read(state.join("setup.json")).unwrap()).unwrap()
    };

    // The log fills the disk, the script succeeds.
    let (code, _) = run_setup(
        &dir,
        &state,
        "#!/bin/sh\nhead -c 300000 /dev/zero | tr '\\0' x\necho\nexit 0\n",
    );
    assert_eq!(code, 0);
    let r = record();
    assert_eq!(r["state"], "succeeded", "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{r}"
    );

    // The log fills the disk, the script fails: the failure is recorded.
    let (code, _) = run_setup(
        &dir,
        &state,
        "#!/bin/sh\nhead -c 300000 /dev/zero | tr '\\0' y\nexit 3\n",
    );
    assert_eq!(code, 3);
    let r = record();
    assert_eq!(
        (r["state"].as_str(), r["exit_code"].as_i64()),
        (Some("failed"), Some(3)),
        "{r}"
    );

    // Full before it starts: nothing can be recorded, and it says so.
    std::fs::remove_file(state.join("setup.json")).unwrap();
    let _ = std::fs::remove_file(state.join("setup.log"));
    let filler = state.join("filler");
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!("cat /dev/zero > {} 2>/dev/null", filler.display()))
        .status();
    let (code, stderr) = run_setup(&dir, &state, "#!/bin/sh\nexit 0\n");
    assert_ne!(code, 0, "a setup that cannot record must not claim success");
    assert!(
        stderr.contains("setup.json") && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert!(!state.join("setup.json").exists());
}
