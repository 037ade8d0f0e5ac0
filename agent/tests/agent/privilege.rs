//! Least privilege in the agent's own files and children: `setup.log` is
//! root's alone even when it existed with a looser mode, the state dir is
//! never writable by others, `setup.json` is not writable by others, and a
//! child gets neither the agent's environment nor any descriptor but 0, 1
//! and 2: not the agent's own, nor one the agent inherited without
//! close-on-exec.
//! (The payload side — token 0600, private directories — is checked on the
//! rendered user-data in `tests/tests/payload/least_privilege.rs`.)

use crate::support::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

/// A variable only the agent's own environment has.
const SENTINEL: (&str, &str) = ("LAB_AGENT_PRIVATE_PROBE", "agent-environment-must-not-leak");

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// The descriptors a process started by the shell has (`ls` itself opens
/// one more, on its own `/proc/self/fd`, which is left out): a descriptor of
/// the agent's that lacked close-on-exec would show up here.
const LIST_FDS: &str = "ls -l /proc/self/fd | awk '$NF !~ /^\\/proc\\/[0-9]+\\/fd$/ && NF > 8 {print $(NF-2)}' | sort -n | tr '\\n' ' '";

#[test]
fn setup_tightens_a_loose_state_dir_and_log_and_leaks_nothing_to_the_script() {
    let dir = TempDir::new("privilege-setup");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    write_file(&state.join("setup.log"), "an old log\n", 0o666);
    write_file(
        &dir.join("setup.sh"),
        &format!("#!/bin/bash\necho \"fds: $({LIST_FDS})\"\nenv\n"),
        0o755,
    );
    let mut cmd = agent_command();
    cmd.args(["setup", "--script"])
        .arg(dir.join("setup.sh"))
        .arg("--state-dir")
        .arg(&state)
        .env(SENTINEL.0, SENTINEL.1);
    // As cloud-init runs it, nothing open but 0, 1 and 2; and then one
    // descriptor without close-on-exec (fd 9), as a careless parent would
    // leave it: the script must not get that one either.
    // SAFETY: fcntl, open and dup2 are async-signal-safe; nothing is
    // allocated.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            for fd in 3..4096 {
                nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC);
            }
            let fd = nix::libc::open(c"/dev/null".as_ptr(), nix::libc::O_RDONLY);
            if fd < 0 || nix::libc::dup2(fd, 9) != 9 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&state) & 0o022, 0, "state dir {:04o}", mode(&state));
    assert_eq!(mode(&state.join("setup.log")), 0o600);
    assert_eq!(mode(&state.join("setup.json")) & 0o022, 0);
    let log = std::fs::read_to_string(state.join("setup.log")).unwrap();
    assert!(
        !log.contains(SENTINEL.0),
        "the script saw the agent's environment:\n{log}"
    );
    assert!(
        log.contains("fds: 0 1 2 \n"),
        "the script inherited descriptors:\n{log}"
    );
}

#[test]
fn exec_children_get_a_clean_environment_and_only_three_descriptors() {
    let agent = Agent::builder("privilege-exec")
        .no_cloud_init()
        .env(SENTINEL.0, SENTINEL.1)
        .inheriting_a_descriptor()
        .start();
    // The agent really has both, so their absence below means something.
    let own = std::fs::read(format!("/proc/{}/environ", agent.child.id())).unwrap();
    assert!(String::from_utf8_lossy(&own).contains(SENTINEL.1));
    let inherited = std::fs::read_link(format!("/proc/{}/fd/9", agent.child.id()));
    assert_eq!(
        inherited.ok().as_deref(),
        Some(std::path::Path::new("/dev/null")),
        "the agent was to inherit fd 9"
    );
    // Several at once, so other commands' pipes and sockets are open in the
    // agent while each child starts.
    let addr = agent.addr;
    let runs: Vec<_> = (0..6)
        .map(|i| {
            std::thread::spawn(move || {
                let user = if i % 2 == 0 { "root" } else { "nobody" };
                let body = json!({
                    "command": format!("echo \"fds: $({LIST_FDS})\"; env; sleep 0.3"),
                    "user": user,
                    "stdin": "x",
                    "env": {"HOME": "/nonexistent"},
                });
                exec_at(addr, &body).json()
            })
        })
        .collect();
    for r in runs {
        let v = r.join().unwrap();
        let out = v["stdout"].as_str().unwrap();
        assert!(
            out.starts_with("fds: 0 1 2 \n"),
            "a child inherited descriptors: {out}"
        );
        assert!(
            !out.contains(SENTINEL.0),
            "a child saw the agent's environment: {out}"
        );
        assert!(!out.contains("RUST_LOG"), "{out}");
    }
}
