//! `labctl` end to end: the real binary against real agents on loopback,
//! its exit statuses, what it prints where. One module per verb or concern;
//! `labctl try` without `--vm` runs a sandbox, so its tests are in
//! `../sandbox/main.rs` (which says why they must not run beside these).

use lab_agent_tests::local::{
    Agent, AgentOptions, ReservedPort, TempDir, agent_bin, check_outcomes, describe, labctl,
    labctl_bin, new_token, write_token,
};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn conn(agent: &Agent) -> Vec<String> {
    vec![
        "--url".into(),
        agent.url(),
        "--token-file".into(),
        agent.token_file.display().to_string(),
    ]
}

/// A `labctl` running in the background, its stderr read line by line, so
/// a test acts once it reports something (an event, not a sleep).
struct Watched {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStderr>>,
    /// Stderr so far.
    err: String,
}

impl Watched {
    fn spawn<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Watched {
        let mut child = Command::new(labctl_bin())
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        Watched {
            child,
            lines,
            err: String::new(),
        }
    }

    /// Reads stderr until a line contains `needle` (or it ends).
    fn until(&mut self, needle: &str) {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            self.err.push_str(&line);
            self.err.push('\n');
            if line.contains(needle) {
                return;
            }
        }
    }

    /// Reads the rest and waits: the output (its stderr is in `err`).
    fn finish(mut self) -> (std::process::Output, String) {
        for line in self.lines.by_ref() {
            self.err.push_str(&line.unwrap());
            self.err.push('\n');
        }
        (self.child.wait_with_output().unwrap(), self.err)
    }
}

/// A lab folder holding this `lab.toml`; a test adds what else it needs.
fn lab_folder(tag: &str, lab_toml: &str) -> TempDir {
    let dir = TempDir::new(tag);
    dir.write("lab.toml", lab_toml, 0o644);
    dir
}

mod channels;
mod exec;
mod follow;
mod grade;
mod grading;
mod hostile;
mod lab_toml;
mod life;
mod lint;
mod output;
mod printing;
mod session;
mod timeouts;
mod try_flags;
mod wait;
