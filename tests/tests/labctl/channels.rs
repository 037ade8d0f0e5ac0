//! `--url` in every form `labctl` takes beside `http://`: a hybrid vsock
//! socket and KubeVirt's vsock subresource, through the stand-ins of
//! `lab_agent_tests::relay` to a real agent on loopback (the real relays:
//! `tests/tests/vm_lifecycle/vsock.rs`), and the `--kube-*` flags.

use super::*;
use lab_agent_tests::relay::kubevirt::Account;
use lab_agent_tests::relay::{GuestVsock, HybridStandIn, KubevirtStandIn, StandInVmi};

fn guest(agent: &Agent) -> GuestVsock {
    GuestVsock::Loopback {
        port: 8899,
        agent: agent.addr.parse().unwrap(),
    }
}

#[test]
fn every_verb_takes_a_vsock_or_kubevirt_url() {
    let dir = TempDir::new("labctl-channels");
    let agent = Agent::start(AgentOptions::default());
    let hybrid = HybridStandIn::start(&dir.join("vm.vsock"), guest(&agent), None);
    let k = KubevirtStandIn::start(
        &dir.path,
        vec![StandInVmi::running("labs", "vm-1", guest(&agent))],
        vec![Account {
            token: "grader-token".into(),
            user: "system:serviceaccount:lab-backend:grader".into(),
            vsock_in: vec!["labs".into()],
        }],
        None,
    );
    let api_token = dir.write("api-token", "grader-token", 0o600);
    let kube: Vec<String> = vec![
        "--kube-server".into(),
        k.server(),
        "--kube-token-file".into(),
        api_token.display().to_string(),
        "--kube-ca-file".into(),
        k.certs().ca.display().to_string(),
    ];
    dir.write(
        "lab/lab.toml",
        "name = \"channels\"\n[[checks]]\nname = \"echo\"\nrun = \"echo hi\"\n",
        0o644,
    );
    let token = agent.token_file.display().to_string();
    for (url, extra) in [
        (hybrid.url(8899), vec![]),
        ("kubevirt://labs/vm-1".to_owned(), kube.clone()),
    ] {
        let with = |verb: &[&str], tail: &[&str]| {
            let mut args: Vec<String> = verb.iter().map(|s| s.to_string()).collect();
            args.extend([
                "--url".into(),
                url.clone(),
                "--token-file".into(),
                token.clone(),
            ]);
            args.extend(extra.iter().cloned());
            args.extend(tail.iter().map(|s| s.to_string()));
            labctl(args)
        };
        let out = with(&["wait"], &["--timeout", "60"]);
        assert_eq!(out.status.code(), Some(0), "{url}: {}", describe(&out));
        let out = with(&["exec"], &["--", "echo via; exit 4"]);
        assert_eq!(out.status.code(), Some(4), "{url}: {}", describe(&out));
        assert_eq!(stdout(&out), "via\n", "{url}");
        let lab = dir.join("lab").display().to_string();
        let out = with(&["grade", &lab], &["--json"]);
        assert_eq!(out.status.code(), Some(0), "{url}: {}", describe(&out));
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(report["passed"], 1, "{url}");
    }

    // KubeVirt's refusal: exit 3, its message, a hint.
    let mut args: Vec<String> = vec![
        "exec".into(),
        "--url".into(),
        "kubevirt://other/vm-1".into(),
    ];
    args.extend(["--token-file".into(), token.clone()]);
    args.extend(kube.iter().cloned());
    args.extend(["--".into(), "true".into()]);
    let out = labctl(args);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(stderr(&out).contains("(status 403)"), "{}", describe(&out));
    assert!(
        stderr(&out).contains("hint: the token's service account may not open"),
        "{}",
        describe(&out)
    );

    // `--kube-server` alone: a usage error before anything runs.
    let out = labctl([
        "wait",
        "--url",
        "kubevirt://labs/vm-1",
        "--token-file",
        &token,
        "--kube-server",
        &k.server(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("--kube-token-file"),
        "{}",
        describe(&out)
    );
}

#[test]
fn kubevirt_outside_a_pod_without_credentials_says_what_to_give() {
    let agent = Agent::start(AgentOptions::default());
    let out = Command::new(labctl_bin())
        .args(["wait", "--url", "kubevirt://labs/vm-1", "--token-file"])
        .arg(&agent.token_file)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`KUBERNETES_SERVICE_HOST` is not set: this is not a pod"),
        "{err}"
    );
    assert!(
        err.contains("--kube-server URL --kube-token-file F --kube-ca-file F"),
        "{err}"
    );
}
