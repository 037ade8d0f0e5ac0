//! The VM's life in `labctl`: `wait` prints the timeline (and `--json`
//! carries it), its plain progress lines follow the cloud-init stage, and
//! `labctl timeline` sums up many VMs' answers. The agent is real, with a
//! stand-in for `/run/cloud-init` whose `status.json` the test writes.

use super::*;
use std::time::{SystemTime, UNIX_EPOCH};

/// A stand-in for `/run/cloud-init`: `status.json` written as cloud-init
/// writes it (whole, by rename), `result.json` when the final stage is done.
struct CloudInit {
    dir: TempDir,
    /// Wall-clock seconds a few seconds ago: the stages' stamps count from
    /// it (after the machine's boot, so the agent takes them as this boot's).
    t0: f64,
}

impl CloudInit {
    fn new(tag: &str) -> CloudInit {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let uptime = std::fs::read_to_string("/proc/uptime").unwrap();
        let uptime: f64 = uptime.split_whitespace().next().unwrap().parse().unwrap();
        assert!(uptime > 30.0, "the machine booted {uptime} s ago");
        CloudInit {
            dir: TempDir::new(tag),
            // Whole milliseconds, so each stage's duration is exact.
            t0: (now - 20.0).floor(),
        }
    }

    /// Each stage `(name, start, finished)` in seconds after `t0`.
    fn status(&self, stages: &[(&str, f64, Option<f64>)]) {
        let mut v1 = serde_json::Map::new();
        v1.insert("datasource".into(), "DataSourceNoCloud".into());
        for (name, start, finished) in stages {
            v1.insert(
                (*name).into(),
                serde_json::json!({
                    "errors": [],
                    "start": self.t0 + start,
                    "finished": finished.map(|f| self.t0 + f),
                }),
            );
        }
        let text = serde_json::json!({ "v1": v1 }).to_string();
        self.dir.write("status.json.tmp", &text, 0o644);
        std::fs::rename(
            self.dir.join("status.json.tmp"),
            self.dir.join("status.json"),
        )
        .unwrap();
    }

    fn done(&self) {
        self.dir.write(
            "result.json",
            r#"{"v1":{"datasource":"x","errors":[]}}"#,
            0o644,
        );
    }
}

/// Reads `labctl`'s stderr until a line is `wanted` (or it ends).
fn until_line(w: &mut Watched, wanted: impl Fn(&str) -> bool) {
    for line in w.lines.by_ref() {
        let line = line.unwrap();
        w.err.push_str(&line);
        w.err.push('\n');
        if wanted(&line) {
            return;
        }
    }
}

/// All four stages finished; setup (the agent's own `--run-setup`) ran in
/// the meantime.
const ALL_DONE: [(&str, f64, Option<f64>); 4] = [
    ("init-local", 1.0, Some(1.5)),
    ("init", 2.0, Some(4.5)),
    ("modules-config", 5.0, Some(6.0)),
    ("modules-final", 7.0, Some(10.0)),
];

