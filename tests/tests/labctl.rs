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

/// A `labctl` running in the background, its stderr read line by line, so
/// a test acts once it reports something (an event, not a sleep).
struct Watched {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStderr>>,
    /// Stderr so far.
    err: String,
}

impl Watched {
    fn spawn<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Watched {
        let mut child = Command::new(labctl_bin())
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        Watched {
            child,
            lines,
            err: String::new(),
        }
    }

    /// Reads stderr until a line contains `needle` (or it ends).
    fn until(&mut self, needle: &str) {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            self.err.push_str(&line);
            self.err.push('\n');
            if line.contains(needle) {
                return;
            }
        }
    }

    /// Reads the rest and waits: the output (its stderr is in `err`).
    fn finish(mut self) -> (std::process::Output, String) {
        for line in self.lines.by_ref() {
            self.err.push_str(&line.unwrap());
            self.err.push('\n');
        }
        (self.child.wait_with_output().unwrap(), self.err)
    }
}

/// A lab folder holding this `lab.toml`; a test adds what else it needs.
fn lab_folder(tag: &str, lab_toml: &str) -> TempDir {
    let dir = TempDir::new(tag);
    dir.write("lab.toml", lab_toml, 0o644);
    dir
}

/// `labctl try LAB --agent AGENT` with this tree's agent, then `extra`.
fn try_args(lab: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "try".to_owned(),
        lab.display().to_string(),
        "--agent".into(),
        agent_bin().display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn try_lab(lab: &Path, extra: &[&str]) -> std::process::Output {
    labctl(try_args(lab, extra))
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
        let mut labctl = Watched::spawn([
            "wait",
            "--url",
            &port.url(),
            "--timeout",
            "120",
            "--token-file",
            token_file.to_str().unwrap(),
        ]);
        // Not a terminal: plain progress lines, one per change. The agent
        // starts once labctl has reported the closed port.
        labctl.until("unreachable: connection refused");
        let err = &labctl.err;
        assert!(err.contains("unreachable: connection refused"), "{err}");
        let _agent = Agent::start(
            AgentOptions::default()
                .listen(port.addr())
                .token(token)
                .setup("sleep 1"),
        );
        let (out, err) = labctl.finish();
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
    fn profile_chooses_the_startup_files() {
        let agent = Agent::start(AgentOptions::default());
        let login_shell = |extra: &[&str]| {
            let mut args = extra.to_vec();
            args.extend(["--", "shopt -q login_shell"]);
            exec(&agent, &args).status.code()
        };
        assert_eq!(login_shell(&[]), Some(0));
        assert_eq!(login_shell(&["--profile", "login"]), Some(0));
        assert_eq!(login_shell(&["--profile", "none"]), Some(1));
        let out = exec(&agent, &["--profile", "user", "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            stderr(&out).contains("`login`, `system` or `none`"),
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

    /// The limits are the request's, checked before anything is sent; a
    /// valid one reaches the agent (which, on this host, has no controller
    /// for it and runs the command under its RLIMIT_NPROC fallback).
    #[test]
    fn limits_are_checked_and_sent() {
        let agent = Agent::start(AgentOptions::default());
        for (args, says) in [
            (&["--max-pids", "0"][..], "max_pids is 0: use 1 to 16384"),
            (&["--max-pids", "99999"][..], "max_pids is 99999"),
            (&["--max-memory", "1"][..], "use at least 16777216 (16 MiB)"),
        ] {
            let mut all = args.to_vec();
            all.extend(["--", "true"]);
            let out = exec(&agent, &all);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
            assert!(stderr(&out).contains(says), "{args:?}: {}", describe(&out));
        }
        let out = exec(
            &agent,
            &[
                "--user",
                "nobody",
                "--max-pids",
                "77",
                "--max-memory",
                "64",
                "--",
                "ulimit -u",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(stdout(&out), "77\n", "RLIMIT_NPROC from --max-pids");
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
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
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
                "lab",
                "max_score",
                "passed",
                "score",
                "total"
            ]
        );
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
                &["check `a`: run is empty"],
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
                &["check `a`: name is used by an earlier check"],
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
            let dir = lab_folder("labctl-badlab", text);
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
        // Then what the setup changed, in the sandbox only.
        assert!(
            text.contains("\nhello-lab: 3 of 4 checks passed, score 3/5\nthe lab changed "),
            "{text}"
        );
        assert!(v["changes"]["added"].is_array(), "{v}");
    }

    fn failing_lab() -> TempDir {
        let dir = lab_folder(
            "labctl-try-fail",
            "name = \"broken\"\n[setup]\nscript = \"setup.sh\"\n[files]\nsource = \"files\"\n\
             [[checks]]\nname = \"files staged\"\nrun = 'test -x \"$LAB_DIR/bin/tool\"'\n",
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

/// The lab author's side of grading: statuses, selection, readiness,
/// output limits, points.
mod grading {
    use super::*;
    use std::time::{Duration, Instant};

    fn lab(toml: &str) -> TempDir {
        lab_folder("labctl-author", toml)
    }

    fn grade(agent: &Agent, lab: &TempDir, extra: &[&str]) -> std::process::Output {
        let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
        args.extend(conn(agent));
        // Agents start with a setup still running: grade once ready.
        args.extend(["--wait".to_owned(), "30".to_owned()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        labctl(args)
    }

    fn json(out: &std::process::Output) -> Value {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(out)))
    }

    /// A check with an unknown user is the author's mistake: `error`, exit
    /// 5 (over the other check's failure), and the student-facing message
    /// is never shown for it.
    #[test]
    fn an_unknown_user_is_an_error_not_a_failure() {
        let agent = Agent::start(AgentOptions::default());
        let lab = lab(r#"
name = "typo"
[[checks]]
name = "typo in user"
run = "true"
user = "no-such-user-xq"
fail_message = "Student: do the step."
[[checks]]
name = "student not done"
run = "exit 1"
fail_message = "Finish the lab."
"#);
        let out = grade(&agent, &lab, &["--json"]);
        assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
        let v = json(&out);
        let c = &v["checks"][0];
        assert_eq!(c["status"], "error", "{c}");
        assert_eq!(c["passed"], false);
        assert_eq!(c["fail_message"], Value::Null, "{c}");
        assert!(
            c["error"].as_str().unwrap().contains("no-such-user-xq"),
            "{c}"
        );
        assert_eq!(v["checks"][1]["status"], "failed");
        assert_eq!(
            (v["errors"].as_u64(), v["failed"].as_u64()),
            (Some(1), Some(1))
        );

        let out = grade(&agent, &lab, &[]);
        assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
        let text = stdout(&out);
        assert!(text.starts_with("  ! typo in user ("), "{text}");
        assert!(text.contains("could not run"), "{text}");
        assert!(!text.contains("Student: do the step."), "{text}");
        assert!(text.contains("Finish the lab."), "{text}");
        assert!(text.contains("1 of them could not run"), "{text}");
    }

    /// A setup that runs until the test creates `go`: no stray process
    /// is left behind when the test ends.
    fn setup_until(go: &Path) -> String {
        format!(
            "for i in $(seq 600); do [ -e '{}' ] && exit 0; sleep 0.1; done; exit 1\n",
            go.display()
        )
    }

    #[test]
    fn a_vm_still_setting_up_is_not_graded_unless_wait() {
        let dir = TempDir::new("labctl-notready");
        let (go, ran) = (dir.join("go"), dir.join("ran"));
        let agent = Agent::start(AgentOptions::default().setup(&setup_until(&go)));
        let lab = lab(&format!(
            "name = \"early\"\n[[checks]]\nname = \"marks\"\nrun = \"touch '{}'\"\n",
            ran.display()
        ));
        let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
        args.extend(conn(&agent));
        let out = labctl(args);
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        let err = stderr(&out);
        assert!(err.contains("is not ready, so it was not graded"), "{err}");
        assert!(err.contains("`setting_up`"), "names the state: {err}");
        assert!(err.contains("--wait SECS"), "{err}");
        assert!(!ran.exists(), "no check ran");

        // `--wait` waits it out: the setup ends once labctl reports waiting.
        let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
        args.extend(conn(&agent));
        args.extend(["--wait".into(), "60".into()]);
        let mut labctl = Watched::spawn(&args);
        labctl.until("setting_up");
        assert!(!ran.exists(), "nothing ran during setup: {}", labctl.err);
        std::fs::write(&go, "").unwrap();
        let (out, err) = labctl.finish();
        assert_eq!(out.status.code(), Some(0), "{}\n{err}", describe(&out));
        assert!(ran.exists(), "the check ran once ready: {err}");
    }

    #[test]
    fn cut_output_and_timeouts_are_reported() {
        let agent = Agent::start(AgentOptions::default());
        let lab = lab(r#"
name = "floods"
[[checks]]
name = "floods"
run = "yes | head -c 200000; exit 1"
max_output_bytes = 1000
[[checks]]
name = "hangs"
run = "sleep 30"
timeout_secs = 1
"#);
        let out = grade(&agent, &lab, &["--json"]);
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        let v = json(&out);
        let (flood, hang) = (&v["checks"][0], &v["checks"][1]);
        assert_eq!(flood["stdout_truncated"], true, "{flood}");
        assert_eq!(flood["stderr_truncated"], false);
        assert!(flood["stdout"].as_str().unwrap().len() <= 1000);
        assert_eq!(hang["timed_out"], true, "{hang}");
        assert_eq!(hang["status"], "failed");
        assert_eq!(hang["exit_code"], Value::Null);

        let out = grade(&agent, &lab, &["--check", "floods"]);
        let text = stdout(&out);
        assert!(
            text.contains("stdout (cut at the check's `max_output_bytes`"),
            "{}",
            describe(&out)
        );
        assert!(!text.contains("(last 10 lines)"), "{text}");
    }

    #[test]
    fn points_score_and_check_selection() {
        let agent = Agent::start(AgentOptions::default());
        let lab = lab(r#"
name = "scored"
[[checks]]
name = "two"
run = "true"
points = 2
[[checks]]
name = "three"
run = "false"
points = 3
[[checks]]
name = "free"
run = "true"
points = 0
[[checks]]
name = "one"
run = "true"
"#);
        let out = grade(&agent, &lab, &["--json"]);
        let v = json(&out);
        assert_eq!(
            (v["score"].as_u64(), v["max_score"].as_u64()),
            (Some(3), Some(6)),
            "{v}"
        );
        assert_eq!(v["checks"][1]["points"], 3);

        let out = grade(
            &agent,
            &lab,
            &["--json", "--check", "one", "--check", "two"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let v = json(&out);
        assert_eq!(
            check_outcomes(&v),
            [("two", true), ("one", true)],
            "the lab's order"
        );
        assert_eq!(
            (v["total"].as_u64(), v["score"].as_u64()),
            (Some(2), Some(3))
        );

        let out = grade(&agent, &lab, &["--check", "nope"]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        assert!(err.contains("no check named `nope`"), "{err}");
        assert!(
            err.contains("`two`, `three`, `free`, `one`"),
            "lists the names: {err}"
        );
    }

    /// No answer in time is an error of the platform, not a failure, and
    /// the hint names the flag that gives the agent longer.
    #[test]
    fn an_answer_that_never_comes_is_an_error_with_the_timeout_hint() {
        let agent = Agent::start(AgentOptions::default());
        // SIGTERM ignored: the agent answers only after its kill grace,
        // later than `--timeout 1` allows.
        let lab = lab(
            "name = \"slow\"\n[[checks]]\nname = \"stubborn\"\nrun = \"trap '' TERM; sleep 30\"\ntimeout_secs = 1\n",
        );
        let out = grade(&agent, &lab, &["--timeout", "1"]);
        assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
        let text = stdout(&out);
        assert!(text.contains("could not run"), "{text}");
        assert!(text.contains("`labctl grade --timeout SECS`"), "{text}");
    }

    /// Against an agent started with `--lab-dir`, `grade` uses that
    /// folder without being told: the agent reports it in `/v1/info`.
    #[test]
    fn lab_dir_comes_from_the_agent() {
        let files = TempDir::new("labctl-labdir");
        files.write("greeting", "hello\n", 0o644);
        let agent = Agent::start(AgentOptions {
            lab_dir: Some(files.path.clone()),
            ..AgentOptions::default()
        });
        let lab = lab(
            "name = \"d\"\n[[checks]]\nname = \"sees it\"\nrun = 'grep -q hello \"$LAB_DIR/greeting\"'\n",
        );
        let out = grade(&agent, &lab, &[]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert!(
            stderr(&out).contains(&format!("LAB_DIR={}", files.path.display())),
            "{}",
            describe(&out)
        );
    }

    /// Two VMs, one ready at once: each summary line has its own time.
    #[test]
    fn wait_times_are_per_vm() {
        let dir = TempDir::new("labctl-pervm");
        let go = dir.join("go");
        let fast = Agent::start(AgentOptions::default());
        let slow = Agent::start(AgentOptions::default().setup(&setup_until(&go)));
        let mut labctl = Watched::spawn([
            "wait",
            "--url",
            &fast.url(),
            "--url",
            &slow.url(),
            "--token-file",
            fast.token_file.to_str().unwrap(),
            "--token-file",
            slow.token_file.to_str().unwrap(),
        ]);
        let started = Instant::now();
        labctl.until("setting_up");
        // The slow VM's setup must take a while, so that one shared clock
        // for both summaries would be visibly wrong for the fast one.
        std::thread::sleep(Duration::from_millis(1500).saturating_sub(started.elapsed()));
        std::fs::write(&go, "").unwrap();
        let (out, err) = labctl.finish();
        assert!(out.status.success(), "{}\n{err}", describe(&out));
        let secs = |url: &str| -> f64 {
            let line = err
                .lines()
                .find(|l| l.starts_with(&format!("{url}: ready after ")))
                .unwrap_or_else(|| panic!("no summary for {url}: {err}"));
            line.rsplit(' ')
                .next()
                .unwrap()
                .trim_end_matches('s')
                .parse()
                .unwrap()
        };
        assert!(secs(&fast.url()) < 1.0, "{err}");
        assert!(secs(&slow.url()) >= 1.0, "{err}");
    }
}

mod lint {
    use super::*;

    fn lint(lab: &TempDir) -> std::process::Output {
        labctl(["lint", lab.path.to_str().unwrap()])
    }

    #[test]
    fn a_clean_lab_passes_with_its_budget() {
        let lab = lab_folder(
            "labctl-lint-ok",
            "name = \"ok\"\n[setup]\nscript = \"setup.sh\"\n[[checks]]\nname = \"a\"\nrun = \"test -d /\"\n",
        );
        lab.write("setup.sh", "echo ok\n", 0o755);
        let out = lint(&lab);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains("lint: `ok` has no problems (1 check)"),
            "{err}"
        );
        assert!(
            err.contains("budget (amd64): agent"),
            "with the agent: {err}"
        );
    }

    #[test]
    fn model_problems_are_listed_together() {
        let lab = lab_folder(
            "labctl-lint-model",
            "name = \"x\"\n[setup]\nscript = \"setup.sh\"\ntimeout_secs = 0\n\
             [[checks]]\nname = \"a\"\nrun = \"true\"\npoints = -1\n\
             [[checks]]\nname = \"b\"\nrun = \"true\"\ncwd = \"rel\"\n\
             [[checks]]\nname = \"c\"\nrun = \"echo $(\"\n",
        );
        let out = lint(&lab);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        for want in [
            "setup.timeout_secs is 0",
            "check `a`: points is -1",
            "check `b`: cwd `rel` is not absolute",
            "setup.script names `setup.sh`",
            // The shell syntax too, though the model refused the file.
            "check `c`: `run` is not valid bash",
            "has 5 problems",
        ] {
            assert!(err.contains(want), "{want:?} missing: {err}");
        }
    }

    /// Shell syntax of setup and checks, and a payload over the Secret
    /// limit: `try` would pass such a lab only to have `secret` refuse it.
    #[test]
    fn syntax_and_size_problems_are_listed_together() {
        let lab = lab_folder(
            "labctl-lint-syntax",
            "name = \"x\"\n[setup]\nscript = \"setup.sh\"\n[files]\nsource = \"files\"\n\
             [[checks]]\nname = \"broken if\"\nrun = \"if true; then echo\"\n\
             [[checks]]\nname = \"fine\"\nrun = \"true\"\n\
             [[checks]]\nname = \"broken quote\"\nrun = \"echo 'x\"\n",
        );
        lab.write("setup.sh", "case x in\n", 0o755);
        // Incompressible: 1.1 MB of it cannot fit a 1 MiB Secret.
        let mut data = Vec::with_capacity(1_100_000);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        while data.len() < 1_100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.extend_from_slice(&x.to_le_bytes());
        }
        std::fs::create_dir_all(lab.join("files")).unwrap();
        std::fs::write(lab.join("files/data.bin"), &data).unwrap();
        let out = lint(&lab);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        for want in [
            "setup script",
            "check `broken if`: `run` is not valid bash",
            "check `broken quote`: `run` is not valid bash",
            "Secret limit",
            "has 4 problems",
        ] {
            assert!(err.contains(want), "{want:?} missing: {err}");
        }
        assert!(!err.contains("check `fine`"), "{err}");

        // `try` runs the same lint first, and starts nothing.
        let out = labctl([
            "try",
            lab.path.to_str().unwrap(),
            "--agent",
            agent_bin().to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        assert!(err.contains("has 4 problems"), "{err}");
        assert!(!err.contains("staged"), "nothing started: {err}");
    }
}

mod try_as_author {
    use super::*;

    /// Not root, and no `--vm`: refused before anything starts (the lab
    /// need not even be readable by that user).
    #[test]
    fn a_normal_user_is_told_to_use_root_or_a_vm() {
        if !is_root() {
            eprintln!("skipped: needs root to run labctl as another user");
            return;
        }
        let lab = lab_folder(
            "labctl-try-user",
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
        );
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(labctl_bin())
            .args(try_args(&lab.path, &[]))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains("hint: run as root, or use `--vm IMAGE`"),
            "{err}"
        );
        assert!(!err.contains("staged"), "nothing started: {err}");
    }

    /// A lab without a setup script never claims one is running; `--check`
    /// picks the checks.
    #[test]
    fn no_setup_script_and_one_check() {
        if !is_root() {
            eprintln!("skipped: `labctl try` needs root");
            return;
        }
        let lab = lab_folder(
            "labctl-try-nosetup",
            "name = \"bare\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"b\"\nrun = \"false\"\n",
        );
        let out = try_lab(&lab.path, &["--check", "a", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(check_outcomes(&v), [("a", true)]);
        let err = stderr(&out);
        assert!(
            err.contains("no setup script: waiting for the agent to be ready"),
            "{err}"
        );
        // Ready from the first answer: no state claims a setup under way.
        assert!(!err.contains("setting_up"), "{err}");
        assert!(!err.contains("setup script is running"), "{err}");
    }
}

/// What `labctl` prints for a terminal, and for a reader that goes away.
mod output {
    use super::*;

    /// Runs `labctl lint` on a broken lab under a pseudo-terminal (`script`)
    /// with `env`; whether its output has colour codes.
    fn coloured(lab: &TempDir, env: &[(&str, &str)]) -> bool {
        let cmd = format!("{} lint {}", labctl_bin().display(), lab.path.display());
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"])
            .env_remove("NO_COLOR")
            .env("TERM", "xterm")
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().expect("run script(1)");
        let text = stdout(&out);
        assert!(text.contains("error"), "{}", describe(&out));
        text.contains("\x1b[")
    }

    #[test]
    fn colour_follows_no_color_and_term() {
        let lab = lab_folder("labctl-colour", "name = \"x\"\n[setup]\ntimeout_secs = 0\n");
        assert!(coloured(&lab, &[]), "a terminal gets colour");
        assert!(
            coloured(&lab, &[("NO_COLOR", "")]),
            "an empty NO_COLOR does not turn it off"
        );
        assert!(!coloured(&lab, &[("NO_COLOR", "1")]));
        assert!(!coloured(&lab, &[("TERM", "dumb")]));
    }

    /// `labctl secret … | head`: the reader leaves; labctl ends quietly.
    #[test]
    fn a_closed_stdout_is_not_an_error() {
        let lab = lab_folder("labctl-pipe", "name = \"pipe\"\n");
        let token_out = lab.join("token");
        let mut child = Command::new(labctl_bin())
            .args(["secret", lab.path.to_str().unwrap(), "--name", "pipe"])
            .arg("--token-out")
            .arg(&token_out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert!(!stderr(&out).contains("error"), "{}", describe(&out));
    }
}

/// `labctl wait/exec/grade` against hostile fake agents
/// (`lab_agent_tests::hostile`): each run ends by its deadline with the exit
/// status that says what happened (3: the guest answered wrongly), and no
/// control character from the guest reaches the terminal raw, on stderr or
/// (with `--json`) on stdout.
mod hostile {
    use super::*;
    use lab_agent_tests::hostile::{Behaviour, ESCAPES, HostileAgent};
    use std::process::Output;
    use std::time::{Duration, Instant};

    /// What a finished `labctl` cost, from `wait4`'s `rusage`.
    #[derive(Debug, Clone, Copy)]
    struct Usage {
        /// Peak resident set (`ru_maxrss`), KiB.
        max_rss_kib: u64,
        /// User + system CPU.
        cpu: Duration,
    }

    /// `labctl VERB --url … --token-file … ARGS…` against `agent`; killed
    /// (and the test failed) if it outlives `bound`.
    fn run(
        agent: &HostileAgent,
        verb: &[&str],
        args: &[&str],
        bound: Duration,
    ) -> (Output, Duration) {
        let (out, took, _) = run_measured(agent, verb, args, bound);
        (out, took)
    }

    /// [`run`], and what labctl cost, as `rusage-run` (its parent) reaped
    /// it: not from here, where `wait4` would report this test process's
    /// peak RSS if larger (Linux folds the memory a process had before
    /// `execve` into its `ru_maxrss`).
    fn run_measured(
        agent: &HostileAgent,
        verb: &[&str],
        args: &[&str],
        bound: Duration,
    ) -> (Output, Duration, Usage) {
        let dir = TempDir::new("hostile");
        let token = dir.join("token");
        write_token(&token, "token-for-a-hostile-agent-xxxxxxxxxxxx");
        let report = dir.join("rusage");
        let start = Instant::now();
        let mut child = Command::new(lab_agent_tests::local::rusage_run_bin())
            .arg(&report)
            .arg(labctl_bin())
            .args(verb)
            .args(["--url", &agent.url(), "--token-file"])
            .arg(&token)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > bound {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!("labctl outlived {bound:?}:\n{}", describe(&out));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let took = start.elapsed();
        let out = child.wait_with_output().unwrap();
        let text = std::fs::read_to_string(&report)
            .unwrap_or_else(|e| panic!("no rusage report ({e}):\n{}", describe(&out)));
        let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().unwrap());
        let usage = Usage {
            max_rss_kib: fields.next().unwrap(),
            cpu: Duration::from_micros(fields.next().unwrap()),
        };
        (out, took, usage)
    }

    /// No control character but newlines (and JSON's own escapes) in
    /// what labctl printed.
    fn no_raw_controls(what: &str, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let bad: Vec<char> = text
            .chars()
            .filter(|&c| c != '\n' && lab_agent_proto::text::is_unsafe(c))
            .collect();
        assert!(bad.is_empty(), "{what} carries {bad:?} raw:\n{text}");
    }

    const EXEC: &[&str] = &["exec"];

    /// Regression: `labctl exec --timeout 5 -- true` took 914 s against an
    /// agent answering 429 forever; now the call ends by `--timeout` +
    /// `--answer-timeout`.
    #[test]
    fn exec_on_a_busy_agent_ends_by_its_deadline() {
        let agent = HostileAgent::start(Behaviour::Busy { retry_after: 1 });
        let args = ["--timeout", "1", "--answer-timeout", "2", "--", "true"];
        let (out, took) = run(&agent, EXEC, &args, Duration::from_secs(15));
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert!(took <= Duration::from_secs(3 + 2), "{took:?}");
        assert!(
            stderr(&out).contains("still busy after"),
            "{}",
            describe(&out)
        );
    }

    /// Regression: a `100 Continue` flood held `labctl exec` (and a core)
    /// for the whole timeout; now it ends at once, saying so.
    #[test]
    fn exec_on_a_continue_flood_ends_and_says_so() {
        let agent = HostileAgent::start(Behaviour::ContinueFlood);
        let args = ["--timeout", "1", "--answer-timeout", "20", "--", "true"];
        let (out, took) = run(&agent, EXEC, &args, Duration::from_secs(21 + 2));
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert!(
            stderr(&out).contains("interim (1xx) responses"),
            "{}",
            describe(&out)
        );
        assert!(took < Duration::from_secs(21), "{took:?}");
    }

    /// What a hostile answer can cost `labctl exec`, asserted on the
    /// child's own `rusage`. Memory: the peak RSS stays under that of the
    /// same call answered at once by an honest fake, plus twice the body
    /// limit of the request (`exec_response_limit` of the default 1 MiB
    /// `max_output_bytes`: 12 MiB + 64 KiB): one answer held at the limit,
    /// and as much again for what holding it costs (the buffer's growth,
    /// the decoded strings). CPU: at most the honest call's, plus a tenth
    /// of the wall time the call took, plus 200 ms of start-up noise; a
    /// flood read until the deadline (31 s here) costs about its whole wall
    /// time. Each bound fails if the cap it checks is lifted (tried:
    /// without the body limit the endless body peaked at 678 MiB; without
    /// the interim cut the flood call spun past the test's bound).
    #[test]
    fn exec_memory_and_cpu_stay_within_the_requests_caps() {
        let honest = HostileAgent::start(Behaviour::Honest);
        let (out, _, base) = run_measured(&honest, EXEC, &["--", "true"], Duration::from_secs(40));
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let limit_kib = lab_agent_client::client::exec_response_limit(
            lab_agent_proto::exec::DEFAULT_MAX_OUTPUT_BYTES,
        ) as u64
            / 1024;
        let rss_bound = base.max_rss_kib + 2 * limit_kib;
        // A deadline far past what each call needs (a loaded machine must
        // not turn a `TooLarge` into a `Timeout`), but for the drip, which
        // only its deadline ends.
        let args = ["--timeout", "1", "--answer-timeout", "30", "--", "true"];
        let drip_args = ["--timeout", "1", "--answer-timeout", "4", "--", "true"];
        for (behaviour, want) in [
            (Behaviour::EndlessBody, "response larger than"),
            (Behaviour::HugeContentLength, "2147483648 bytes announced"),
            (
                Behaviour::Oversized {
                    stdout_bytes: 8 << 20,
                },
                "more than `max_output_bytes`",
            ),
            (Behaviour::ContinueFlood, "9 interim (1xx) responses"),
            (Behaviour::Drip, "no response within 5s"),
        ] {
            let agent = HostileAgent::start(behaviour.clone());
            let args = if behaviour == Behaviour::Drip {
                &drip_args
            } else {
                &args
            };
            let (out, took, usage) = run_measured(&agent, EXEC, args, Duration::from_secs(40));
            let what = format!("{behaviour:?}: {usage:?} in {took:?}, honest {base:?}");
            eprintln!("{what}");
            assert_eq!(out.status.code(), Some(3), "{what}\n{}", describe(&out));
            assert!(stderr(&out).contains(want), "{what}\n{}", describe(&out));
            assert!(
                usage.max_rss_kib <= rss_bound,
                "{what}: peak RSS over {rss_bound} KiB"
            );
            let cpu_bound = base.cpu + took / 10 + Duration::from_millis(200);
            assert!(usage.cpu <= cpu_bound, "{what}: CPU over {cpu_bound:?}");
        }
    }

    /// Regression: `exit_code: -1` and signal 2147483647 made `labctl exec`
    /// exit 0.
    #[test]
    fn exec_exit_statuses_cannot_lie() {
        for (exit_code, signal, want) in [
            (Some(-1), None, "exit code -1 is outside 0..=255"),
            (
                None,
                Some(2147483647),
                "signal 2147483647 is outside 1..=64",
            ),
            (Some(256), None, "exit code 256"),
        ] {
            let agent = HostileAgent::start(Behaviour::Exit { exit_code, signal });
            let (out, _) = run(&agent, EXEC, &["--", "true"], Duration::from_secs(40));
            assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
            assert!(stderr(&out).contains(want), "{}", describe(&out));
        }
        let agent = HostileAgent::start(Behaviour::Exit {
            exit_code: None,
            signal: Some(9),
        });
        let (out, _) = run(&agent, EXEC, &["--", "true"], Duration::from_secs(40));
        assert_eq!(out.status.code(), Some(137), "{}", describe(&out));
    }

    /// Regression: 8 MB of stdout was accepted (and printed) for a 1 MiB cap.
    #[test]
    fn exec_output_past_the_cap_is_refused() {
        let agent = HostileAgent::start(Behaviour::Oversized {
            stdout_bytes: 8 << 20,
        });
        let (out, _) = run(&agent, EXEC, &["--", "true"], Duration::from_secs(40));
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert!(out.stdout.is_empty());
        assert!(
            stderr(&out).contains("more than `max_output_bytes`"),
            "{}",
            describe(&out)
        );
    }

    /// Regression: the agent's error text (or a non-JSON body's start)
    /// reached the terminal raw.
    #[test]
    fn exec_errors_are_escaped() {
        for b in [Behaviour::Escapes, Behaviour::NonJsonError] {
            let agent = HostileAgent::start(b.clone());
            let (out, _) = run(&agent, EXEC, &["--", "true"], Duration::from_secs(40));
            no_raw_controls("stderr", &out.stderr);
            assert!(
                stderr(&out).contains("\\x1b]0;pwned\\x07"),
                "{b:?}: {}",
                describe(&out)
            );
            // A 400 to an exec is the agent refusing our command (2); a
            // 500 is the guest's (3).
            let want = if b == Behaviour::Escapes { 2 } else { 3 };
            assert_eq!(out.status.code(), Some(want), "{b:?}: {}", describe(&out));
        }
    }

    /// Regression: `reason` and `log_tail` of a failed setup reached the
    /// terminal raw (a `\r` overwrote lines, `\n` forged one); `--json`
    /// carries them only as JSON escapes.
    #[test]
    fn wait_escapes_the_guests_reason_and_log() {
        let agent = HostileAgent::start(Behaviour::Escapes);
        let (out, _) = run(
            &agent,
            &["wait"],
            &["--timeout", "10"],
            Duration::from_secs(15),
        );
        assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
        no_raw_controls("stderr", &out.stderr);
        let err = stderr(&out);
        assert!(
            err.contains("  │ \\x1b]0;pwned\\x07\\x1b[2J\\rforged"),
            "{err}"
        );
        assert!(
            !err.lines().any(|l| l.starts_with("error: forged line")),
            "{err}"
        );

        let (out, _) = run(
            &agent,
            &["wait"],
            &["--timeout", "10", "--json"],
            Duration::from_secs(15),
        );
        assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
        no_raw_controls("stdout", &out.stdout);
        no_raw_controls("stderr", &out.stderr);
        let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON alone");
        let reason = v["vms"][0]["ready"]["reason"].as_str().unwrap();
        assert!(
            reason.contains(ESCAPES),
            "the raw value is in the JSON: {reason:?}"
        );
    }

    /// Regression: a hostile 400 on `/v1/ready` exited 2 ("usage"); a 503
    /// with an unknown state read "the agent never answered".
    #[test]
    fn wait_on_wrong_answers_exits_3() {
        let agent = HostileAgent::start(Behaviour::Ready400);
        let (out, _) = run(
            &agent,
            &["wait"],
            &["--timeout", "10"],
            Duration::from_secs(15),
        );
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        let agent = HostileAgent::start(Behaviour::UnknownState);
        let (out, took) = run(
            &agent,
            &["wait"],
            &["--timeout", "10"],
            Duration::from_secs(15),
        );
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert!(
            !stderr(&out).contains("never answered"),
            "{}",
            describe(&out)
        );
        assert!(
            stderr(&out).contains("unexpected response body (status 503)"),
            "{}",
            describe(&out)
        );
        assert!(took < Duration::from_secs(10), "ended at once: {took:?}");
    }

    fn one_check_lab() -> TempDir {
        lab_folder(
            "hostile-lab",
            "name = \"l\"\n[[checks]]\nname = \"true\"\nrun = \"true\"\ntimeout_secs = 1\n",
        )
    }

    /// Regression: the agent-reported `lab_dir` was printed raw (even with
    /// `--json`), and a relative one was used although `--lab-dir`
    /// refuses one.
    #[test]
    fn grade_escapes_and_checks_the_reported_lab_dir() {
        let lab = one_check_lab();
        let lab_arg = lab.path.display().to_string();
        let agent = HostileAgent::start(Behaviour::EscapedLabDir);
        for json in [false, true] {
            let mut args = vec![];
            if json {
                args.push("--json");
            }
            let (out, _) = run(&agent, &["grade", &lab_arg], &args, Duration::from_secs(40));
            assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
            no_raw_controls("stdout", &out.stdout);
            no_raw_controls("stderr", &out.stderr);
            assert!(
                stderr(&out).contains("LAB_DIR=/opt/lab\\x1b]0;pwned"),
                "{}",
                describe(&out)
            );
            if json {
                let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON alone");
                assert_eq!(v["passed"], 1);
            }
        }
        let agent = HostileAgent::start(Behaviour::RelativeLabDir);
        let (out, _) = run(&agent, &["grade", &lab_arg], &[], Duration::from_secs(40));
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert!(
            stderr(&out).contains("`opt/lab` is not an absolute path"),
            "{}",
            describe(&out)
        );
    }

    /// A VM whose agent reports a failed setup with escapes in its reason,
    /// and one answering 429 to everything: refused within bounds, the
    /// guest's words escaped.
    #[test]
    fn grade_on_hostile_agents_is_bounded_and_escaped() {
        let lab = one_check_lab();
        let lab_arg = lab.path.display().to_string();
        let agent = HostileAgent::start(Behaviour::Escapes);
        let (out, _) = run(&agent, &["grade", &lab_arg], &[], Duration::from_secs(40));
        assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
        no_raw_controls("stderr", &out.stderr);
        assert!(
            stderr(&out).contains("setup failed: \\x1b]0;pwned"),
            "{}",
            describe(&out)
        );

        let agent = HostileAgent::start(Behaviour::Busy { retry_after: 1 });
        let (out, took) = run(
            &agent,
            &["grade", &lab_arg],
            &["--timeout", "2"],
            Duration::from_secs(10),
        );
        // `/v1/ready` is busy too: not ready, exit 3, at once.
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}
