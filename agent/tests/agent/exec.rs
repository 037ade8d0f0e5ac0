use crate::support::*;
use serde_json::json;

#[test]
pub(crate) fn exit_codes_and_streams() {
    let agent = Agent::local("exec-basic");
    let r = agent.run(json!({"command": "echo out; echo err >&2; exit 3"}));
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["signal"], serde_json::Value::Null);
    assert_eq!(r["timed_out"], false);
    assert_eq!(r["stdout"], "out\n");
    assert_eq!(r["stderr"], "err\n");
    assert_eq!(r["stdout_truncated"], false);
    assert!(r["duration_ms"].is_u64());
    assert_eq!(agent.run(json!({"command": "true"}))["exit_code"], 0);
    assert_eq!(agent.run(json!({"command": "false"}))["exit_code"], 1);
    let r = agent.run(json!({"command": "kill -9 $$"}));
    assert_eq!(r["exit_code"], serde_json::Value::Null);
    assert_eq!(r["signal"], 9);
    // A command the shell does not know is the shell's 127, not a 400.
    assert_eq!(
        agent.run(json!({"command": "no-such-command-xyz"}))["exit_code"],
        127
    );
}

#[test]
pub(crate) fn stdin_cwd_env_and_the_clean_environment() {
    let agent = Agent::local("exec-io");
    let r = agent.run(json!({"command": "tr a-z A-Z", "stdin": "hello\n"}));
    assert_eq!(r["stdout"], "HELLO\n");
    // No stdin given: /dev/null, so a reader gets EOF at once.
    let r = agent.run(json!({"command": "cat; echo done"}));
    assert_eq!(r["stdout"], "done\n");
    let r = agent.run(json!({"command": "pwd", "cwd": "/tmp"}));
    assert_eq!(r["stdout"], "/tmp\n");
    let r = agent.run(json!({"command": "pwd"}));
    assert_eq!(r["stdout"], "/root\n");
    let r = agent.run(json!({"command": "echo \"$FOO|$LAB_DIR\"", "env": {"FOO": "bar baz", "LAB_DIR": "/opt/lab"}}));
    assert_eq!(r["stdout"], "bar baz|/opt/lab\n");
    // The agent's own environment (RUST_LOG is set by the harness) never
    // reaches a child.
    let r = agent.run(json!({"command": "env"}));
    let env = r["stdout"].as_str().unwrap();
    assert!(!env.contains("RUST_LOG"), "{env}");
    assert!(env.contains("HOME=/root"), "{env}");
    assert!(env.contains("USER=root"), "{env}");
    assert!(env.contains("LOGNAME=root"), "{env}");
}

#[test]
fn a_command_that_never_reads_a_large_stdin_does_not_hang() {
    let agent = Agent::local("exec-stdin");
    let r = agent.run(json!({"command": "echo ignored", "stdin": "x".repeat(900_000)}));
    assert_eq!(r["stdout"], "ignored\n");
    let r = agent.run(json!({"command": "wc -c", "stdin": "x".repeat(900_000)}));
    assert_eq!(r["stdout"].as_str().unwrap().trim(), "900000");
}

#[test]
fn runs_as_another_user_with_its_identity() {
    let agent = Agent::local("exec-user");
    let r = agent.run(
        json!({"command": "id -u; id -g; id -G; echo $HOME $USER $LOGNAME; pwd", "user": "nobody"}),
    );
    let out = r["stdout"].as_str().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let uid = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .unwrap();
    let gid = std::process::Command::new("id")
        .args(["-g", "nobody"])
        .output()
        .unwrap();
    let groups = std::process::Command::new("id")
        .args(["-G", "nobody"])
        .output()
        .unwrap();
    assert_eq!(lines[0], String::from_utf8_lossy(&uid.stdout).trim());
    assert_eq!(lines[1], String::from_utf8_lossy(&gid.stdout).trim());
    assert_eq!(lines[2], String::from_utf8_lossy(&groups.stdout).trim());
    assert!(lines[3].ends_with("nobody nobody"), "{out}");
    // nobody's home does not exist: like login(1), start in /.
    assert_eq!(lines[4], "/", "{out}");
    // And root's groups do not leak into the child.
    assert!(!lines[2].split(' ').any(|g| g == "0"), "{out}");
}

