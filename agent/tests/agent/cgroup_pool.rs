//! The per-exec cgroups' pool: sequential commands reuse an emptied
//! cgroup, one a command left something running in is kept from the next
//! ones, a killed one is never reused, and each pooled cgroup keeps one
//! idle holder of the agent's between commands (and only while the agent
//! lives).

use crate::containment::*;
use crate::support::*;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Whether the exec cgroups are down to what the pool may keep, with
/// nothing in them but (each) its holder.
pub(crate) fn only_an_empty_pool(children: &[PathBuf]) -> bool {
    children.len() <= POOL && children.iter().all(|c| populated(c) == Some(false))
}

/// The processes in a cgroup (`cgroup.procs`); empty when it is gone.
pub(crate) fn procs(cg: &Path) -> Vec<u32> {
    std::fs::read_to_string(cg.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// Whether `pid` is an agent's cgroup holder (`lab-agent hold-cgroup
/// AGENT_PID`), and whose.
pub(crate) fn holder_of(pid: u32) -> Option<u32> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    if args.get(1) != Some(&&b"hold-cgroup"[..]) {
        return None;
    }
    std::str::from_utf8(args.get(2)?).ok()?.parse().ok()
}

/// The agent's pool cap (`the agent's `POOL``; the tests do not link
/// the agent).
pub(crate) const POOL: usize = 2;

/// Whether a process other than the agent's holder is in it (or in a
/// cgroup below, as `cgroup.events`' `populated` counts); `None` when the
/// cgroup is gone.
pub(crate) fn populated(cg: &Path) -> Option<bool> {
    let events = std::fs::read_to_string(cg.join("cgroup.events")).ok()?;
    let any = events.lines().any(|l| l == "populated 1");
    let own = procs(cg);
    let below = std::fs::read_dir(cg)
        .ok()?
        .flatten()
        .any(|e| e.file_type().is_ok_and(|t| t.is_dir()));
    Some(any && (below || own.iter().any(|p| holder_of(*p).is_none())))
}

/// The command's own cgroup v2 path, as the command sees it (the `0::`
/// line: a hybrid host lists its v1 hierarchies too).
pub(crate) fn own_cgroup(agent: &Agent) -> String {
    let out = agent.run(json!({"command": "cat /proc/self/cgroup", "profile": "none"}));
    assert_eq!(out["exit_code"], 0, "{out}");
    v2_line(out["stdout"].as_str().unwrap())
}

pub(crate) fn v2_line(proc_self_cgroup: &str) -> String {
    proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("no cgroup v2 line: {proc_self_cgroup}"))
        .to_owned()
}

/// Sequential execs reuse one empty cgroup (no `mkdir`/`rmdir` per exec);
/// a cgroup that a command left a background process in is not handed to
/// another command while that process lives, and is reused (or removed)
/// once it has ended.
#[test]
fn empty_exec_cgroups_are_reused_and_populated_ones_are_not() {
    let t = CgroupAgent::start("reuse");
    let CgroupAgent { agent, cg, .. } = &t;
    // The sweep that returns a cgroup to the pool runs just after the
    // answer; the client's next request may beat it, so look for reuse
    // over a few execs rather than between two exact ones.
    let seen: Vec<String> = (0..6).map(|_| own_cgroup(agent)).collect();
    let mut distinct = seen.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() <= POOL,
        "6 sequential execs ran in {} cgroups (pool {POOL}): {seen:?}",
        distinct.len()
    );
    assert!(cg.children().len() <= POOL, "{:?}", cg.children());

    // A command leaves a server behind in its cgroup.
    let (out, pid) = t.leave_a_server("cat /proc/self/cgroup");
    let busy = v2_line(out["stdout"].as_str().unwrap());
    let busy_dir = cg.path().join(busy.rsplit('/').next().unwrap());
    assert_eq!(populated(&busy_dir), Some(true), "{busy}");
    // However many execs follow, none runs there while the server lives.
    for i in 0..6 {
        let other = own_cgroup(agent);
        if other == busy {
            kill_all(&[pid]);
            panic!("exec {i} ran in the cgroup the server is still in: {other}");
        }
    }
    assert!(alive(pid), "the background process was killed");
    stop_server(pid);
    // Once empty it is recycled (taken again) or removed (the pool was
    // full); either way the exec cgroups are back to at most the pool.
    agent.run(json!({"command": "true", "profile": "none"}));
    eventually(15, "the emptied cgroup to be recycled or removed", || {
        only_an_empty_pool(&cg.children()).then_some(())
    });
}

