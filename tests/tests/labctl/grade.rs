use super::*;

const LAB: &str = r#"
name = "grade-test"
[files]
source = "files"
[[checks]]
name = "greeting exists"
run = 'test -f "$LAB_DIR/greeting"'
[[checks]]
name = "says hello"
run = 'grep -q hello "$LAB_DIR/greeting" && echo found'
[[checks]]
name = "student finished"
run = 'echo "not yet" >&2; exit 1'
fail_message = "Run the last step of the lab."
"#;

fn lab() -> TempDir {
    let dir = lab_folder("labctl-grade", LAB);
    dir.write("files/greeting", "hello\n", 0o644);
    dir
}

fn grade(agent: &Agent, lab: &TempDir, json: bool) -> std::process::Output {
    let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
    args.extend(conn(agent));
    // Agents start with a setup still running: grade once ready.
    args.extend(["--wait".to_owned(), "30".to_owned()]);
    args.extend([
        "--lab-dir".to_owned(),
        lab.join("files").display().to_string(),
    ]);
    if json {
        args.push("--json".into());
    }
    labctl(args)
}

#[test]
fn human_report() {
    let (agent, lab) = (Agent::start(AgentOptions::default()), lab());
    let out = grade(&agent, &lab, false);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("  ✓ greeting exists ("), "{text}");
    assert!(lines[1].starts_with("  ✓ says hello ("), "{text}");
    assert!(lines[2].starts_with("  ✗ student finished ("), "{text}");
    assert_eq!(lines[3], "      Run the last step of the lab.");
    assert_eq!(lines[4], "      exit code 1");
    assert!(text.contains("        │ not yet\n"), "{text}");
    assert!(
        text.ends_with("\ngrade-test: 2 of 3 checks passed, score 2/3\n"),
        "{text}"
    );
    assert!(
        stderr(&out).contains("grading `grade-test` (3 checks)"),
        "{}",
        describe(&out)
    );
}

#[test]
fn json_report_has_the_spec_shape() {
    let (agent, lab) = (Agent::start(AgentOptions::default()), lab());
    let out = grade(&agent, &lab, true);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&v),
        [
            "checks",
            "errors",
            "failed",
            "instance",
            "lab",
            "max_score",
            "passed",
            "score",
            "total"
        ]
    );
    // The life of the VM graded, as the agent names it.
    let instance = &v["instance"];
    assert!(
        lab_agent_proto::lifecycle::is_instance_id(instance["id"].as_str().unwrap()),
        "{instance}"
    );
    assert_eq!(instance["boots"], 1);
    assert!(instance["first_boot_at"].is_string() && instance["boot_id"].is_string());
    assert_eq!(
        (v["lab"].as_str(), v["passed"].as_u64(), v["total"].as_u64()),
        (Some("grade-test"), Some(2), Some(3))
    );
    let checks = v["checks"].as_array().unwrap();
    for c in checks {
        assert_eq!(
            keys(c),
            [
                "duration_ms",
                "error",
                "exit_code",
                "fail_message",
                "name",
                "passed",
                "points",
                "signal",
                "status",
                "stderr",
                "stderr_truncated",
                "stdout",
                "stdout_truncated",
                "timed_out"
            ]
        );
        assert!(c["duration_ms"].is_u64());
    }
    assert_eq!(checks[1]["name"], "says hello");
    assert_eq!(checks[1]["passed"], true);
    assert_eq!(checks[1]["exit_code"], 0);
    assert_eq!(checks[1]["stdout"], "found\n");
    assert_eq!(checks[1]["fail_message"], Value::Null);
    assert_eq!(checks[2]["passed"], false);
    assert_eq!(checks[2]["exit_code"], 1);
    assert_eq!(checks[2]["stderr"], "not yet\n");
    assert_eq!(checks[2]["fail_message"], "Run the last step of the lab.");
    assert_eq!(checks[2]["status"], "failed");
    assert_eq!(checks[2]["error"], Value::Null);
    assert_eq!(
        (v["failed"].as_u64(), v["errors"].as_u64()),
        (Some(1), Some(0))
    );
}