#[test]
pub(crate) fn login_profile_is_read_but_interactive_banners_never_appear() {
    let agent = Agent::local("exec-login");
    // HOME from `env` overrides passwd's, so the login shell reads this
    // profile instead of touching the machine's.
    let home = agent.dir.join("home");
    write_file(
        &home.join(".bash_profile"),
        "export PROBE_LOGIN=yes\n\
         case $- in *i*) echo INTERACTIVE-BANNER;; esac\n\
         [ -t 0 ] || [ -t 1 ] && echo TTY-BANNER\n",
        0o644,
    );
    let r = agent.run(json!({"command": "echo \"login=$PROBE_LOGIN\"; shopt -q login_shell && echo is-login", "env": {"HOME": home}}));
    assert_eq!(r["stdout"], "login=yes\nis-login\n");
    assert_eq!(r["stderr"], "");
}

#[test]
fn output_is_capped_per_stream_and_drained() {
    let agent = Agent::local("exec-cap");
    let r = agent.run(json!({
        "command": "head -c 20000000 /dev/zero | tr '\\0' a; head -c 30000000 /dev/zero | tr '\\0' b >&2; echo finished >&2",
        "max_output_bytes": 1000
    }));
    assert_eq!(
        r["exit_code"], 0,
        "the command ran to the end: it never blocked on a full pipe"
    );
    assert_eq!(r["stdout"].as_str().unwrap().len(), 1000);
    assert!(r["stdout"].as_str().unwrap().bytes().all(|b| b == b'a'));
    assert_eq!(r["stderr"].as_str().unwrap().len(), 1000);
    assert_eq!(r["stdout_truncated"], true);
    assert_eq!(r["stderr_truncated"], true);
    let r = agent.run(json!({"command": "printf 12345", "max_output_bytes": 5}));
    assert_eq!(r["stdout"], "12345");
    assert_eq!(r["stdout_truncated"], false);
}

#[test]
fn output_is_utf8_lossy() {
    let agent = Agent::local("exec-utf8");
    let r = agent.run(json!({"command": "printf 'a\\377b é'"}));
    assert_eq!(r["stdout"], "a\u{fffd}b é");
}

#[test]
pub(crate) fn a_timeout_kills_the_whole_group_including_background_children() {
    let agent = Agent::local("exec-timeout");
    let pids = agent.dir.join("pids");
    let cmd = format!(
        "sleep 300 & echo $! > {p}; (trap '' TERM; sleep 300) & echo $! >> {p}; sleep 300",
        p = pids.display()
    );
    // Generous: on a loaded machine a login shell can take a while to start.
    let r = agent.run(json!({"command": cmd, "timeout_secs": 5}));
    assert_eq!(r["timed_out"], true);
    assert!(r["signal"] == 15 || r["signal"] == 9, "{r}");
    let text = std::fs::read_to_string(&pids).unwrap();
    let pids: Vec<u32> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(pids.len(), 2);
    for pid in pids {
        // The TERM-ignoring one gets SIGKILL after the grace.
        eventually(10, "background children to die", || {
            (!alive(pid)).then_some(())
        });
    }
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let agent = Agent::local("exec-ignore-term");
    // HOME without a profile: root's profile on a loaded machine can take
    // longer than the timeout, and a TERM before the trap is set kills it.
    let r = agent.run(json!({
        "command": "trap '' TERM; while :; do sleep 0.1; done",
        "timeout_secs": 1,
        "env": {"HOME": "/nonexistent"},
    }));
    assert_eq!(r["timed_out"], true);
    assert_eq!(r["signal"], 9);
}

