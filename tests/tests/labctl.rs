//! `labctl` end to end: the real binary against real agents, its exit
//! statuses, what it prints where, and `labctl try examples/hello-lab`.

use lab_agent_tests::local::{
    Agent, AgentOptions, HELLO_LAB_BEFORE_THE_STEP, ReservedPort, TempDir, agent_bin,
    check_outcomes, describe, is_root, labctl, labctl_bin, new_token, write_token,
};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn conn(agent: &Agent) -> Vec<String> {
    vec![
        "--url".into(),
        agent.url(),
        "--token-file".into(),
        agent.token_file.display().to_string(),
    ]
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

mod wait {
    use super::*;

    #[test]
    fn rides_out_an_agent_that_starts_late() {
        let dir = TempDir::new("labctl-late");
        let token = new_token();
        let token_file = dir.join("token");
        write_token(&token_file, &token);
        let port = ReservedPort::new();
        let mut child = Command::new(labctl_bin())
            .args(["wait", "--url", &port.url(), "--timeout", "120"])
            .arg("--token-file")
            .arg(&token_file)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Not a terminal: plain progress lines, one per change. The agent
        // starts once labctl has reported the closed port.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut err = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            err.push_str(&line);
            err.push('\n');
            if line.contains("unreachable: connection refused") {
                break;
            }
        }
        assert!(err.contains("unreachable: connection refused"), "{err}");
        let _agent = Agent::start(
            AgentOptions::default()
                .listen(port.addr())
                .token(token)
                .setup("sleep 1"),
        );
        for line in lines {
            err.push_str(&line.unwrap());
            err.push('\n');
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}\n{err}", describe(&out));
        assert!(err.contains("ready after"), "{err}");
        assert_eq!(stdout(&out), "", "data only on stdout, and there is none");
    }

    #[test]
    fn a_failed_setup_exits_4_with_reason_and_log_tail() {
        let agent = Agent::start(
            AgentOptions::default()
                .setup("echo 'installing nginx'; echo 'E: unable to locate package' >&2; exit 100"),
        );
        let mut args = vec!["wait".to_owned()];
        args.extend(conn(&agent));
        let out = labctl(args);
        assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains("E: unable to locate package"),
            "log tail shown: {err}"
        );
        assert!(err.contains("installing nginx"), "{err}");
        assert!(
            err.contains("error: the lab is not ready at http://127.0.0.1:"),
            "{err}"
        );
        assert!(err.contains("100"), "exit code shown: {err}");
        assert!(err.contains("hint: "), "{err}");
    }

    #[test]
    fn a_wrong_token_exits_2_at_once() {
        let agent = Agent::start(AgentOptions::default());
        let dir = TempDir::new("labctl-badtoken");
        let bad = dir.join("token");
        write_token(&bad, "a-token-that-is-not-the-agents-token-at-all");
        let out = labctl([
            "wait",
            "--url",
            &agent.url(),
            "--timeout",
            "300",
            "--token-file",
            bad.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "error: status 401 when getting {}/v1/ready",
                agent.url()
            )),
            "{err}"
        );
        assert!(err.contains("hint: the token does not match"), "{err}");
        assert!(
            !err.contains("a-token-that-is-not"),
            "the token is never printed: {err}"
        );
    }

    #[test]
    fn nothing_listening_exits_3_after_the_timeout() {
        let dir = TempDir::new("labctl-unreach");
        let tf = dir.join("token");
        write_token(&tf, &new_token());
        let nothing_listens = ReservedPort::new();
        let url = nothing_listens.url();
        let out = labctl([
            "wait",
            "--url",
            &url,
            "--timeout",
            "1",
            "--token-file",
            tf.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("error: {url} was not ready after")),
            "{err}"
        );
        assert!(err.contains("never answered (connection refused)"), "{err}");
    }

    #[test]
    fn several_vms_one_failing_json() {
        let good = Agent::start(AgentOptions::default());
        let bad =
            Agent::start(AgentOptions::default().setup("echo 'kubeadm init failed' >&2; exit 1"));
        let out = labctl([
            "wait",
            "--json",
            "--url",
            &good.url(),
            "--url",
            &bad.url(),
            "--token-file",
            good.token_file.to_str().unwrap(),
            "--token-file",
            bad.token_file.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
        assert_eq!(v["ready"], false);
        let vms = v["vms"].as_array().unwrap();
        assert_eq!(vms.len(), 2);
        assert_eq!(vms[0]["url"], good.url());
        assert_eq!(vms[0]["state"], "ready");
        assert_eq!(vms[0]["error"], Value::Null);
        assert_eq!(vms[1]["url"], bad.url());
        assert_eq!(vms[1]["state"], "failed");
        assert_eq!(vms[1]["error"]["kind"], "setup_failed");
        assert_eq!(vms[1]["ready"]["setup"]["exit_code"], 1);
        assert!(
            vms[1]["ready"]["setup"]["log_tail"]
                .as_str()
                .unwrap()
                .contains("kubeadm init failed")
        );
        let err = stderr(&out);
        assert!(err.contains("1 of 2 VMs are not ready"), "{err}");
    }

    #[test]
    fn token_files_must_match_urls() {
        let out = labctl([
            "wait",
            "--url",
            "http://a:1",
            "--url",
            "http://b:1",
            "--url",
            "http://c:1",
            "--token-file",
            "/x",
            "--token-file",
            "/y",
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            stderr(&out).contains("2 `--token-file`s for 3 `--url`s"),
            "{}",
            describe(&out)
        );
    }
}

mod exec {
    use super::*;

    fn exec(agent: &Agent, args: &[&str]) -> std::process::Output {
        let mut all: Vec<String> = vec!["exec".into()];
        all.extend(conn(agent));
        all.extend(args.iter().map(|s| s.to_string()));
        labctl(all)
    }

    #[test]
    fn status_and_output_pass_through() {
        let agent = Agent::start(AgentOptions::default());
        let out = exec(&agent, &["--", "echo out; echo err >&2; exit 3"]);
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert_eq!(stdout(&out), "out\n");
        assert_eq!(stderr(&out), "err\n");

        let out = exec(&agent, &["--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));

        // Words are joined as ssh joins them.
        let out = exec(
            &agent,
            &[
                "--env",
                "WHO=world",
                "--cwd",
                "/tmp",
                "--",
                "echo",
                "hello",
                "$WHO",
                "from",
                "$PWD",
            ],
        );
        assert_eq!(
            stdout(&out),
            "hello world from /tmp\n",
            "{}",
            describe(&out)
        );
    }

    #[test]
    fn a_signal_becomes_128_plus_n() {
        let agent = Agent::start(AgentOptions::default());
        let out = exec(&agent, &["--", "kill -KILL $$"]);
        assert_eq!(out.status.code(), Some(137), "{}", describe(&out));
        let out = exec(&agent, &["--timeout", "1", "--", "sleep 30"]);
        assert!(out.status.code().unwrap() > 128, "{}", describe(&out));
        assert!(
            stderr(&out).contains("ran past `--timeout 1` and was killed"),
            "{}",
            describe(&out)
        );
    }

    #[test]
    fn a_command_that_cannot_start_is_a_usage_error() {
        let agent = Agent::start(AgentOptions::default());
        let out = exec(&agent, &["--user", "no-such-user-here", "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            stderr(&out).contains(&format!(
                "error: status 400 when posting to {}/v1/exec",
                agent.url()
            )),
            "{}",
            describe(&out)
        );
        let out = exec(&agent, &["--env", "NOEQUALS", "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(stderr(&out).contains("`--env NOEQUALS` is not of the form `KEY=VALUE`"));
    }
}

mod grade {
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
        let dir = TempDir::new("labctl-grade");
        dir.write("lab.toml", LAB, 0o644);
        dir.write("files/greeting", "hello\n", 0o644);
        dir
    }

    fn grade(agent: &Agent, lab: &TempDir, json: bool) -> std::process::Output {
        let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
        args.extend(conn(agent));
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
            text.ends_with("\ngrade-test: 2 of 3 checks passed\n"),
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
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
        let keys = |v: &Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&v), ["checks", "lab", "passed", "total"]);
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
                    "exit_code",
                    "fail_message",
                    "name",
                    "passed",
                    "stderr",
                    "stdout"
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
    }

    #[test]
    fn all_passing_exits_0() {
        let agent = Agent::start(AgentOptions::default());
        let dir = TempDir::new("labctl-grade-ok");
        dir.write(
            "lab.toml",
            "name = \"ok\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
            0o644,
        );
        let mut args = vec!["grade".to_owned(), dir.path.display().to_string()];
        args.extend(conn(&agent));
        let out = labctl(args);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert!(
            stdout(&out).ends_with("ok: all 1 checks passed\n"),
            "{}",
            describe(&out)
        );
    }
}

mod lab_toml {
    use super::*;

    /// Each broken lab.toml, and what the message must name.
    #[test]
    fn bad_labs_exit_2_naming_file_and_field() {
        let cases: &[(&str, &[&str])] = &[
            ("name = \"x\"\nsetpu = 1\n", &["unknown field `setpu`"]),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \" \"\n",
                &["checks[0].run", "is empty"],
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
                &["checks[1].name", "used by an earlier check"],
            ),
            (
                "name = \"x\"\n[setup]\ntimeout_secs = 0\n",
                &["setup.timeout_secs is 0", "from 1 to 3600"],
            ),
            (
                "name = \"x\"\n[setup]\nscript = \"setup.sh\"\n",
                &["setup.script names `setup.sh`", "not a file"],
            ),
            (
                "name = \"x\"\n[files]\nsource = \"files\"\n",
                &["files.source names `files`"],
            ),
            ("name = [\n", &["not valid lab.toml"]),
        ];
        let tf = TempDir::new("labctl-badlab-token");
        let token = tf.join("token");
        write_token(&token, &new_token());
        for (text, wants) in cases {
            let dir = TempDir::new("labctl-badlab");
            dir.write("lab.toml", text, 0o644);
            let file = dir.join("lab.toml").display().to_string();
            let lab = dir.path.display().to_string();
            for args in [
                vec![
                    "grade",
                    &lab,
                    "--url",
                    "http://127.0.0.1:1",
                    "--token-file",
                    token.to_str().unwrap(),
                ],
                vec!["try", &lab, "--agent", agent_bin().to_str().unwrap()],
            ] {
                let out = labctl(&args);
                assert_eq!(out.status.code(), Some(2), "{text:?}: {}", describe(&out));
                let err = stderr(&out);
                assert!(err.starts_with("error: "), "{err}");
                assert!(err.contains(&format!("`{file}`")), "names the file: {err}");
                for want in *wants {
                    assert!(err.contains(want), "{text:?}: {err} lacks {want:?}");
                }
                assert_eq!(stdout(&out), "");
            }
        }
    }

    #[test]
    fn a_folder_without_lab_toml() {
        let dir = TempDir::new("labctl-nolab");
        let out = labctl(["try", dir.path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        assert!(err.contains("lab.toml"), "{err}");
        assert!(
            err.contains("hint: a lab is a folder with a `lab.toml` in it"),
            "{err}"
        );
    }
}

mod r#try {
    use super::*;

    fn try_lab(lab: &Path, extra: &[&str]) -> std::process::Output {
        let mut args = vec![
            "try".to_owned(),
            lab.display().to_string(),
            "--agent".into(),
            agent_bin().display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        labctl(args)
    }

    /// The temp dir `try` used, from its "staged … in `DIR/lab`" line.
    fn staged_dir(err: &str) -> PathBuf {
        let start = err.find(" in `").expect("a staged line") + 5;
        let end = start + err[start..].find('`').unwrap();
        PathBuf::from(&err[start..end]).parent().unwrap().to_owned()
    }

    #[test]
    fn hello_lab_end_to_end() {
        if !is_root() {
            eprintln!("skipped: hello-lab's setup creates a user, which needs root");
            return;
        }
        let lab = repo_root().join("examples/hello-lab");

        let out = try_lab(&lab, &["--json"]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "one check waits for the student: {}",
            describe(&out)
        );
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
        assert_eq!(
            (v["lab"].as_str(), v["passed"].as_u64(), v["total"].as_u64()),
            (Some("hello-lab"), Some(3), Some(4))
        );
        assert_eq!(check_outcomes(&v), HELLO_LAB_BEFORE_THE_STEP);
        let last = &v["checks"][3];
        assert!(
            last["fail_message"]
                .as_str()
                .unwrap()
                .contains("chmod +x ~/hello.sh")
        );
        assert!(
            last["stderr"]
                .as_str()
                .unwrap()
                .contains("Permission denied"),
            "{last}"
        );
        // The interactive-only banner never leaks into check output.
        for c in v["checks"].as_array().unwrap() {
            for stream in ["stdout", "stderr"] {
                assert!(
                    !c[stream].as_str().unwrap().contains("Welcome to hello-lab"),
                    "{c}"
                );
            }
        }
        let err = stderr(&out);
        assert!(err.contains("ready after"), "{err}");
        assert!(!staged_dir(&err).exists(), "temp dir removed");

        let out = try_lab(&lab, &[]);
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        let text = stdout(&out);
        assert!(text.contains("  ✓ student account exists ("), "{text}");
        assert!(text.contains("  ✗ hello.sh runs ("), "{text}");
        assert!(
            text.ends_with("hello-lab: 3 of 4 checks passed\n"),
            "{text}"
        );
    }

    fn failing_lab() -> TempDir {
        let dir = TempDir::new("labctl-try-fail");
        dir.write(
            "lab.toml",
            "name = \"broken\"\n[setup]\nscript = \"setup.sh\"\n[files]\nsource = \"files\"\n\
             [[checks]]\nname = \"files staged\"\nrun = 'test -x \"$LAB_DIR/bin/tool\"'\n",
            0o644,
        );
        dir.write(
            "setup.sh",
            "echo \"setting up from $LAB_DIR\"\necho 'fatal: no network' >&2\nexit 9\n",
            0o644,
        );
        dir.write("files/bin/tool", "#!/bin/sh\n", 0o750);
        dir
    }

    #[test]
    fn a_failing_setup_exits_4_with_its_log_and_cleans_up() {
        let lab = failing_lab();
        let out = try_lab(&lab.path, &[]);
        assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
        let err = stderr(&out);
        assert!(err.contains("fatal: no network"), "{err}");
        assert!(
            err.contains("setting up from /"),
            "LAB_DIR reached setup: {err}"
        );
        assert!(err.contains("error: the lab is not ready"), "{err}");
        assert_eq!(stdout(&out), "", "no report without --keep-going");
        assert!(!staged_dir(&err).exists(), "temp dir removed");
    }

    #[test]
    fn keep_going_grades_anyway_and_modes_are_kept() {
        let lab = failing_lab();
        let out = try_lab(&lab.path, &["--keep-going", "--json"]);
        assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
        assert_eq!(v["checks"][0]["name"], "files staged");
        assert_eq!(v["checks"][0]["passed"], true, "staged with its mode: {v}");
    }

    #[test]
    fn a_missing_agent_is_a_usage_error() {
        let lab = failing_lab();
        let out = labctl([
            "try",
            lab.path.to_str().unwrap(),
            "--agent",
            "/nonexistent/lab-agent",
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(stderr(&out).contains("`--agent /nonexistent/lab-agent` is not a file"));
    }
}
