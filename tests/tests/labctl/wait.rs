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
    // stdout holds the data, the VM's life; progress went to stderr.
    let data = stdout(&out);
    assert!(
        data.starts_with("instance ") && data.contains("kernel → ready"),
        "{data}"
    );
    assert!(!data.contains("ready after"), "{data}");
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
    let bad = Agent::start(AgentOptions::default().setup("echo 'kubeadm init failed' >&2; exit 1"));
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
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
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

/// The seconds in "URL was not ready after 3.1s": how long labctl waited.
fn waited_secs(err: &str) -> f64 {
    let rest = err
        .split("was not ready after ")
        .nth(1)
        .unwrap_or_else(|| panic!("no wait time in {err}"));
    rest[..rest.find('s').unwrap()].parse().unwrap()
}

/// A VM whose setup never ends, and a lab that allows it 2 s.
fn stuck_agent_and_lab(tag: &str) -> (Agent, TempDir) {
    let agent = Agent::start(AgentOptions::default().setup("sleep 300\n"));
    let lab = lab_folder(tag, "name = \"slow\"\n[readiness]\ntimeout_secs = 2\n");
    (agent, lab)
}

/// `--lab`: the lab's `[readiness] timeout_secs` is the deadline, and on it
/// the error names the phase the VM was stuck in and for how long. (Only
/// lower bounds on the time: a deadline never ends early, a busy machine
/// may end it late.)
#[test]
fn the_labs_readiness_timeout_is_the_default_deadline() {
    let (agent, lab) = stuck_agent_and_lab("labctl-wait-lab");
    let mut args = vec!["wait".to_owned()];
    args.extend(conn(&agent));
    args.extend(["--lab".to_owned(), lab.path.display().to_string()]);
    let out = labctl(args);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let err = stderr(&out);
    let waited = waited_secs(&err);
    assert!(
        (2.0..300.0).contains(&waited),
        "waited {waited} s, not the lab's 2 s: {err}"
    );
    assert!(
        err.contains("stuck in state `setting_up` for the last "),
        "{err}"
    );
    assert!(err.contains("hint: setup is still running"), "{err}");
}

/// `--timeout` given wins over the lab's.
#[test]
fn an_explicit_timeout_wins_over_the_labs() {
    let (agent, lab) = stuck_agent_and_lab("labctl-wait-lab-timeout");
    let mut args = vec!["wait".to_owned()];
    args.extend(conn(&agent));
    args.extend([
        "--lab".to_owned(),
        lab.path.display().to_string(),
        "--timeout".to_owned(),
        "4".to_owned(),
    ]);
    let out = labctl(args);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let err = stderr(&out);
    assert!(waited_secs(&err) >= 4.0, "{err}");
}

/// A `--lab` that is no lab is a usage error before any wait, naming what
/// to fix.
#[test]
fn a_bad_lab_is_a_usage_error() {
    let lab = lab_folder(
        "labctl-wait-badlab",
        "name = \"x\"\n[readiness]\ntimeout_secs = 0\n",
    );
    let dir = TempDir::new("labctl-wait-badlab-token");
    let tf = dir.join("token");
    write_token(&tf, &new_token());
    let out = labctl([
        "wait",
        "--url",
        "http://127.0.0.1:9",
        "--token-file",
        tf.to_str().unwrap(),
        "--lab",
        lab.path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("readiness.timeout_secs is 0: use a number of seconds from 1 to 3600"),
        "{err}"
    );
}
