//! The `/proc` walk that finds a command's processes where no cgroup holds
//! them: its session, its process group, and their descendants.

use super::WALK_BATCH;
use nix::unistd::{Pid, getsid};

/// The live processes of session `sid` (whose leader is the shell we
/// started), of process group `sid`, and every descendant of those — which
/// catches `setsid`, `setpgid` and `timeout(1)` children as long as their
/// parent lives. Zombies do not count: their reaping is up to their parent
/// or init.
///
/// Every exec without a cgroup asks this once its shell has exited, and
/// almost always nothing is left. So it first looks for a way in: a process
/// in the session (`getsid`, a system call that reads nothing; the group
/// is in it, as `setpgid` cannot cross sessions), or `sid` itself. Without
/// one there is nothing to find — every process below is reached from one,
/// and a parent that has exited already handed its children to init — and
/// the answer is not held up by reading every process's `stat` (a few µs
/// each: the most the exec path spent beyond spawning, BENCHMARKS.md,
/// "Where the time goes").
///
/// With a way in it reads all of `/proc` — with 3 000 processes a good
/// part of a second when done in one go, during which the single-threaded
/// agent answered nothing. So it yields to the runtime every [`WALK_BATCH`]
/// processes (each `stat` read is a few µs), rather than taking a thread
/// pool into a binary whose size every lab VM pays for.
pub async fn session_members(sid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = Vec::new();
    let mut way_in = false;
    for (n, entry) in dir.flatten().enumerate() {
        // One system call a process rather than a file: a longer batch.
        if n % (WALK_BATCH * 8) == WALK_BATCH * 8 - 1 {
            tokio::task::yield_now().await;
        }
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        // A pid gone meanwhile is an error: not a way in.
        way_in = way_in
            || pid == sid
            || getsid(Some(Pid::from_raw(pid))).is_ok_and(|s| s.as_raw() == sid);
        pids.push(pid);
    }
    if !way_in {
        return Vec::new();
    }
    // (pid, ppid, in the session or group, alive). Vectors and sorting
    // rather than hash maps: the same work, less code in the binary.
    let mut procs: Vec<(i32, i32, bool, bool)> = Vec::new();
    for (n, pid) in pids.into_iter().enumerate() {
        if n % WALK_BATCH == WALK_BATCH - 1 {
            tokio::task::yield_now().await;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp session …`; comm may hold spaces and parens.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().take(4).collect();
        if f.len() < 4 {
            continue;
        }
        let num = |s: &str| s.parse::<i32>().unwrap_or(-1);
        let (ppid, pgrp, session) = (num(f[1]), num(f[2]), num(f[3]));
        procs.push((pid, ppid, session == sid || pgrp == sid, f[0] != "Z"));
    }
    // Sorted by parent, so a process's children are one contiguous run.
    procs.sort_unstable_by_key(|p| p.1);
    let mut found: Vec<i32> = vec![sid];
    found.extend(procs.iter().filter(|p| p.2).map(|p| p.0));
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        let start = procs.partition_point(|p| p.1 < parent);
        for p in procs[start..].iter().take_while(|p| p.1 == parent) {
            if !found.contains(&p.0) {
                found.push(p.0);
            }
        }
        i += 1;
    }
    let me = std::process::id() as i32;
    found.sort_unstable();
    found.dedup();
    found.retain(|pid| *pid != me && procs.iter().any(|p| p.0 == *pid && p.3));
    found
}
