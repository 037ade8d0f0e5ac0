//! State files are never opened through a symlink, and state a user other
//! than the agent's owns is not trusted — written as the issue's attacks on
//! a misconfigured state dir the student can write to.

use crate::support::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

const NOBODY: u32 = 65534;

fn chown(path: &std::path::Path, uid: u32) {
    nix::unistd::chown(path, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
}

/// Writes a finished `setup.json` into the agent's state dir, as a
/// student with write access to it could.
fn record(agent: &Agent, state: &str, exit_code: i32) -> std::path::PathBuf {
    let dir = agent.state_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("setup.json"),
        format!(
            r#"{{"state":"{state}","started_at":"2026-11-29T08:56:44Z","exit_code":{exit_code}}}"#
        ),
    )
    .unwrap();
    dir
}

/// `setup.log → /etc/…` (here a decoy standing in for it) in a
/// world-writable state dir: the released `lab-agent setup`, as root,
/// truncated and overwrote the link's target.
#[test]
fn a_planted_setup_log_symlink_is_replaced_not_followed() {
    let dir = TempDir::new("state-symlink");
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim = dir.join("etc-shadow-decoy");
    write_file(&victim, "root:precious:1::\n", 0o600);
    std::os::unix::fs::symlink(&victim, state.join("setup.log")).unwrap();
    let script = dir.join("setup.sh");
    write_file(&script, "#!/bin/sh\necho setup output\n", 0o755);
    let out = agent_command()
        .args(["setup", "--script"])
        .arg(&script)
        .arg("--state-dir")
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "root:precious:1::\n"
    );
    let log = state.join("setup.log");
    let meta = std::fs::symlink_metadata(&log).unwrap();
    assert!(meta.file_type().is_file(), "setup.log is still a link");
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("setup output")
    );
}

/// `setup.log → the token`: the released agent served the token in
/// `/v1/ready`'s `log_tail`.
#[test]
fn a_setup_log_linked_to_the_token_never_reaches_ready() {
    let agent = Agent::builder("state-token-link").no_cloud_init().start();
    let state = record(&agent, "failed", 1);
    std::os::unix::fs::symlink(agent.dir.join("token"), state.join("setup.log")).unwrap();
    past_the_readiness_cache();
    let r = agent.get("/v1/ready");
    assert_eq!(r.json()["setup"]["state"], "failed", "{}", r.text());
    assert!(
        !r.text().contains(&TOKEN[..20]),
        "token served: {}",
        r.text()
    );
}

/// A `setup.json` saying `succeeded`, forged in a state dir another user
/// owns: not ready, and the reason says whose dir it is.
#[test]
fn a_forged_record_in_a_foreign_owned_state_dir_is_not_ready() {
    require_root("files owned by another user");
    let agent = Agent::builder("state-foreign").no_cloud_init().start();
    let state = record(&agent, "succeeded", 0);
    // First owned by the agent's user: ready.
    past_the_readiness_cache();
    assert_eq!(agent.get("/v1/ready").status, 200);
    chown(&state, NOBODY);
    chown(&state.join("setup.json"), NOBODY);
    past_the_readiness_cache();
    let r = agent.get("/v1/ready");
    assert_eq!(r.status, 503, "{}", r.text());
    let reason = r.json()["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("owned by uid 65534"), "{reason}");
    // A record of ours in the foreign dir is no better: the dir decides.
    chown(&state.join("setup.json"), 0);
    past_the_readiness_cache();
    assert_eq!(agent.get("/v1/ready").status, 503);
    // And `lab-agent setup` refuses to write into it.
    let out = agent_command()
        .args(["setup", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("owned by uid 65534") && err.contains("chown"),
        "{err}"
    );
}

/// A token file owned by another user: whoever owns it can change it.
#[test]
fn a_token_owned_by_another_user_is_refused_with_the_fix() {
    require_root("files owned by another user");
    let dir = TempDir::new("state-token-owner");
    let token = dir.join("token");
    write_file(&token, &format!("{TOKEN}\n"), 0o600);
    chown(&token, NOBODY);
    let mut child = agent_command()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-cloud-init",
            "--token-file",
        ])
        .arg(&token)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    // An agent that accepts the token serves until killed: do not wait on it.
    let status = eventually(20, "the agent to refuse the token", || {
        child.try_wait().unwrap()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status.code(), Some(2));
    let err = std::fs::read_to_string(dir.join("stderr")).unwrap();
    assert!(err.contains("owned by uid 65534"), "{err}");
    assert!(err.contains("hint: run `chown 0"), "{err}");
}
