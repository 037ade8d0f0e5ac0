//! `POST /v1/exec`: run one command through a login shell in the guest.

use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;

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
/// Largest `max_pids` a request may ask for: half of the smallest default
/// `pid_max` (32768, what the kernel picks on a VM with few vCPUs), so even
/// a command at the maximum leaves the other half to the rest of the guest
/// (systemd, sshd, the agent's next command).
pub const MAX_PIDS: u32 = 16_384;
/// The agent's `pids.max` per command unless told otherwise (`lab-agent
/// serve --pids-max`; the argument is in SECURITY.md): far above what a
/// real check starts (a build with `make -j`, a kubeadm phase: hundreds),
/// and low enough that a fork bomb stops at it within milliseconds while
/// the guest still has processes to spare.
pub const DEFAULT_MAX_PIDS: u32 = 4096;
/// Smallest `max_memory_bytes` a request may ask for: a login shell alone
/// takes a few MiB, and a limit below that fails every command for a reason
/// that has nothing to do with it.
pub const MIN_MEMORY_BYTES: u64 = 16 * 1024 * 1024;
/// The values of [`ExecResult::limits_hit`].
pub const LIMIT_PIDS: &str = "pids";
pub const LIMIT_MEMORY: &str = "memory";

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
    /// Added to the clean login environment. A name given twice is an
    /// error, not last-wins: the two values say different things.
    #[serde(default, deserialize_with = "unique_keys")]
    pub env: BTreeMap<String, String>,
    /// Written to the command's stdin; `null` means `/dev/null`.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Per-stream cap; output past it is drained and dropped.
    #[serde(default = "default_max_output")]
    pub max_output_bytes: u64,
    /// Which profile files the shell reads; left out of the JSON when it is
    /// the default, so a request stays readable by agents that predate it.
    #[serde(default, skip_serializing_if = "Profile::is_login")]
    pub profile: Profile,
    /// Keep what the command leaves running after its shell exits (a server
    /// a lab needs). By default it is killed with the command. What is left
    /// stays in the command's cgroup, under its limits; a timeout or an
    /// abandoned request kills it either way. Sent only when true, so a
    /// request stays readable by agents that predate it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub leave_running: bool,
    /// The command's process limit (`pids.max` of its cgroup), 1 to
    /// [`MAX_PIDS`]; `None`: the agent's default. Enforced where the guest
    /// delegates the pids controller (else `RLIMIT_NPROC` for a non-root
    /// user, see SECURITY.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u32>,
    /// The command's memory limit (`memory.max` of its cgroup), at least
    /// [`MIN_MEMORY_BYTES`]; `None`: the agent's default, which is also the
    /// most it gives (a larger value gets the default). Enforced where the
    /// guest delegates the memory controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    /// Answer with the output as it comes: `application/x-ndjson`, one
    /// [`StreamEvent`] per line, the result last. Sent only when true, so a
    /// request stays readable by agents that predate it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stream: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Which startup files the shell reads before the command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// `bash --login -c`: the system's profile, then the user's own
    /// (`~/.bash_profile`, `~/.profile`), which the user controls.
    #[default]
    Login,
    /// The login environment from the system's files only (`/etc/profile`
    /// and what it sources), never the user's dotfiles: the user cannot
    /// change what the command reports by editing their profile.
    System,
    /// `bash --noprofile --norc -c`: no startup file at all.
    None,
}

impl Profile {
    pub fn is_login(&self) -> bool {
        *self == Profile::Login
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Profile::Login => "login",
            Profile::System => "system",
            Profile::None => "none",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Profile, String> {
        [Profile::Login, Profile::System, Profile::None]
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not a profile: use `login`, `system` or `none`"))
    }
}

/// A JSON object into a map, refusing a key that appears twice (serde's
/// map impl keeps the last one silently).
fn unique_keys<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object of string values")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, v)) = m.next_entry::<String, String>()? {
                if out.contains_key(&k) {
                    return Err(serde::de::Error::custom(format_args!(
                        "environment variable `{}` is given twice: send each name once",
                        k.escape_debug()
                    )));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Visitor)
}

