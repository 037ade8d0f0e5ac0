//! `labctl grade --vm …` and `labctl wait --vm …`: a lab of several VMs
//! (`examples/two-vm-lab`'s shape) as one session, against real agents,
//! each given its VM's variables as its payload would.
use super::*;
use lab_agent_proto::guest::render_env_file;
use lab_agent_proto::lab::Lab;
use std::collections::BTreeMap;

const LAB: &str = r#"
name = "session-test"
[[vms]]
name = "server"
[[vms]]
name = "client"
[[checks]]
name = "served"
vm = "server"
run = 'test "$LAB_VM" = server'
[[checks]]
name = "reached"
vm = "client"
run = 'test "$LAB_VM" = client && test "$LAB_PARAM_PORT" = 8080'
points = 2
[[checks]]
name = "not yet"
vm = "client"
run = "exit 1"
fail_message = "Do the last step."
"#;

/// An agent for `vm` of `lab`, its env file as `labctl secret --vm VM
/// --param PORT=8080` renders it.
fn vm_agent(lab: &Lab, dir: &TempDir, vm: &str, setup: &str) -> Agent {
    let params = BTreeMap::from([("PORT".to_owned(), "8080".to_owned())]);
    let env = lab.for_vm(Some(vm), &params).unwrap().vm_env;
    let file = dir.write(&format!("{vm}.env"), "", 0o600);
    std::fs::write(
        &file,
        render_env_file(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    )
    .unwrap();
    Agent::start(AgentOptions {
        extra_args: vec!["--env-file".into(), file.display().to_string()],
        ..AgentOptions::default().setup(setup)
    })
}

fn vm_args(vms: &[(&str, &Agent)]) -> Vec<String> {
    let mut args = Vec::new();
    for (vm, agent) in vms {
        args.extend(["--vm".to_owned(), (*vm).to_owned()]);
        args.extend(conn(agent));
    }
    args
}

#[test]
fn grade_and_wait_take_a_sessions_vms() {
    let dir = lab_folder("labctl-session", LAB);
    let lab = Lab::load(&dir.path).unwrap();
    let server = vm_agent(&lab, &dir, "server", "true");
    let client = vm_agent(&lab, &dir, "client", "true");
    let vms = vm_args(&[("server", &server), ("client", &client)]);

    let mut wait = vec!["wait".to_owned(), "--json".into()];
    wait.extend(vms.clone());
    let out = labctl(&wait);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["ready"], true);
    assert_eq!(v["vms"][0]["vm"], "server");
    assert_eq!(v["vms"][1]["vm"], "client");
    assert_eq!(v["vms"][1]["url"], client.url());

    let mut grade = vec!["grade".to_owned(), dir.path.display().to_string()];
    grade.extend(vms.clone());
    let mut json = grade.clone();
    json.push("--json".into());
    let out = labctl(&json);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let got: Vec<(&str, &str, &str)> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["vm"].as_str().unwrap(),
                c["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("served", "server", "passed"),
            ("reached", "client", "passed"),
            ("not yet", "client", "failed")
        ]
    );
    assert_eq!(
        (v["score"].as_u64(), v["max_score"].as_u64()),
        (Some(3), Some(4))
    );
    assert!(v["instances"]["server"]["id"].is_string(), "{v}");

    let out = labctl(&grade);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "on server:", "{text}");
    assert!(lines[1].contains("✓ served"), "{text}");
    assert_eq!(lines[2], "on client:", "{text}");
    assert!(
        text.contains("session-test: 2 of 3 checks passed, score 3/4"),
        "{text}"
    );

    // Each VM needs its --url and --token-file.
    let mut short = grade.clone();
    short.truncate(short.len() - 2);
    let out = labctl(&short);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("2 `--vm`s, 2 `--url`s and 1 `--token-file`s"),
        "{}",
        describe(&out)
    );
    // The session must be the lab's VMs.
    let mut wrong = vec!["grade".to_owned(), dir.path.display().to_string()];
    wrong.extend(vm_args(&[("server", &server), ("db", &client)]));
    let out = labctl(&wrong);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("missing: client; not in the lab: db"),
        "{}",
        describe(&out)
    );
}

#[test]
fn a_failed_vm_is_named_with_its_exit_status() {
    let dir = lab_folder("labctl-session-failed", LAB);
    let lab = Lab::load(&dir.path).unwrap();
    let server = vm_agent(&lab, &dir, "server", "true");
    let client = vm_agent(
        &lab,
        &dir,
        "client",
        "echo 'no route to server' >&2; exit 9",
    );
    let vms = vm_args(&[("server", &server), ("client", &client)]);
    let mut wait = vec!["wait".to_owned(), "--timeout".into(), "120".into()];
    wait.extend(vms.clone());
    let out = labctl(&wait);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert!(
        stderr(&out).contains("error: VM `client`: "),
        "{}",
        describe(&out)
    );
    assert!(
        stderr(&out).contains("no route to server"),
        "{}",
        describe(&out)
    );
    // Not graded: exit 4 (its setup failed) whatever the other VM's state,
    // nothing run.
    let mut grade = vec!["grade".to_owned(), dir.path.display().to_string()];
    grade.extend(vms);
    let out = labctl(&grade);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert!(stderr(&out).contains("VM `client`: "), "{}", describe(&out));
    assert!(stdout(&out).is_empty(), "{}", describe(&out));
}
