//! The agent is the subreaper of its commands (`PR_SET_CHILD_SUBREAPER`):
//! without a cgroup, what a command orphans becomes the agent's child,
//! which is how it tells "nothing left" without walking `/proc`. These
//! tests hold that shortcut to the session walk's answers
//! (`containment.rs`): it must not blur who left what.

use crate::containment::kill_all;
use crate::support::*;
use serde_json::json;
use std::path::Path;

/// The parent pid of `pid`, from `/proc/PID/stat`.
fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The pid a command wrote to `file`.
fn pid_in(file: &Path) -> u32 {
    eventually(10, "the pid file", || {
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    })
}

/// Without a cgroup the agent is the subreaper of what commands leave:
/// an orphan is its child, not init's, which is how it tells "nothing
/// left" without walking `/proc`. That shortcut must not blur who left
/// what: a process an earlier command was allowed to leave stays through
/// later commands' ends, what a later command leaves dies with it, and
/// the adopted process is reaped once it ends (no zombie).
#[test]
fn without_a_cgroup_the_agent_adopts_orphans_and_kills_only_the_leftovers_of_the_command() {
    let dir = TempDir::new("adopt");
    let agent = Agent::builder("adopt")
        .no_cloud_init()
        .args(["--cgroup", "off"])
        .start();
    let me = agent.child.id();
    let kept_file = dir.join("kept");
    let out = agent.run(json!({
        "command": format!("sleep 600 & echo $! > {}", kept_file.display()),
        "profile": "none",
        "leave_running": true,
    }));
    assert_eq!(out["exit_code"], 0, "{out}");
    let kept = pid_in(&kept_file);
    assert!(alive(kept), "leave_running killed {kept}");
    assert_eq!(
        ppid(kept),
        Some(me),
        "the orphan went elsewhere than the agent"
    );

    let left_file = dir.join("left");
    for command in [
        format!("sleep 600 & echo $! > {}", left_file.display()),
        format!("(sleep 600 & echo $! > {})", left_file.display()),
    ] {
        let _ = std::fs::remove_file(&left_file);
        let out = agent.run(json!({"command": command, "profile": "none"}));
        assert_eq!(out["exit_code"], 0, "{out}");
        let left = pid_in(&left_file);
        // No waiting: the answer comes once the leftovers are gone.
        let survived = alive(left);
        kill_all(&[left]);
        assert!(!survived, "{command:?} left {left} running");
    }
    let out = agent.run(json!({"command": "true", "profile": "none"}));
    assert_eq!(out["exit_code"], 0, "{out}");
    let still = alive(kept);
    kill_all(&[kept]);
    assert!(
        still,
        "a later command's end killed what an earlier one was allowed to leave"
    );
    // The housekeeping after a command's end reaps what has ended.
    agent.run(json!({"command": "true", "profile": "none"}));
    eventually(15, "the agent to reap what it adopted", || {
        let children: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| ppid(p) == Some(me))
            .collect();
        children.is_empty().then_some(())
    });
}

/// Two commands at once, without a cgroup: what one of them orphans while
/// the other runs is not the other's to kill when it ends first, and is
/// still killed with its own command.
#[test]
fn without_a_cgroup_a_concurrent_command_s_orphan_is_killed_with_its_own_command_only() {
    let dir = TempDir::new("adopt-two");
    let agent = Agent::builder("adopt-two")
        .no_cloud_init()
        .args(["--cgroup", "off"])
        .start();
    let orphan_file = dir.join("orphan");
    let go = dir.join("go");
    let addr = agent.addr;
    let first = std::thread::spawn({
        let command = format!(
            "sh -c 'sleep 600 & echo $! > {}'\nwhile [ ! -e {} ]; do sleep 0.05; done",
            orphan_file.display(),
            go.display()
        );
        move || {
            exec_at(
                addr,
                &json!({"command": command, "timeout_secs": 30, "profile": "none"}),
            )
        }
    });
    let orphan = pid_in(&orphan_file);
    assert_eq!(
        ppid(orphan),
        Some(agent.child.id()),
        "not adopted by the agent"
    );
    let out = agent.run(json!({"command": "true", "profile": "none"}));
    assert_eq!(out["exit_code"], 0, "{out}");
    let survived_the_other = alive(orphan);
    write_file(&go, "", 0o644);
    let resp = first.join().unwrap();
    let survived_its_own = alive(orphan);
    kill_all(&[orphan]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["exit_code"], 0, "{}", resp.text());
    assert!(survived_the_other, "the other command's end killed it");
    assert!(!survived_its_own, "its own command's end left it running");
}
