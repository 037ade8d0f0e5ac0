//! `labctl wait --follow`: the setup log as it grows, read through a pipe
//! line by line. No timing assertion: a setup that waits for a file the
//! test creates only once it has read a line proves the line came while
//! the setup ran (a labctl that printed the log at the end would never
//! see the file, and the wait would end on its `--timeout`).

use super::*;
use std::time::{Duration, Instant};

/// Lines as they arrive, with the time since the start (shown when an
/// assertion fails).
type Timed = Vec<(String, Duration)>;

/// A setup that prints `lines`, then waits (at most 120 s) for `go`.
fn waits_for(go: &Path, lines: &str, then: &str) -> String {
    format!(
        "{lines}\nfor _ in $(seq 1200); do [ -e '{go}' ] && break; sleep 0.1; done\n{then}\n",
        go = go.display()
    )
}

/// `labctl wait --follow` on `agents` (`extra` args), its stdout read line
/// by line; `on_line` sees each line as it comes.
fn follow(
    agents: &[&Agent],
    extra: &[&str],
    mut on_line: impl FnMut(&str),
) -> (std::process::ExitStatus, Timed, String) {
    let mut cmd = Command::new(labctl_bin());
    cmd.args(["wait", "--follow", "--timeout", "120"]);
    for a in agents {
        cmd.args(conn(a));
    }
    cmd.args(extra)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    // Stderr read beside, so a full pipe never blocks labctl.
    let mut err_pipe = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err_pipe, &mut s).unwrap();
        s
    });
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        on_line(&line);
        lines.push((line, start.elapsed()));
    }
    let status = child.wait().unwrap();
    (status, lines, err.join().unwrap())
}

fn texts(lines: &Timed) -> Vec<&str> {
    lines.iter().map(|(l, _)| l.as_str()).collect()
}

/// Each line while the setup runs, a hostile one escaped, then the VM's
/// life and the verdict.
#[test]
fn the_log_as_it_grows_then_the_life() {
    let dir = TempDir::new("follow");
    let go = dir.join("go");
    let agent = Agent::start(AgentOptions::default().setup(&waits_for(
        &go,
        "echo 'step 1'",
        "printf 'owned \\033]0;title\\007 10%%\\r50%%\\n'; echo 'step 2' >&2; echo 'step 3'",
    )));
    let mut seen_while_running = false;
    let (status, lines, err) = follow(&[&agent], &[], |line| {
        if line == "step 1" {
            // The setup is still waiting for this file: it has not ended.
            seen_while_running = !go.exists();
            std::fs::write(&go, "").unwrap();
        }
    });
    let all = texts(&lines);
    assert_eq!(status.code(), Some(0), "{lines:?}\n{err}");
    assert!(seen_while_running, "{lines:?}");
    // The log whole, in order, the ESC, BEL and CR shown escaped (stderr
    // is in the log too), before the life.
    assert_eq!(
        all[..4],
        [
            "step 1",
            "owned \\x1b]0;title\\x07 10%\\r50%",
            "step 2",
            "step 3"
        ],
        "{lines:?}"
    );
    assert!(all[4].starts_with("instance "), "{lines:?}");
    assert!(
        all.iter().any(|l| l.contains("kernel → ready")),
        "{lines:?}"
    );
    assert!(lines.iter().all(|(l, _)| !l.contains('\x1b')), "{lines:?}");
    assert!(err.contains("ready after"), "{err}");
}

/// A failed setup: its log (whole, once), then the error, exit 4.
#[test]
fn a_failed_setup_its_log_and_exit_4() {
    let agent = Agent::start(AgentOptions::default().setup(
        "echo 'installing nginx'\necho 'E: unable to locate package' >&2\nprintf 'no newline'\nexit 100\n",
    ));
    let (status, lines, err) = follow(&[&agent], &[], |_| {});
    assert_eq!(status.code(), Some(4), "{lines:?}\n{err}");
    assert_eq!(
        texts(&lines),
        [
            "installing nginx",
            "E: unable to locate package",
            "no newline"
        ],
        "the log and no life: {err}"
    );
    assert!(
        err.contains("error: the lab is not ready at http://127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("100"), "exit code shown: {err}");
    assert!(
        !err.contains("setup log (last lines)"),
        "the log is not shown twice: {err}"
    );
}

/// With `--json` the log goes to stderr and stdout is the one JSON
/// object; with several VMs each line names its VM.
#[test]
fn several_vms_with_json() {
    let a = Agent::start(AgentOptions::default().setup("echo 'a says hi'"));
    let b = Agent::start(AgentOptions::default().setup("echo 'b fails' >&2; exit 1"));
    let (status, lines, err) = follow(&[&a, &b], &["--json"], |_| {});
    assert_eq!(status.code(), Some(4), "{lines:?}\n{err}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v: Value = serde_json::from_str(&lines[0].0).unwrap();
    assert_eq!(v["ready"], false);
    assert_eq!(v["vms"][1]["error"]["kind"], "setup_failed");
    let err_lines: Vec<&str> = err.lines().collect();
    assert!(
        err_lines.contains(&format!("{}: a says hi", a.url()).as_str()),
        "{err}"
    );
    assert!(
        err_lines.contains(&format!("{}: b fails", b.url()).as_str()),
        "{err}"
    );
}

/// A log replaced under the follower (a new setup run) is followed again
/// from its start, with a note.
#[test]
fn a_replaced_log_is_followed_from_its_start() {
    let dir = TempDir::new("follow-replaced");
    let go = dir.join("go");
    let agent = Agent::start(AgentOptions::default().setup(&waits_for(
        &go,
        "echo 'first run: a line longer than the new log'",
        "true",
    )));
    let log = agent.dir.join("state").join("setup.log");
    let (status, lines, err) = follow(&[&agent], &[], |line| {
        if line.starts_with("first run") {
            // Replaced (a new file renamed over it), shorter than what
            // was read; then the setup may end.
            let tmp = agent.dir.join("new.log");
            std::fs::write(&tmp, "second\n").unwrap();
            std::fs::rename(&tmp, &log).unwrap();
            std::fs::write(&go, "").unwrap();
        }
    });
    assert_eq!(status.code(), Some(0), "{lines:?}\n{err}");
    assert_eq!(
        texts(&lines)[..2],
        ["first run: a line longer than the new log", "second"],
        "{err}"
    );
    assert!(
        err.contains("note: the setup log was replaced (a new setup run): from its start"),
        "{err}"
    );
}

/// An agent without `/v1/setup/log` (an older one, or something else on
/// its port): a note says the log cannot be followed, and the wait goes on
/// to its own verdict.
#[test]
fn an_agent_without_the_setup_log_is_waited_for_all_the_same() {
    use lab_agent_tests::hostile::{Behaviour, HostileAgent};
    let agent = HostileAgent::start(Behaviour::Honest);
    let dir = TempDir::new("follow-honest");
    let token_file = dir.join("token");
    write_token(&token_file, &new_token());
    let out = labctl([
        "wait",
        "--follow",
        "--timeout",
        "30",
        "--url",
        &agent.url(),
        "--token-file",
        token_file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("note: the setup log cannot be followed: ") && err.contains("404"),
        "{err}"
    );
    assert!(err.contains("ready after"), "{err}");
}