/// Why a well-formed request cannot run; the message says what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRequest(pub String);

impl fmt::Display for InvalidRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidRequest {}

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
            profile: Profile::Login,
            leave_running: false,
            max_pids: None,
            max_memory_bytes: None,
            stream: false,
        }
    }

    /// The checks the agent makes before running anything (the agent
    /// answers 400 with this message; a client can make them first).
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        let bad = |m: String| Err(InvalidRequest(m));
        if self.command.trim().is_empty() {
            return bad("command is empty".into());
        }
        if self.command.len() > MAX_COMMAND_BYTES {
            return bad(format!(
                "command is {} bytes; Linux passes at most {MAX_COMMAND_BYTES} bytes in one argument: put a long script in a file (or send it as stdin to `bash -s`)",
                self.command.len()
            ));
        }
        if self.timeout_secs == 0 || self.timeout_secs > MAX_TIMEOUT_SECS {
            return bad(format!(
                "timeout_secs is {}: use 1 to {MAX_TIMEOUT_SECS}",
                self.timeout_secs
            ));
        }
        // Each variable reaches execve as one `NAME=value` string, under the
        // same limit as the command.
        if let Some((k, v)) = self
            .env
            .iter()
            .find(|(k, v)| k.len() + 1 + v.len() > MAX_COMMAND_BYTES)
        {
            let name: String = k.chars().take(64).collect();
            return bad(format!(
                "environment variable `{}` is {} bytes with its name; Linux passes at most {MAX_COMMAND_BYTES} bytes in one variable: send large data as stdin",
                name.escape_debug(),
                k.len() + 1 + v.len()
            ));
        }
        if self.max_output_bytes > MAX_OUTPUT_BYTES_CAP {
            return bad(format!(
                "max_output_bytes is {}: the cap is {MAX_OUTPUT_BYTES_CAP} (16 MiB)",
                self.max_output_bytes
            ));
        }
        if let Some(n) = self.max_pids
            && !(1..=MAX_PIDS).contains(&n)
        {
            return bad(format!("max_pids is {n}: use 1 to {MAX_PIDS}"));
        }
        if let Some(b) = self.max_memory_bytes
            && b < MIN_MEMORY_BYTES
        {
            return bad(format!(
                "max_memory_bytes is {b}: use at least {MIN_MEMORY_BYTES} (16 MiB); a login shell alone needs a few MiB"
            ));
        }
        Ok(())
    }

    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
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

    pub fn leave_running(mut self, leave: bool) -> Self {
        self.leave_running = leave;
        self
    }

    pub fn max_pids(mut self, n: Option<u32>) -> Self {
        self.max_pids = n;
        self
    }

    pub fn max_memory_bytes(mut self, bytes: Option<u64>) -> Self {
        self.max_memory_bytes = bytes;
        self
    }

    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }
}

/// The `Content-Type` of a streamed exec answer.
pub const STREAM_CONTENT_TYPE: &str = "application/x-ndjson";

/// One line of a streamed exec answer (`"stream": true`): output as the
/// command writes it, then its result, always last. The output events of a
/// stream are each at most `max_output_bytes` in total (the cap counts the
/// command's bytes, before escaping); the result's `stdout`/`stderr` hold
/// what was not streamed (empty from this agent), and its truncation flags
/// say what was cut. A stream that ends without a result was broken: a
/// client reports a transport error, never a success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamEvent {
    /// `{"stdout":"…"}`: UTF-8 (lossy); a character is never split
    /// between two events.
    Stdout(String),
    /// `{"stderr":"…"}`.
    Stderr(String),
    /// `{"result":{…}}`: the same fields as the plain answer.
    Result(ExecResult),
}