#[test]
fn a_background_child_holding_stdout_does_not_hold_the_answer() {
    let agent = Agent::local("exec-linger");
    let pidfile = agent.dir.join("bg");
    let cmd = format!("sleep 30 & echo $! > {}; echo main-done", pidfile.display());
    let pid = || -> u32 {
        std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // Left running on request: a command may start something legitimately.
    let r = agent.run(json!({"command": cmd, "timeout_secs": 20, "leave_running": true}));
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["timed_out"], false);
    assert_eq!(r["stdout"], "main-done\n");
    assert!(r["duration_ms"].as_u64().unwrap() < 5000, "{r}");
    let kept = pid();
    assert!(alive(kept));
    let _ = std::process::Command::new("kill")
        .arg(kept.to_string())
        .status();
    // By default it dies with the command, before the answer.
    let r = agent.run(json!({"command": cmd, "timeout_secs": 20}));
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["stdout"], "main-done\n");
    let killed = pid();
    assert_ne!(killed, kept);
    assert!(!alive(killed), "the background child outlived its command");
}

#[test]
pub(crate) fn commands_run_in_their_own_session_without_a_tty() {
    let agent = Agent::local("exec-session");
    let r = agent.run(json!({"command": "ps -o sid=,pgid= -p $$; tty || true"}));
    let out = r["stdout"].as_str().unwrap();
    let mut lines = out.lines();
    let ids: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(ids[0], ids[1], "session leader and group leader: {out}");
    assert_ne!(ids[0], agent.child.id().to_string());
    assert_eq!(lines.next(), Some("not a tty"));
}

/// Live (non-zombie) processes whose process group is `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string() {
            found.push(pid);
        }
    }
    found
}

/// The agent's direct children (every thread's), zombies included.
fn children(agent: &Agent) -> Vec<String> {
    let pid = agent.child.id();
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().map(str::to_owned));
    }
    out
}

/// The fd table once two reads 200 ms apart agree.
fn settled_fds(agent: &Agent) -> Vec<String> {
    let mut last = fds(agent);
    eventually(10, "the fd table to settle", || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let now = fds(agent);
        let same = now == last;
        last = now;
        same.then(|| last.clone())
    })
}

fn fds(agent: &Agent) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", agent.child.id()))
        .unwrap()
        .flatten()
        .map(|e| {
            let target = std::fs::read_link(e.path()).unwrap_or_default();
            format!(
                "{} -> {}",
                e.file_name().to_string_lossy(),
                target.display()
            )
        })
        .collect();
    v.sort();
    v
}