/// `wait` prints the VM's life when ready: the instance, a row per phase
/// in order (durations as the stamps say), the root disk; `--json` keeps
/// its fields and carries them all in each VM's `ready`.
#[test]
fn wait_prints_the_timeline_and_json_carries_it() {
    let ci = CloudInit::new("labctl-life-ci");
    ci.status(&ALL_DONE);
    ci.done();
    let agent = Agent::start(AgentOptions::default().cloud_init_dir(ci.dir.path.clone()));
    let mut args = vec!["wait".to_owned()];
    args.extend(conn(&agent));
    let out = labctl(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = stdout(&out);
    // With cloud-init watched, this machine's own disk is judged: what
    // shows it lived before this agent's record (its machine-id, older
    // than this boot) follows the instance's line, one line a finding.
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("booted before this VM: "))
        .collect();
    let evidence = text
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("booted before this VM: "));
    assert_eq!(
        evidence.count(),
        text.matches("booted before this VM: ").count(),
        "{text}"
    );
    let first = rows[0];
    let id = first
        .strip_prefix("instance ")
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(lab_agent_proto::lifecycle::is_instance_id(id), "{text}");
    assert!(first.contains(", boot 1 (first boot "), "{text}");
    assert!(rows[1].starts_with("booted at 20"), "{text}");
    let row = |label: &str| -> Vec<String> {
        let line = rows
            .iter()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no row {label}: {text}"));
        line.trim_start()[label.len()..]
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let order: Vec<usize> = [
        "phase",
        "kernel → agent start",
        "cloud-init init-local",
        "cloud-init init ",
        "cloud-init modules-config",
        "cloud-init modules-final",
        "setup",
        "kernel → ready",
    ]
    .iter()
    .map(|label| {
        rows.iter()
            .position(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no row {label}: {text}"))
    })
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{text}");
    assert_eq!(row("cloud-init init-local")[2], "0.5", "{text}");
    assert_eq!(row("cloud-init init ")[2], "2.5", "{text}");
    assert_eq!(row("cloud-init modules-final")[2], "3.0", "{text}");
    let ready = row("kernel → ready");
    assert_eq!(ready[0], "0.0", "{text}");
    assert_eq!(ready[1], ready[2], "from boot: {text}");
    assert!(
        rows.last().unwrap().starts_with("root: ") && text.contains(" free"),
        "{text}"
    );

    args.push("--json".into());
    let out = labctl(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&v), ["ready", "vms"]);
    let vm = &v["vms"][0];
    assert_eq!(keys(vm), ["error", "ready", "state", "url"]);
    assert_eq!(vm["state"], "ready");
    let r = &vm["ready"];
    assert_eq!(r["instance"]["id"], id, "the same instance");
    assert_eq!(r["instance"]["boots"], 1);
    assert!(r["root"]["size_bytes"].as_u64().unwrap() > 0, "{r}");
    let t = &r["timeline"];
    assert_eq!(
        keys(&t["cloud_init"]),
        ["init", "init-local", "modules-config", "modules-final"]
    );
    let d = |s: &str| {
        let span = &t["cloud_init"][s];
        span["finished_secs"].as_f64().unwrap() - span["start_secs"].as_f64().unwrap()
    };
    assert!((d("init") - 2.5).abs() < 1e-6, "{t}");
    assert!(t["setup"]["finished_secs"].is_f64(), "{t}");
    assert!(t["ready_secs"].as_f64().unwrap() >= t["agent_started_secs"].as_f64().unwrap());
    // The fields `wait --json` had before, as they were.
    for key in ["state", "cloud_init", "setup"] {
        assert!(r.get(key).is_some(), "{key}: {r}");
    }
    assert_eq!(r["setup"]["state"], "succeeded");
    assert_eq!(r["cloud_init"]["done"], true);
}