/// What a person reads about the limits a command hit, with their values
/// where the agent sent them: `hit its process limit (pids.max 4096)`.
/// `None` when it hit none. One wording for an exec's result and a check's.
pub fn limits_text(
    limits_hit: &[String],
    max_pids: Option<u32>,
    max_memory_bytes: Option<u64>,
) -> Option<String> {
    if limits_hit.is_empty() {
        return None;
    }
    let parts: Vec<String> = limits_hit
        .iter()
        .map(|l| match l.as_str() {
            LIMIT_PIDS => match max_pids {
                Some(n) => format!("its process limit (pids.max {n})"),
                None => "its process limit".into(),
            },
            LIMIT_MEMORY => match max_memory_bytes {
                Some(b) => format!("its memory limit (memory.max {} MiB)", b >> 20),
                None => "its memory limit".into(),
            },
            // A newer agent's limit: named, escaped, cut.
            other => format!(
                "its `{}` limit",
                other.escape_debug().take(32).collect::<String>()
            ),
        })
        .collect();
    Some(format!("hit {}", parts.join(" and ")))
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
    /// The limits the command ran into: [`LIMIT_PIDS`] (a fork failed at
    /// `pids.max`), [`LIMIT_MEMORY`] (the OOM killer ran in its cgroup).
    /// Left out of the JSON when empty; an older agent never sends it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits_hit: Vec<String>,
    /// The command's `pids.max` and `memory.max`, sent with `limits_hit`
    /// (so a report can say which value was hit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    /// The [`crate::lifecycle::Instance`] id of the VM that ran the
    /// command, so a grade can be tied to one life of the VM; absent from
    /// agents that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// The boot that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

impl ExecResult {
    /// True when the command exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// What a person reads about the limits the command hit: see
    /// [`limits_text`].
    pub fn limits_text(&self) -> Option<String> {
        limits_text(&self.limits_hit, self.max_pids, self.max_memory_bytes)
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
    fn profiles_parse_from_their_names() {
        for p in [Profile::Login, Profile::System, Profile::None] {
            assert_eq!(p.as_str().parse::<Profile>(), Ok(p));
        }
        let err = "user".parse::<Profile>().unwrap_err();
        assert!(err.contains("`login`, `system` or `none`"), "{err}");
    }

    #[test]
    fn duplicate_env_names_and_unknown_profiles_are_rejected() {
        let err = serde_json::from_str::<ExecRequest>(
            r#"{"command":"true","env":{"A":"1","B":"2","A":"3"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`A` is given twice"), "{err}");
        let err = serde_json::from_str::<ExecRequest>(r#"{"command":"true","profile":"user"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `user`"), "{err}");
        let r: ExecRequest =
            serde_json::from_str(r#"{"command":"true","profile":"system"}"#).unwrap();
        assert_eq!(r.profile, Profile::System);
        // The default stays off the wire, for agents that predate it.
        let text = serde_json::to_string(&ExecRequest::new("true")).unwrap();
        assert!(!text.contains("profile"), "{text}");
    }

    #[test]
    fn validate_names_the_problem() {
        let msg = |r: ExecRequest| r.validate().unwrap_err().to_string();
        assert!(ExecRequest::new("true").validate().is_ok());
        assert!(msg(ExecRequest::new(" ")).contains("command is empty"));
        assert!(msg(ExecRequest::new("x").timeout_secs(0)).contains("timeout_secs is 0"));
        assert!(
            msg(ExecRequest::new("x").max_output_bytes(MAX_OUTPUT_BYTES_CAP + 1))
                .contains("16 MiB")
        );
    }

    #[test]
    fn runaway_fields_default_off_and_stay_off_the_wire() {
        let r: ExecRequest = serde_json::from_str(r#"{"command":"true"}"#).unwrap();
        assert!(!r.leave_running);
        assert_eq!((r.max_pids, r.max_memory_bytes), (None, None));
        // Defaults are not sent: an older agent (deny_unknown_fields) still
        // takes the request.
        let text = serde_json::to_string(&r).unwrap();
        for key in ["leave_running", "max_pids", "max_memory_bytes"] {
            assert!(!text.contains(key), "{text}");
        }
        let r = ExecRequest::new("x")
            .leave_running(true)
            .max_pids(Some(100))
            .max_memory_bytes(Some(1 << 30));
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""leave_running":true"#), "{text}");
        assert!(text.contains(r#""max_pids":100"#), "{text}");
        assert!(text.contains(r#""max_memory_bytes":1073741824"#), "{text}");
        let back: ExecRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        let err = serde_json::from_str::<ExecRequest>(r#"{"command":"x","max_pids":-1}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid value"), "{err}");
    }

    #[test]
    fn limits_are_validated_with_their_range() {
        let msg = |r: ExecRequest| r.validate().unwrap_err().to_string();
        assert!(msg(ExecRequest::new("x").max_pids(Some(0))).contains("use 1 to 16384"));
        assert!(msg(ExecRequest::new("x").max_pids(Some(MAX_PIDS + 1))).contains("max_pids"));
        assert!(
            ExecRequest::new("x")
                .max_pids(Some(MAX_PIDS))
                .validate()
                .is_ok()
        );
        assert!(
            msg(ExecRequest::new("x").max_memory_bytes(Some(MIN_MEMORY_BYTES - 1)))
                .contains("at least 16777216")
        );
        assert!(
            ExecRequest::new("x")
                .max_memory_bytes(Some(MIN_MEMORY_BYTES))
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn limits_hit_is_omitted_when_empty_and_read_when_present() {
        let mut r: ExecResult = serde_json::from_str(
            r#"{"exit_code":0,"signal":null,"timed_out":false,"duration_ms":1,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false}"#,
        )
        .unwrap();
        assert!(r.limits_hit.is_empty());
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            !text.contains("limits_hit") && !text.contains("max_"),
            "{text}"
        );
        r.limits_hit = vec![LIMIT_PIDS.into(), LIMIT_MEMORY.into()];
        r.max_pids = Some(4096);
        r.max_memory_bytes = Some(1 << 30);
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""limits_hit":["pids","memory"]"#), "{text}");
        assert_eq!(serde_json::from_str::<ExecResult>(&text).unwrap(), r);
        assert_eq!(
            r.limits_text().unwrap(),
            "hit its process limit (pids.max 4096) and its memory limit (memory.max 1024 MiB)"
        );
    }

    #[test]
    fn stream_is_off_the_wire_by_default_and_events_read_as_documented() {
        let text = serde_json::to_string(&ExecRequest::new("x")).unwrap();
        assert!(!text.contains("stream"), "{text}");
        let text = serde_json::to_string(&ExecRequest::new("x").stream(true)).unwrap();
        assert!(text.contains(r#""stream":true"#), "{text}");
        let ev: StreamEvent = serde_json::from_str(r#"{"stdout":"a\n"}"#).unwrap();
        assert_eq!(ev, StreamEvent::Stdout("a\n".into()));
        let ev: StreamEvent = serde_json::from_str(r#"{"stderr":""}"#).unwrap();
        assert_eq!(ev, StreamEvent::Stderr(String::new()));
        let ev: StreamEvent = serde_json::from_str(
            r#"{"result":{"exit_code":0,"signal":null,"timed_out":true,"duration_ms":1,"stdout":"","stderr":"","stdout_truncated":true,"stderr_truncated":false}}"#,
        )
        .unwrap();
        assert!(matches!(ev, StreamEvent::Result(r) if r.timed_out && r.stdout_truncated));
        assert!(serde_json::from_str::<StreamEvent>(r#"{"stdin":"x"}"#).is_err());
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
            limits_hit: Vec::new(),
            max_pids: None,
            max_memory_bytes: None,
            instance_id: None,
            boot_id: None,
        };
        assert_eq!(r.shell_status(), 3);
        assert!(!r.success());
        r.exit_code = None;
        r.signal = Some(9);
        assert_eq!(r.shell_status(), 137);
    }
}