/// A directory anyone may write to, for pid files of commands run as nobody.
fn shared_dir(agent: &Agent) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = agent.dir.join("shared");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(agent.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Runs a misbehaving command that writes its shell's pid (= its process
/// group) to a file first; checks the timeout held (answered within
/// `timeout + grace + slack`), the whole group is gone and the agent has no
/// child left. Returns the result and the most group members seen alive.
fn misbehave(
    agent: &Agent,
    user: &str,
    command: &str,
    timeout: u64,
    extra: serde_json::Value,
) -> (serde_json::Value, usize) {
    let pidfile = shared_dir(agent).join(format!("pgid-{}", command.len()));
    let _ = std::fs::remove_file(&pidfile);
    let mut body = json!({
        "command": format!("echo $$ > {}; {command}", pidfile.display()),
        "timeout_secs": timeout,
        "user": user,
    });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let started = std::time::Instant::now();
    // Meanwhile, count the group's members: the misbehaviour really happened.
    let (r, peak) = std::thread::scope(|scope| {
        let run = scope.spawn(|| agent.run(body));
        let mut peak = 0;
        while !run.is_finished() {
            if let Some(pgid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                peak = peak.max(group_members(pgid).len());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        (run.join().unwrap(), peak)
    });
    let took = started.elapsed();
    let grace = lab_agent::KILL_GRACE;
    assert_eq!(r["timed_out"], true, "{command}: {r}");
    assert!(
        took < std::time::Duration::from_secs(timeout) + grace + std::time::Duration::from_secs(3),
        "{command}: answered after {took:?} (timeout {timeout} s + grace {grace:?})"
    );
    let pgid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("{command}: no pid file: {e}"))
        .trim()
        .parse()
        .unwrap();
    // The agent answers once the group is empty, or right after SIGKILL.
    eventually(5, "the process group to be gone", || {
        group_members(pgid).is_empty().then_some(())
    });
    eventually(5, "no children left in the agent", || {
        children(agent).is_empty().then_some(())
    });
    (r, peak)
}

#[test]
fn a_bounded_fork_storm_with_detached_children_is_killed_as_a_group() {
    let agent = Agent::local("exec-forkstorm");
    // As nobody, so that `ulimit -u` binds (root ignores RLIMIT_NPROC); the
    // tree is also bounded by construction: depth 5 = 63 shells + 63 sleeps.
    // Every node also leaves a double-forked (reparented) sleeper, and a
    // nohup'd one with its fds closed: all of them stay in the group.
    let storm = "ulimit -u 400 || exit 99; \
        b() { (sleep 300 &); nohup sleep 300 </dev/null >/dev/null 2>&1 & \
              if [ \"$1\" -gt 0 ]; then b $(($1-1)) & b $(($1-1)) & fi; sleep 300; }; \
        b 5";
    let (r, peak) = misbehave(&agent, "nobody", storm, 3, json!({}));
    assert!(r["signal"] == 15 || r["signal"] == 9, "{r}");
    assert!(peak > 100, "the storm never got going: {peak} processes");
    eprintln!("fork storm: {peak} processes in the group at its peak, all gone after the timeout");
}

#[test]
fn a_command_that_closes_its_output_and_keeps_running_is_timed_out() {
    let agent = Agent::local("exec-closed-out");
    let (r, _) = misbehave(
        &agent,
        "root",
        "exec >&- 2>&-; sleep 300",
        1,
        json!({"env": {"HOME": "/nonexistent"}}),
    );
    assert_eq!(r["stdout"], "");
    // Closed, then reopened elsewhere: output after the close is not ours.
    let (r, _) = misbehave(
        &agent,
        "root",
        "echo before; exec >/dev/null 2>&1; while :; do echo lost; done",
        1,
        json!({"env": {"HOME": "/nonexistent"}}),
    );
    assert_eq!(r["stdout"], "before\n");
}

#[test]
fn a_command_that_never_reads_its_stdin_is_timed_out_on_time() {
    let agent = Agent::local("exec-stdin-block");
    // Far more than a pipe holds: writing it would block forever.
    misbehave(
        &agent,
        "root",
        "sleep 300",
        1,
        json!({"stdin": "x".repeat(900_000), "env": {"HOME": "/nonexistent"}}),
    );
    // And one that reads a little, then stops reading.
    misbehave(
        &agent,
        "root",
        "head -c 10 >/dev/null; sleep 300",
        1,
        json!({"stdin": "y".repeat(900_000), "env": {"HOME": "/nonexistent"}}),
    );
}

#[test]
fn endless_output_on_both_streams_is_capped_and_timed_out_in_bounded_memory() {
    let agent = Agent::builder("exec-flood")
        .no_cloud_init()
        .args(["--max-execs", "4"])
        .start();
    let addr = agent.addr;
    let floods: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let body = json!({
                    "command": "yes out & yes err >&2 & wait",
                    "timeout_secs": 3,
                    "max_output_bytes": 2_000_000,
                    "env": {"HOME": "/nonexistent"},
                });
                exec_at(addr, &body).json()
            })
        })
        .collect();
    for f in floods {
        let r = f.join().unwrap();
        assert_eq!(r["timed_out"], true, "{r}");
        assert_eq!(r["stdout"].as_str().unwrap().len(), 2_000_000);
        assert_eq!(r["stderr"].as_str().unwrap().len(), 2_000_000);
        assert_eq!(r["stdout_truncated"], true);
        assert_eq!(r["stderr_truncated"], true);
    }
    // 4 commands x 2 streams x 2 MB kept, plus the JSON answers being
    // written: the rest of the flood (gigabytes) was drained and dropped.
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id())).unwrap();
    let hwm: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(hwm < 80 * 1024, "peak memory {hwm} KiB");
    eventually(5, "no children left in the agent", || {
        children(&agent).is_empty().then_some(())
    });
}

