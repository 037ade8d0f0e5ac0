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
    assert!(
        stderr(&out).contains(
            "invalid value 'NOEQUALS' for '--env <KEY=VALUE>': `NOEQUALS` is not of the form `KEY=VALUE`"
        ),
        "{}",
        describe(&out)
    );
    // The options' own ranges, as the agent and `lab.toml` hold them.
    let out = exec(&agent, &["--timeout", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains(
            "the command cannot be sent: timeout_secs is 0: use a number of seconds from 1 to 3600"
        ),
        "{}",
        describe(&out)
    );
}

/// `--instance ID` runs only on that life of the VM: the agent's own id
/// runs; another (the VM was reset) is exit 6 with the command not run,
/// streamed or `--json`.
#[test]
fn instance_runs_only_on_that_life_of_the_vm() {
    let agent = Agent::start(AgentOptions::default());
    let work = TempDir::new("labctl-exec-instance");
    let ran = work.join("ran");
    let touch = format!("touch {}", ran.display());
    let other = "0123456789abcdef0123456789abcdef";
    for json in [&[][..], &["--json"][..]] {
        let mut args = vec!["--instance", other];
        args.extend(json);
        args.extend(["--", &touch]);
        let out = exec(&agent, &args);
        assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains("was reset (instance ")
                && err.contains(&format!(
                    "is not the instance {other} the client is pinned to"
                )),
            "{err}"
        );
        assert!(!ran.exists(), "the command ran on another instance");
    }
    let out = exec(&agent, &["--json", "--", "true"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["instance_id"].as_str().unwrap().to_owned();
    let out = exec(&agent, &["--instance", &id, "--", &touch]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(ran.exists());
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

/// Output as it comes: read through a pipe line by line, each line's
/// arrival timed; the first well before the command ends.
#[test]
fn output_is_printed_as_it_comes_and_json_is_one_object() {
    let agent = Agent::start(AgentOptions::default());
    let mut cmd = Command::new(labctl_bin());
    cmd.arg("exec")
        .args(conn(&agent))
        .args([
            "--",
            "for i in 1 2 3; do echo line $i; sleep 1; done; echo err >&2; exit 5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = std::time::Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        lines.push((line.unwrap(), started.elapsed()));
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(5), "{lines:?} {err}");
    let texts: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(texts, ["line 1", "line 2", "line 3"]);
    assert_eq!(err, "err\n");
    // The command sleeps 3 s; its first line is read before its second
    // sleep starts, the last after the second one ended.
    let (first, last) = (lines[0].1, lines[2].1);
    assert!(
        first < std::time::Duration::from_secs(2)
            && last - first >= std::time::Duration::from_millis(1900),
        "{lines:?}"
    );

    // --json: the plain answer, one object.
    let out = exec(&agent, &["--json", "--", "echo hi; exit 2"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (v["stdout"].as_str(), v["exit_code"].as_i64()),
        (Some("hi\n"), Some(2))
    );
}
