use crate::support::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

struct Run {
    status: i32,
    stdout: String,
    record: serde_json::Value,
    log: String,
    dir: TempDir,
}

fn setup(tag: &str, script: Option<&str>, extra: &[&str]) -> Run {
    let dir = TempDir::new(tag);
    let mut cmd = agent_command();
    cmd.arg("setup")
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--lab-dir")
        .arg(dir.path());
    if let Some(body) = script {
        write_file(&dir.join("setup.sh"), body, 0o755);
        cmd.arg("--script").arg(dir.join("setup.sh"));
    }
    cmd.args(extra);
    let out = cmd.output().unwrap();
    let record = std::fs::read_to_string(dir.join("state/setup.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    Run {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        record,
        log: std::fs::read_to_string(dir.join("state/setup.log")).unwrap_or_default(),
        dir,
    }
}

#[test]
pub(crate) fn success_is_recorded_logged_and_echoed() {
    let r = setup(
        "setup-ok",
        Some("#!/bin/bash\necho \"lab=$LAB_DIR\"; echo to-stderr >&2; pwd\n"),
        &[],
    );
    assert_eq!(r.status, 0, "{}", r.stdout);
    assert_eq!(r.record["state"], "succeeded");
    assert_eq!(r.record["exit_code"], 0);
    assert!(r.record["duration_ms"].is_u64());
    assert!(r.record["started_at"].as_str().unwrap().ends_with('Z'));
    let want = format!("lab={0}\nto-stderr\n{0}\n", r.dir.path().display());
    assert_eq!(r.log, want);
    assert!(r.stdout.contains(&want), "tee to stdout: {}", r.stdout);
    let mode = std::fs::metadata(r.dir.join("state/setup.log"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the log may hold secrets");
    let mode = std::fs::metadata(r.dir.join("state"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o022, 0, "state dir must not be writable by others");
}

#[test]
pub(crate) fn a_failing_script_is_mirrored() {
    let r = setup("setup-fail", Some("echo about to fail\nexit 7\n"), &[]);
    assert_eq!(r.status, 7);
    assert_eq!(r.record["state"], "failed");
    assert_eq!(r.record["exit_code"], 7);
    assert!(r.log.contains("about to fail"));
}

#[test]
fn a_non_executable_script_still_runs_through_the_shell() {
    let dir = TempDir::new("setup-noexec");
    write_file(&dir.join("s.sh"), "echo via-shell\n", 0o644);
    let out = agent_command()
        .args(["setup", "--script"])
        .arg(dir.join("s.sh"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("via-shell"));
}

#[test]
fn no_script_is_success() {
    let r = setup("setup-none", None, &[]);
    assert_eq!(r.status, 0);
    assert_eq!(r.record["state"], "succeeded");
}

#[test]
fn a_missing_script_is_failed_with_the_reason() {
    let dir = TempDir::new("setup-missing");
    let out = agent_command()
        .args(["setup", "--script", "/no/such/setup.sh", "--state-dir"])
        .arg(dir.join("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("state/setup.json")).unwrap())
            .unwrap();
    assert_eq!(rec["state"], "failed");
    assert!(
        rec["error"].as_str().unwrap().contains("does not exist"),
        "{rec}"
    );
}

#[test]
fn a_timeout_kills_the_group_and_records_failed() {
    let r = setup(
        "setup-timeout",
        Some("#!/bin/bash\nsleep 300 &\necho $! > \"$LAB_DIR/bg\"\nsleep 300\n"),
        &["--timeout", "5"],
    );
    assert_eq!(r.status, 124);
    assert_eq!(r.record["state"], "failed");
    assert_eq!(r.record["timed_out"], true);
    assert!(r.log.contains("timed out after 5 s"), "{}", r.log);
    let bg: u32 = std::fs::read_to_string(r.dir.join("bg"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(10, "the background child to die", || {
        (!alive(bg)).then_some(())
    });
}

#[test]
fn runs_as_the_given_user() {
    let r = setup(
        "setup-user",
        Some("#!/bin/sh\nid -un\n"),
        &["--user", "nobody"],
    );
    assert_eq!(r.status, 0, "{}", r.log);
    assert_eq!(r.log, "nobody\n");
}

#[test]
pub(crate) fn serve_run_setup_reports_setting_up_then_ready() {
    let dir = TempDir::new("serve-setup");
    write_file(
        &dir.join("lab/setup.sh"),
        "#!/bin/sh\necho preparing\nwhile [ ! -e \"$LAB_DIR/go\" ]; do sleep 0.05; done\necho done\n",
        0o755,
    );
    let mut b = Agent::builder("serve-setup-agent").no_cloud_init();
    b = b
        .arg("--run-setup")
        .arg(dir.join("lab/setup.sh").display().to_string())
        .arg("--lab-dir")
        .arg(dir.join("lab").display().to_string());
    let agent = b.start();
    let v = eventually(10, "setting_up", || {
        let v = agent.get("/v1/ready").json();
        (v["state"] == "setting_up").then_some(v)
    });
    assert_eq!(v["setup"]["state"], "running");
    std::fs::write(dir.join("lab/go"), "").unwrap();
    let r = agent.get("/v1/ready?wait=20");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["setup"]["log_tail"], "preparing\ndone\n");
}

#[test]
pub(crate) fn serve_run_setup_failure_is_reported() {
    let dir = TempDir::new("serve-setup-fail");
    write_file(&dir.join("setup.sh"), "echo oops >&2\nexit 42\n", 0o755);
    let agent = Agent::builder("serve-setup-fail-agent")
        .no_cloud_init()
        .arg("--run-setup")
        .arg(dir.join("setup.sh").display().to_string())
        .start();
    let r = agent.get("/v1/ready?wait=20");
    assert_eq!(r.status, 503);
    let v = r.json();
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(v["setup"]["exit_code"], 42);
    assert!(v["setup"]["log_tail"].as_str().unwrap().contains("oops"));
}

/// The payload's installer failed (it records why in `install-error`): the
/// setup does not run against a half-installed lab, and the failure names
/// the installer's reason, so `/v1/ready` reports it.
#[test]
pub(crate) fn an_installer_failure_is_a_failed_setup_with_its_reason() {
    let b = Agent::builder("setup-install-error").no_cloud_init();
    let state = b.dir.join("state");
    write_file(
        &state.join("install-error"),
        "cannot write /opt/lab/data.bin: 100 of 4096 bytes written (is the disk full?)\n",
        0o600,
    );
    let ran = b.dir.join("ran");
    write_file(
        &b.dir.join("setup.sh"),
        &format!("touch {}\n", ran.display()),
        0o755,
    );
    let out = agent_command()
        .arg("setup")
        .arg("--state-dir")
        .arg(&state)
        .arg("--script")
        .arg(b.dir.join("setup.sh"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!ran.exists(), "the setup script ran anyway");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join("setup.json")).unwrap()).unwrap();
    assert_eq!(record["state"], "failed");
    let error = record["error"].as_str().unwrap();
    assert!(
        error.starts_with("the payload's installer failed, so the setup did not run: ")
            && error.ends_with("(is the disk full?)"),
        "{error}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cannot write /opt/lab/data.bin"),
        "{stdout}"
    );

    // The agent reads that record as `failed`, with the installer's reason.
    let agent = b.start();
    let ready = agent.get("/v1/ready").json();
    assert_eq!(ready["state"], "failed", "{ready}");
    let reason = ready["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("setup failed: the payload's installer failed")
            && reason.contains("/opt/lab/data.bin"),
        "{reason}"
    );
}

/// `--min-root-bytes` larger than any disk (1 EiB) with `--on-small-root
/// fail`: the setup is `failed` before the script runs, the record's error
/// gives both sizes, and `/v1/ready` reports it at once as the reason.
#[test]
pub(crate) fn a_root_filesystem_too_small_fails_before_the_script() {
    let b = Agent::builder("setup-min-root").no_cloud_init();
    let state = b.dir.join("state");
    let ran = b.dir.join("ran");
    write_file(
        &b.dir.join("setup.sh"),
        &format!("touch {}\n", ran.display()),
        0o755,
    );
    let out = agent_command()
        .arg("setup")
        .arg("--state-dir")
        .arg(&state)
        .arg("--script")
        .arg(b.dir.join("setup.sh"))
        .args(["--min-root-bytes", "1152921504606846976"])
        .args(["--on-small-root", "fail", "--small-root-banner"])
        .arg(b.dir.join("banner.sh"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        !b.dir.join("banner.sh").exists(),
        "no banner for a failed setup"
    );
    assert!(!ran.exists(), "the setup script ran on a too small disk");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join("setup.json")).unwrap()).unwrap();
    assert_eq!(record["state"], "failed", "{record}");
    let error = record["error"].as_str().unwrap();
    let want_end =
        "; this lab needs at least 1.0 EiB (1152921504606846976 bytes): give the VM a larger disk";
    assert!(
        error.starts_with("the root filesystem is ") && error.ends_with(want_end),
        "{error}"
    );
    // The root's own size, in both units, is in it (the disk here is
    // between 1 KiB and 1 EiB).
    assert!(
        error.contains("iB (") && error.matches(" bytes)").count() == 2,
        "{error}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(want_end), "{stdout}");

    let agent = b.start();
    let r = agent.get("/v1/ready");
    assert_eq!(r.status, 503);
    let ready = r.json();
    assert_eq!(ready["state"], "failed", "{ready}");
    assert_eq!(
        ready["reason"].as_str().unwrap(),
        format!("setup failed: {error}"),
        "{ready}"
    );
    assert_eq!(ready["root"]["min_bytes"], 1u64 << 60, "{ready}");
    assert_eq!(ready["root"]["below_min"], true, "{ready}");
}

/// The same root with `warn` (the lab's default): the script runs, the VM
/// is ready, and says why it is anyway (`root.below_min`, `min_bytes`, the
/// reason); the banner is written for the student's interactive shells. A
/// check runs through a login shell, which sources it as `/etc/profile`
/// sources `/etc/profile.d` (the VM tests prove it with the real
/// `/etc/profile`): never interactive, so never a line of it in a check's
/// output; an interactive login shell shows it.
#[test]
pub(crate) fn a_small_root_with_warn_is_ready_with_a_banner() {
    let b = Agent::builder("setup-small-root-warn");
    let banner = b.dir.join("profile.d/lab-agent-small-root.sh");
    std::fs::create_dir_all(banner.parent().unwrap()).unwrap();
    let ran = b.dir.join("ran");
    let (state, script) = (b.dir.join("state"), b.dir.join("setup.sh"));
    write_file(&script, &format!("touch {}\n", ran.display()), 0o755);
    let run_setup = |on_small_root: Option<&str>, min: &str| {
        let mut cmd = agent_command();
        cmd.arg("setup")
            .arg("--state-dir")
            .arg(&state)
            .arg("--script")
            .arg(&script)
            .args(["--min-root-bytes", min])
            .arg("--small-root-banner")
            .arg(&banner);
        if let Some(choice) = on_small_root {
            cmd.args(["--on-small-root", choice]);
        }
        cmd.output().unwrap()
    };
    for choice in [None, Some("warn")] {
        let out = run_setup(choice, "1152921504606846976");
        assert_eq!(out.status.code(), Some(0), "{choice:?}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("on_small_root = \"warn\""), "{stdout}");
    }
    assert!(
        ran.exists(),
        "the setup script runs on a small root with warn"
    );
    let text = std::fs::read_to_string(&banner).unwrap();
    assert!(text.contains("case $- in"), "{text}");

    let agent = b.start();
    let cloud_init = agent.cloud_init_dir();
    std::fs::create_dir_all(&cloud_init).unwrap();
    std::fs::write(agent.dir.join("result"), r#"{"v1":{"errors":[]}}"#).unwrap();
    std::os::unix::fs::symlink(agent.dir.join("result"), cloud_init.join("result.json")).unwrap();
    let r = agent.get("/v1/ready?wait=10");
    let v = r.json();
    assert_eq!((r.status, v["state"].as_str()), (200, Some("ready")), "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("ready, but the root filesystem is ")
            && reason.ends_with(
                ", under the 1.0 EiB (1152921504606846976 bytes) this lab asks for (on_small_root = \"warn\"): the student's shells show a banner"
            ),
        "{reason}"
    );
    assert_eq!(v["root"]["below_min"], true, "{v}");
    assert_eq!(v["root"]["min_bytes"], 1u64 << 60, "{v}");
    let info = agent.get("/v1/info").json();
    assert_eq!(info["root"]["min_bytes"], 1u64 << 60, "{info}");

    let check = agent.run(json!({
        "command": format!(". {}; echo checked", banner.display())
    }));
    assert_eq!(
        (check["stdout"].as_str(), check["stderr"].as_str()),
        (Some("checked\n"), Some("")),
        "a check through a login shell: {check}"
    );
    let interactive = agent.run(json!({
        "command": format!("bash --login -i -c '. {}; echo shell'", banner.display())
    }));
    assert_eq!(interactive["stdout"], "shell\n", "{interactive}");
    assert!(
        interactive["stderr"]
            .as_str()
            .unwrap()
            .contains("smaller than usual (this lab expects 1.0 EiB)"),
        "an interactive login shell: {interactive}"
    );

    // A root large enough (a later setup on a larger disk): no banner.
    assert!(run_setup(Some("warn"), "1").status.success());
    assert!(!banner.exists(), "the banner of a smaller disk is removed");
    past_the_readiness_cache();
    let v = agent.get("/v1/ready").json();
    assert_eq!(v["root"]["below_min"], serde_json::Value::Null, "{v}");
    assert_eq!(v["root"]["min_bytes"], 1, "{v}");
    assert!(v["reason"].is_null(), "{v}");
}

/// A need any disk meets (1 byte): the script runs as without the flag.
#[test]
pub(crate) fn a_root_filesystem_large_enough_runs_the_script() {
    let r = setup(
        "setup-min-root-ok",
        Some("#!/bin/sh\ntouch \"$LAB_DIR/ran\"\necho ran\n"),
        &["--min-root-bytes", "1"],
    );
    assert_eq!(r.status, 0, "{}", r.stdout);
    assert_eq!(r.record["state"], "succeeded", "{}", r.record);
    assert!(r.dir.join("ran").exists(), "the script did not run");
    assert_eq!(r.log, "ran\n");
}

/// `serve --run-setup` shares the check: with `fail`, a too small root is
/// `failed` with the sizes, and the script never runs.
#[test]
pub(crate) fn serve_run_setup_checks_the_root_filesystem_too() {
    let dir = TempDir::new("serve-min-root");
    let ran = dir.join("ran");
    write_file(
        &dir.join("setup.sh"),
        &format!("touch {}\n", ran.display()),
        0o755,
    );
    let agent = Agent::builder("serve-min-root-agent")
        .no_cloud_init()
        .arg("--run-setup")
        .arg(dir.join("setup.sh").display().to_string())
        .args(["--min-root-bytes", "1152921504606846976"])
        .args(["--on-small-root", "fail"])
        .start();
    let r = agent.get("/v1/ready?wait=20");
    assert_eq!(r.status, 503);
    let v = r.json();
    assert_eq!(v["state"], "failed", "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("setup failed: the root filesystem is ")
            && reason.contains("needs at least 1.0 EiB"),
        "{reason}"
    );
    assert!(!ran.exists(), "the setup script ran on a too small disk");
}