#[test]
fn all_passing_exits_0() {
    let agent = Agent::start(AgentOptions::default());
    let dir = lab_folder(
        "labctl-grade-ok",
        "name = \"ok\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
    );
    let mut args = vec!["grade".to_owned(), dir.path.display().to_string()];
    args.extend(conn(&agent));
    // Agents start with a setup still running: grade once ready.
    args.extend(["--wait".to_owned(), "30".to_owned()]);
    let out = labctl(args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        stdout(&out).ends_with("ok: the check passed, score 1/1\n"),
        "{}",
        describe(&out)
    );
}

/// `grade LAB --wait` without a number waits the lab's `[readiness]
/// timeout_secs`; a VM still setting up then is not graded (exit 3), and
/// the error says where it was stuck.
#[test]
fn wait_alone_waits_the_labs_readiness_timeout() {
    let agent = Agent::start(AgentOptions::default().setup("sleep 300\n"));
    let lab = lab_folder(
        "labctl-grade-lab-wait",
        "name = \"slow\"\n[readiness]\ntimeout_secs = 2\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
    );
    let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
    // `--wait` last but one: a flag after it, not a number.
    args.push("--wait".to_owned());
    args.extend(conn(&agent));
    let out = labctl(args);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let err = stderr(&out);
    let waited: f64 = {
        let rest = err
            .split("was not ready after ")
            .nth(1)
            .unwrap_or_else(|| panic!("{err}"));
        rest[..rest.find('s').unwrap()].parse().unwrap()
    };
    assert!((2.0..300.0).contains(&waited), "waited {waited} s: {err}");
    assert!(
        err.contains("stuck in state `setting_up` for the last "),
        "{err}"
    );
    assert!(!err.contains("passed"), "nothing graded: {err}");
}

/// `--instance ID` grades only that life of the VM: the id the agent
/// reports grades (exit 0, the report names it); another one (the VM was
/// reset) is exit 6, nothing run; an id that is not one is a usage error.
#[test]
fn instance_grades_only_that_life_of_the_vm() {
    let work = TempDir::new("labctl-instance");
    let ran = work.join("ran");
    let lab = lab_folder(
        "labctl-instance",
        &format!(
            "name = \"pinned\"\n[[checks]]\nname = \"runs\"\nrun = \"touch {}\"\n",
            ran.display()
        ),
    );
    let agent = Agent::start(AgentOptions::default());
    let run = |id: &str, json: bool| {
        let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
        args.extend(conn(&agent));
        args.extend(["--wait".to_owned(), "30".to_owned()]);
        args.extend(["--instance".to_owned(), id.to_owned()]);
        if json {
            args.push("--json".into());
        }
        labctl(args)
    };
    // Another instance: the VM this backend handed out is gone.
    let other = "0123456789abcdef0123456789abcdef";
    let out = run(other, false);
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("was reset (instance ")
            && err.contains(&format!(
                "is not the instance {other} the client is pinned to"
            ))
            && err.contains("the student's work inside it is gone"),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "{}", describe(&out));
    assert!(!ran.exists(), "a check ran on another instance");
    // The agent's own id grades, and `--json` names it.
    let client = lab_agent_client::Client::new(&agent.url(), &agent.token).unwrap();
    let id = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(client.ready())
        .unwrap()
        .instance
        .unwrap()
        .id;
    assert_ne!(id, other);
    let out = run(&id, true);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["instance"]["id"], id.as_str());
    assert!(ran.exists());
    // Not an id at all: exit 2 before anything is asked.
    let out = run("0123456789ABCDEF0123456789abcdef", false);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("invalid instance id"),
        "{}",
        describe(&out)
    );
}
