//! `POST /v1/exec`: run one command through a login shell in the guest.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Default `timeout_secs` when a request leaves it out.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Longest timeout a request may ask for (one hour).
pub const MAX_TIMEOUT_SECS: u64 = 3600;
/// Default per-stream output cap.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1024 * 1024;
/// Hard per-stream output cap: a request asking for more is rejected.
pub const MAX_OUTPUT_BYTES_CAP: u64 = 16 * 1024 * 1024;
/// Longest `command`: Linux limits one argument of `execve` to 128 KiB
/// (`MAX_ARG_STRLEN`, including its NUL). Longer scripts belong in a file.
pub const MAX_COMMAND_BYTES: usize = 128 * 1024 - 1;
/// Default user commands run as.
pub const DEFAULT_USER: &str = "root";

/// A command to run. Only `command` is required; unknown fields are rejected
/// so that a typo in a backend (`timeout` for `timeout_secs`) is an error,
/// not a silently ignored setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Passed to `bash --login -c` as one argument.
    pub command: String,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    #[serde(default = "default_user")]
    pub user: String,
    /// Working directory; `null` means the user's home.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Added to the clean login environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Written to the command's stdin; `null` means `/dev/null`.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Per-stream cap; output past it is drained and dropped.
    #[serde(default = "default_max_output")]
    pub max_output_bytes: u64,
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECS
}
fn default_user() -> String {
    DEFAULT_USER.to_owned()
}
fn default_max_output() -> u64 {
    DEFAULT_MAX_OUTPUT_BYTES
}

impl ExecRequest {
    /// A request with every optional field at its default.
    pub fn new(command: impl Into<String>) -> Self {
        ExecRequest {
            command: command.into(),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            user: DEFAULT_USER.to_owned(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = user.into();
        self
    }

    pub fn timeout_secs(mut self, secs: u64) -> Self {
        self.timeout_secs = secs;
        self
    }

    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    pub fn stdin(mut self, stdin: impl Into<String>) -> Self {
        self.stdin = Some(stdin.into());
        self
    }

    pub fn max_output_bytes(mut self, bytes: u64) -> Self {
        self.max_output_bytes = bytes;
        self
    }
}

/// What happened to a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    /// Exit status, or `null` when the shell was killed by a signal.
    pub exit_code: Option<i32>,
    /// The signal number that killed the shell, if one did.
    pub signal: Option<i32>,
    /// The timeout expired and the process group was killed.
    pub timed_out: bool,
    pub duration_ms: u64,
    /// UTF-8 (lossy) stdout, at most `max_output_bytes` of it.
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

impl ExecResult {
    /// True when the command exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// The status a shell would report: the exit code, or 128 + signal.
    pub fn shell_status(&self) -> i32 {
        match (self.exit_code, self.signal) {
            (Some(code), _) => code,
            (None, Some(sig)) => 128 + sig,
            (None, None) => 255,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_command_is_required() {
        let r: ExecRequest = serde_json::from_str(r#"{"command":"true"}"#).unwrap();
        assert_eq!(r, ExecRequest::new("true"));
        assert_eq!(r.timeout_secs, 60);
        assert_eq!(r.user, "root");
        assert_eq!(r.max_output_bytes, 1 << 20);
    }

    #[test]
    fn unknown_fields_are_rejected_by_name() {
        let err = serde_json::from_str::<ExecRequest>(r#"{"command":"true","timeout":5}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `timeout`"), "{err}");
    }

    #[test]
    fn full_request_round_trips() {
        let text = r#"{"command":"systemctl is-active nginx","timeout_secs":60,"user":"root",
            "cwd":null,"env":{},"stdin":null,"max_output_bytes":1048576}"#;
        let r: ExecRequest = serde_json::from_str(text).unwrap();
        assert_eq!(r.command, "systemctl is-active nginx");
        let back: ExecRequest = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn shell_status_follows_shell_convention() {
        let mut r = ExecResult {
            exit_code: Some(3),
            signal: None,
            timed_out: false,
            duration_ms: 1,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
        };
        assert_eq!(r.shell_status(), 3);
        assert!(!r.success());
        r.exit_code = None;
        r.signal = Some(9);
        assert_eq!(r.shell_status(), 137);
    }
}