#[test]
fn a_group_that_ignores_sigterm_is_killed_after_the_grace_and_gone() {
    let agent = Agent::local("exec-term-group");
    let (r, peak) = misbehave(
        &agent,
        "root",
        "trap '' TERM; (trap '' TERM; sleep 300) & (sleep 300 &); while :; do sleep 0.1; done",
        1,
        json!({"env": {"HOME": "/nonexistent"}}),
    );
    assert!(peak >= 3, "{peak} group members seen");
    assert_eq!(r["signal"], 9);
    let ms = r["duration_ms"].as_u64().unwrap();
    let grace = lab_agent::KILL_GRACE.as_millis() as u64;
    assert!(ms >= 1000 + grace, "SIGKILL came before the grace: {ms} ms");
}

/// 1000 execs from four clients on kept-alive connections, one in fifty
/// misbehaving (timed out with children left, output floods, ignored
/// SIGTERM): afterwards the agent has exactly the fds it had before, no
/// child processes and no zombies.
#[test]
fn a_thousand_execs_leak_no_fds_children_or_zombies() {
    let agent = Agent::builder("exec-leak")
        .no_cloud_init()
        .args(["--max-execs", "8"])
        .start();
    agent.run(json!({"command": "true"}));
    // The warm-up connection's socket closes just after its answer: take the
    // baseline once the table has settled, or it would hold that socket.
    let before = settled_fds(&agent);
    let addr = agent.addr;
    let next = std::sync::atomic::AtomicUsize::new(0);
    const TOTAL: usize = 1000;
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let s = std::net::TcpStream::connect(addr).unwrap();
                let mut w = s.try_clone().unwrap();
                let mut r = std::io::BufReader::new(s);
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= TOTAL {
                        break;
                    }
                    let (command, timeout) = match (i % 50, i / 50 % 4) {
                        (0, 0) => ("sleep 300 & (sleep 300 &); sleep 300", 1),
                        (0, 1) => ("yes | head -c 50000000; yes >&2", 1),
                        (0, 2) => ("trap '' TERM; sleep 300", 1),
                        (0, _) => ("exec >&-; sleep 300", 1),
                        _ => ("echo $$; echo e >&2", 10),
                    };
                    let body = json!({
                        "command": command,
                        "timeout_secs": timeout,
                        "stdin": "x",
                        "max_output_bytes": 4096,
                        "env": {"HOME": "/nonexistent"},
                    })
                    .to_string();
                    let raw = format!(
                        "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    std::io::Write::write_all(&mut w, raw.as_bytes()).unwrap();
                    let resp = read_response(&mut r).expect("an answer");
                    assert_eq!(resp.status, 200, "exec {i}: {}", resp.text());
                    let v = resp.json();
                    if i % 50 != 0 {
                        assert_eq!(v["exit_code"], 0, "exec {i}: {v}");
                        assert_eq!(v["stderr"], "e\n");
                    } else {
                        assert_eq!(v["timed_out"], true, "exec {i}: {v}");
                    }
                }
            });
        }
    });
    // Keep-alive sockets of the clients are gone; give the agent a moment.
    eventually(10, "the fd table to return to what it was", || {
        (fds(&agent) == before).then_some(())
    });
    eventually(10, "no children (or zombies) left", || {
        children(&agent).is_empty().then_some(())
    });
    assert!(!agent.log().contains("panicked"));
}