/// Not on a terminal, progress is a plain line per phase: the state, and
/// the cloud-init stage running, each once (the long-polls in between
/// answer the same and print nothing).
#[test]
fn plain_progress_lines_follow_the_cloud_init_stage() {
    let ci = CloudInit::new("labctl-life-progress");
    ci.status(&[("init-local", 1.0, Some(1.5)), ("init", 2.0, None)]);
    let agent = Agent::start(AgentOptions::default().cloud_init_dir(ci.dir.path.clone()));
    let mut args = vec!["wait".to_owned(), "--timeout".to_owned(), "120".to_owned()];
    args.extend(conn(&agent));
    let mut labctl = Watched::spawn(&args);
    // Setup (`true`) may still be running at the first answer: the stage
    // is changed once the agent waits for cloud-init alone.
    let waiting_in = |stage: &str| {
        let end = format!("· cloud-init {stage}");
        move |l: &str| l.contains("waiting_for_cloud_init: ") && l.ends_with(&end)
    };
    until_line(&mut labctl, waiting_in("init"));
    ci.status(&[
        ("init-local", 1.0, Some(1.5)),
        ("init", 2.0, Some(4.5)),
        ("modules-config", 5.0, Some(6.0)),
        ("modules-final", 7.0, None),
    ]);
    until_line(&mut labctl, waiting_in("modules-final"));
    ci.status(&ALL_DONE);
    ci.done();
    let (out, err) = labctl.finish();
    assert_eq!(out.status.code(), Some(0), "{}\n{err}", describe(&out));
    let lines: Vec<&str> = err.lines().collect();
    for stage in ["init", "modules-final"] {
        let seen = lines.iter().filter(|l| waiting_in(stage)(l)).count();
        assert_eq!(seen, 1, "one line per phase, not per answer: {err}");
    }
    let progress = lines.iter().take_while(|l| !l.contains("ready after"));
    assert!(progress.clone().all(|l| l.starts_with('[')), "{err}");
    assert!(progress.count() >= 2, "{err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    assert!(err.contains("ready after"), "{err}");
    assert!(stdout(&out).contains("cloud-init modules-final"), "{err}");
}

/// Ready answers of three VMs as a backend logs them (one per line), one
/// from an agent without a timeline, and a `wait --json` output of two
/// more: known numbers, known statistics.
fn fixture() -> String {
    let answer = |agent: f64, setup: f64, ready: f64| {
        serde_json::json!({
            "state": "ready", "cloud_init": {"done": true, "errors": []},
            "setup": {"state": "succeeded", "exit_code": 0},
            "timeline": {
                "boot_at": "2026-12-03T10:00:00Z", "agent_started_secs": agent,
                "cloud_init": {
                    "init-local": {"start_secs": 1.0, "finished_secs": 1.5},
                    "modules-final": {"start_secs": 9.0, "finished_secs": ready - 0.1},
                },
                "setup": {"start_secs": 10.0, "finished_secs": 10.0 + setup},
                "ready_secs": ready,
            },
        })
    };
    let old = serde_json::json!({"state": "ready", "cloud_init": {"done": true},
        "setup": {"state": "succeeded"}});
    let wait = serde_json::json!({"ready": true, "vms": [
        {"url": "http://a", "state": "ready", "ready": answer(3.0, 80.0, 94.0), "error": null},
        {"url": "http://b", "state": "ready", "ready": answer(5.0, 250.0, 269.0), "error": null},
    ]});
    let mut text = String::new();
    for (agent, setup, ready) in [(2.0, 60.0, 82.0), (4.0, 130.0, 150.0), (6.0, 280.0, 300.0)] {
        text.push_str(&answer(agent, setup, ready).to_string());
        text.push('\n');
    }
    text.push_str(&old.to_string());
    text.push('\n');
    text.push_str(&wait.to_string());
    text.push('\n');
    text
}

/// `labctl timeline FILE`: per phase the count, min, median, p90 and max
/// (82 94 150 269 300: median 150, p90 287.6); the answer without a
/// timeline is counted and named on stderr; stdin (`-`, and no FILE) reads
/// the same; `--svg FILE` draws it (a row per phase measured).
#[test]
fn timeline_sums_up_many_vms() {
    let dir = TempDir::new("labctl-timeline");
    let file = dir.write("ready.ndjson", &fixture(), 0o644);
    let picture = dir.path.join("timeline.svg");
    let out = labctl([
        "timeline",
        file.to_str().unwrap(),
        "--svg",
        picture.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = stdout(&out);
    let row = |label: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label}: {text}"));
        line[label.len()..]
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        row("kernel → ready"),
        ["5", "82.0", "150.0", "287.6", "300.0"]
    );
    assert_eq!(
        row("kernel → agent start"),
        ["5", "2.0", "4.0", "5.6", "6.0"]
    );
    assert_eq!(row("setup"), ["5", "60.0", "130.0", "268.0", "280.0"]);
    assert_eq!(
        row("cloud-init init-local"),
        ["5", "0.5", "0.5", "0.5", "0.5"]
    );
    assert_eq!(row("cloud-init init "), ["0", "-", "-", "-", "-"]);
    assert_eq!(row("VM created → ready"), ["0", "-", "-", "-", "-"]);
    let svg = std::fs::read_to_string(&picture).unwrap();
    assert!(
        svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(
        svg.contains("kernel → ready: 5 VMs, min 82 s, median 150 s, p90 288 s, max 300 s"),
        "{svg}"
    );
    let err = stderr(&out);
    assert!(
        err.contains("note: 1 of 6 answers carry no timeline"),
        "{err}"
    );

    for args in [vec!["timeline", "--json", "-"], vec!["timeline", "--json"]] {
        let mut child = Command::new(labctl_bin())
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(fixture().as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["answers"], 6);
        assert_eq!(v["timelines"], 5);
        assert_eq!(v["without_timeline"], 1);
        let phases = v["phases"].as_array().unwrap();
        assert_eq!(phases.len(), 11);
        let ready = &phases[9];
        assert_eq!(ready["phase"], "ready");
        assert_eq!(ready["count"], 5);
        assert_eq!(ready["min_secs"], 82.0);
        assert_eq!(ready["median_secs"], 150.0);
        assert_eq!(ready["p90_secs"], 287.6);
        assert_eq!(ready["max_secs"], 300.0);
        let modules_final = &phases[7];
        assert_eq!(modules_final["phase"], "modules-final");
        // Each ready - 9.1: 72.9 84.9 140.9 259.9 290.9.
        assert_eq!(modules_final["median_secs"], 140.9);
        assert_eq!(phases[5]["phase"], "init");
        assert_eq!(phases[5]["count"], 0);
        assert_eq!(phases[5]["median_secs"], Value::Null);
        assert_eq!(phases[0]["phase"], "scheduled");
        assert_eq!(phases[0]["count"], 0);
    }
}

/// What is not an answer is a usage error naming the file and where; a
/// missing file names itself.
#[test]
fn timeline_names_what_it_cannot_read() {
    let dir = TempDir::new("labctl-timeline-bad");
    let mut text = fixture();
    text.push_str("{\"state\": \"ready\", oops\n");
    let file = dir.write("bad.ndjson", &text, 0o644);
    let out = labctl(["timeline", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("`{}` is not JSON at line 6", file.display())),
        "{err}"
    );
    // A document that is JSON but no answer: its number in the file.
    let file = dir.write("number.ndjson", "{}\n42\n", 0o644);
    let out = labctl(["timeline", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let want = format!(
        "error: `{}`, document 2: a number is no `/v1/ready` answer\n",
        file.display()
    );
    assert_eq!(stderr(&out), want);
    let missing = dir.join("missing.ndjson");
    let out = labctl(["timeline", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains(&format!("failed to read `{}`", missing.display())),
        "{}",
        describe(&out)
    );
}

/// On the deadline, the error names the phase the VM was stuck in: its
/// state and the cloud-init stage running.
#[test]
fn the_deadline_names_the_cloud_init_stage() {
    let ci = CloudInit::new("labctl-life-deadline");
    ci.status(&[("init-local", 1.0, Some(1.5)), ("init", 2.0, None)]);
    let agent = Agent::start(AgentOptions::default().cloud_init_dir(ci.dir.path.clone()));
    let mut args = vec!["wait".to_owned(), "--timeout".to_owned(), "2".to_owned()];
    args.extend(conn(&agent));
    let out = labctl(&args);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let err = stderr(&out);
    // The state is `waiting_for_cloud_init`, or on a loaded machine still
    // `setting_up` (setup `true` not yet recorded): the stage either way.
    assert!(err.contains("stuck in state `"), "{err}");
    assert!(
        err.contains("` (cloud-init stage `init`) for the last "),
        "{err}"
    );
    assert_eq!(stdout(&out), "", "no life of a VM that is not ready");
}