/// A command that ends normally and asks to leave a server running (a lab
/// may start one) keeps it: it stays in the command's cgroup, which is
/// kept until it is empty and then recycled or removed by a later sweep.
#[test]
fn a_normal_end_leaves_background_processes_in_their_cgroup() {
    let t = CgroupAgent::start("background");
    let CgroupAgent { agent, cg, .. } = &t;
    let (_, pid) = t.leave_a_server("sleep 0.2");
    assert!(alive(pid), "the background process was killed");
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let kept = cg
        .children()
        .into_iter()
        .find(|c| {
            std::fs::read_to_string(c.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .any(|l| l == pid.to_string())
        })
        .unwrap_or_else(|| panic!("pid {pid} is in no exec cgroup: {own}"));
    stop_server(pid);
    // The next exec's end sweeps emptied cgroups: back into the pool or
    // removed, never more than the pool left, all empty.
    agent.run(json!({"command": "true", "profile": "none"}));
    eventually(5, "the emptied cgroup to be recycled or removed", || {
        (populated(&kept) != Some(true) && only_an_empty_pool(&cg.children())).then_some(())
    });
}

/// A cgroup whose leftovers were killed (`cgroup.kill`) is not handed to
/// another command: on Linux 6.18 (this machine's) every process later
/// started into it with `CLONE_INTO_CGROUP` is killed at birth, so each
/// command after the first to leave something behind died with SIGKILL.
#[test]
fn after_a_command_s_leftovers_are_killed_the_next_commands_run() {
    let t = CgroupAgent::start("killed");
    let CgroupAgent { agent, cg, .. } = &t;
    let out = agent.run(json!({
        "command": "sleep 600 & grep ^0:: /proc/self/cgroup",
        "profile": "none",
    }));
    assert_eq!(out["exit_code"], 0, "{out}");
    let killed = v2_line(out["stdout"].as_str().unwrap());
    for i in 0..6 {
        // Asserts exit 0: a command killed at birth has none.
        let seen = own_cgroup(agent);
        assert_ne!(seen, killed, "exec {i} ran in the killed cgroup");
    }
    eventually(5, "the exec cgroups to be an empty pool", || {
        only_an_empty_pool(&cg.children()).then_some(())
    });
}

/// Between commands each pooled cgroup holds one idle process of the
/// agent's (so that a command's start and end do not empty and refill
/// it), which a command finds beside itself, which leaves with the pool
/// when the agent stops, and dies with the agent when it is killed.
#[test]
fn a_pooled_cgroup_holds_one_holder_that_ends_with_the_agent() {
    let mut t = CgroupAgent::start("holder");
    let agent_pid = t.agent.child.id();
    for _ in 0..3 {
        own_cgroup(&t.agent);
    }
    let pool = eventually(5, "each pooled cgroup to have its holder", || {
        let c = t.cg.children();
        let held = !c.is_empty()
            && c.iter().all(|c| {
                let p = procs(c);
                p.len() == 1 && holder_of(p[0]) == Some(agent_pid)
            });
        held.then_some(c)
    });
    // A command runs beside its cgroup's holder; nothing else is there.
    let out = t.agent.run(json!({
        "command": "cat /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup | tail -1)/cgroup.procs 2>/dev/null \
                    || cat /sys/fs/cgroup/unified$(grep ^0:: /proc/self/cgroup | cut -d: -f3)/cgroup.procs; \
                    echo self $$",
        "profile": "none",
    }));
    let text = out["stdout"].as_str().unwrap();
    let listed: Vec<u32> = text.lines().filter_map(|l| l.parse().ok()).collect();
    let own: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("self "))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    let holders: Vec<u32> = listed
        .iter()
        .copied()
        .filter(|p| holder_of(*p) == Some(agent_pid))
        .collect();
    assert_eq!(holders.len(), 1, "one holder beside the command: {out}");
    assert!(listed.contains(&own), "{out}");
    // SIGTERM: the pool goes, holders and all.
    let held: Vec<u32> = pool.iter().flat_map(|c| procs(c)).collect();
    t.agent.signal("TERM");
    t.agent.wait_exit(20);
    assert_eq!(t.cg.children(), Vec::<PathBuf>::new(), "{}", t.agent.log());
    assert_eq!(survivors(&held), Vec::<u32>::new());

    // SIGKILL: the holders die with their agent (the cgroups an earlier
    // agent left are a restarted agent's to remove).
    let t = CgroupAgent::start("holder-kill");
    let agent_pid = t.agent.child.id();
    own_cgroup(&t.agent);
    let held = eventually(5, "a holder", || {
        let h: Vec<u32> = t.cg.children().iter().flat_map(|c| procs(c)).collect();
        (!h.is_empty() && h.iter().all(|p| holder_of(*p) == Some(agent_pid))).then_some(h)
    });
    let CgroupAgent { mut agent, cg, .. } = t;
    let _ = agent.child.kill();
    let _ = agent.child.wait();
    eventually(5, "the holders to die with the agent", || {
        survivors(&held).is_empty().then_some(())
    });
    assert!(cg.children().iter().all(|c| procs(c).is_empty()));
}

/// What the agent killed of a command comes to it as zombies (it is their
/// subreaper), each holding a pid of the unit's `TasksMax` until reaped:
/// they are reaped before the answer, or just after, not at the next 10 s
/// housekeeping. The killed cgroup's holder dies with them and stays the
/// agent's zombie until its cgroup goes; reaping must look past it (a
/// Debian 12 guest's next command, after a root fork bomb, failed to
/// start with EAGAIN).
#[test]
fn a_killed_command_s_leftovers_are_reaped_at_once() {
    let t = CgroupAgent::start("reaped");
    let agent_pid = t.agent.child.id();
    own_cgroup(&t.agent);
    eventually(5, "a holder", || {
        t.cg.children()
            .iter()
            .flat_map(|c| procs(c))
            .any(|p| holder_of(p) == Some(agent_pid))
            .then_some(())
    });
    let out = t.agent.run(json!({
        "command": "for i in $(seq 30); do (sleep 600 &); done; true",
        "profile": "none",
    }));
    assert_eq!(out["exit_code"], 0, "{out}");
    eventually(3, "the killed sleeps to be reaped", || {
        let left = zombie_children(agent_pid, "sleep");
        (left == 0).then_some(())
    });
}

/// How many of `parent`'s children named `comm` are zombies.
fn zombie_children(parent: u32, comm: &str) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{parent}/task")).unwrap();
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.split_once(" (")
                    .and_then(|(_, r)| r.rsplit_once(") "))
                    .is_some_and(|(c, r)| c == comm && r.starts_with('Z'))
            })
        })
        .count()
}
