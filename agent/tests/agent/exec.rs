use crate::support::*;
use serde_json::json;

#[test]
fn exit_codes_and_streams() {
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
fn stdin_cwd_env_and_the_clean_environment() {
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
fn login_profile_is_read_but_interactive_banners_never_appear() {
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
fn a_timeout_kills_the_whole_group_including_background_children() {
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
    let r = agent
        .run(json!({"command": "trap '' TERM; while :; do sleep 0.1; done", "timeout_secs": 1}));
    assert_eq!(r["timed_out"], true);
    assert_eq!(r["signal"], 9);
}

#[test]
fn a_background_child_holding_stdout_does_not_hold_the_answer() {
    let agent = Agent::local("exec-linger");
    let pidfile = agent.dir.join("bg");
    let cmd = format!("sleep 30 & echo $! > {}; echo main-done", pidfile.display());
    let r = agent.run(json!({"command": cmd, "timeout_secs": 20}));
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["timed_out"], false);
    assert_eq!(r["stdout"], "main-done\n");
    // Left running on purpose: a command may start something legitimately.
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    let _ = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status();
}

#[test]
fn commands_run_in_their_own_session_without_a_tty() {
    let agent = Agent::local("exec-session");
    let r = agent.run(json!({"command": "ps -o sid=,pgid= -p $$; tty || true"}));
    let out = r["stdout"].as_str().unwrap();
    let mut lines = out.lines();
    let ids: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(ids[0], ids[1], "session leader and group leader: {out}");
    assert_ne!(ids[0], agent.child.id().to_string());
    assert_eq!(lines.next(), Some("not a tty"));
}

#[test]
fn many_execs_leak_no_fds_or_children() {
    let agent = Agent::local("exec-leak");
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", agent.child.id()))
            .unwrap()
            .count()
    };
    agent.run(json!({"command": "true"}));
    let before = fds();
    for i in 0..200 {
        let r = agent.run(json!({"command": format!("echo {i}; echo e >&2"), "stdin": "x"}));
        assert_eq!(r["stdout"], format!("{i}\n"));
    }
    // The last connection's socket may still be closing: allow it a moment.
    eventually(10, "the fd count to return to where it was", || {
        (fds() == before).then_some(())
    });
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", agent.child.id()))
            .unwrap_or_default();
    assert_eq!(children.trim(), "", "children left: {children}");
}
