//! `POST /v1/exec`: run one command through a login shell in the guest.

use serde::de::{Error as _, MapAccess};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

mod options;
#[cfg(feature = "lab")]
mod raw;
pub use options::{
    Bounded, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_PIDS, DEFAULT_TIMEOUT_SECS, DEFAULT_USER,
    ExecOptions, MAX_COMMAND_BYTES, MAX_OUTPUT_BYTES_CAP, MAX_PIDS, MAX_TIMEOUT_SECS,
    MIN_MEMORY_BYTES, OptionProblem, Profile,
};
#[cfg(feature = "lab")]
pub use raw::RawExecOptions;

/// The values of [`ExecResult::limits_hit`].
pub const LIMIT_PIDS: &str = "pids";
pub const LIMIT_MEMORY: &str = "memory";

/// A command to run: `command`, how it runs ([`ExecOptions`], its fields
/// side by side with `command` in the JSON) and `stream`. Only `command` is
/// required; unknown fields are rejected so that a typo in a backend
/// (`timeout` for `timeout_secs`) is an error, not a silently ignored
/// setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// Passed to `bash --login -c` as one argument.
    pub command: String,
    pub options: ExecOptions,
    /// Answer with the output as it comes: `application/x-ndjson`, one
    /// [`StreamEvent`] per line, the result last. Sent only when true, so a
    /// request stays readable by agents that predate it.
    pub stream: bool,
    /// The life of the VM ([`crate::lifecycle::Instance`] id) the command
    /// is meant for: an agent of another instance answers 409
    /// `instance_changed` and runs nothing. Sent only when set (an agent
    /// that predates it refuses the field with a 400, having run nothing).
    pub instance_id: Option<String>,
}

/// The request's JSON names: `command`, the options', `stream`,
/// `instance_id`. Their index is also a bit in the deserializer's record of
/// what it has seen.
const FIELDS: [&str; 13] = {
    let mut all = ["command"; 13];
    let mut i = 0;
    while i < options::FIELDS.len() {
        all[i + 1] = options::FIELDS[i];
        i += 1;
    }
    all[11] = "stream";
    all[12] = "instance_id";
    all
};

impl Serialize for ExecRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("ExecRequest", FIELDS.len())?;
        st.serialize_field(FIELDS[0], &self.command)?;
        self.options.write(&mut st)?;
        if self.stream {
            st.serialize_field(FIELDS[11], &true)?;
        }
        if let Some(id) = &self.instance_id {
            st.serialize_field(FIELDS[12], id)?;
        }
        st.end()
    }
}

/// A field name of the request, as its index in [`FIELDS`].
struct Field(usize);

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Field, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Field, E> {
                FIELDS
                    .iter()
                    .position(|f| *f == v)
                    .map(Field)
                    .ok_or_else(|| E::unknown_field(v, &FIELDS))
            }
        }
        d.deserialize_identifier(Visitor)
    }
}

impl<'de> Deserialize<'de> for ExecRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ExecRequest, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ExecRequest;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("struct ExecRequest")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExecRequest, A::Error> {
                let mut command = None;
                let mut options = ExecOptions::default();
                let mut stream = false;
                let mut instance_id = None;
                let mut seen = 0u16;
                while let Some(Field(i)) = map.next_key()? {
                    if seen & 1 << i != 0 {
                        return Err(A::Error::duplicate_field(FIELDS[i]));
                    }
                    seen |= 1 << i;
                    match i {
                        0 => command = Some(map.next_value()?),
                        11 => stream = map.next_value()?,
                        12 => instance_id = map.next_value()?,
                        _ => options.read(i - 1, &mut map)?,
                    }
                }
                Ok(ExecRequest {
                    command: command.ok_or_else(|| A::Error::missing_field(FIELDS[0]))?,
                    options,
                    stream,
                    instance_id,
                })
            }
        }
        d.deserialize_struct("ExecRequest", &FIELDS, Visitor)
    }
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

impl ExecRequest {
    /// A request with every option at its default.
    pub fn new(command: impl Into<String>) -> Self {
        ExecRequest::with_options(command, ExecOptions::default())
    }

    /// A request to run `command` as `options` say.
    pub fn with_options(command: impl Into<String>, options: ExecOptions) -> Self {
        ExecRequest {
            command: command.into(),
            options,
            stream: false,
            instance_id: None,
        }
    }

    /// The checks the agent makes before running anything (the agent
    /// answers 400 with this message; a client can make them first): the
    /// command's, then [`ExecOptions::validate`]'s first problem.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        if self.command.trim().is_empty() {
            return Err(InvalidRequest("command is empty".into()));
        }
        if self.command.len() > MAX_COMMAND_BYTES {
            return Err(InvalidRequest(format!(
                "command is {} bytes; Linux passes at most {MAX_COMMAND_BYTES} bytes in one argument: put a long script in a file (or send it as stdin to `bash -s`)",
                self.command.len()
            )));
        }
        if let Some(id) = self
            .instance_id
            .as_deref()
            .filter(|id| !crate::lifecycle::is_instance_id(id))
        {
            return Err(InvalidRequest(format!(
                "instance_id `{}` is not {} lowercase hex digits (an `instance.id` of `/v1/ready` or `/v1/info`)",
                crate::text::escape(id),
                crate::lifecycle::INSTANCE_ID_LEN
            )));
        }
        match self.options.validate().into_iter().next() {
            Some(problem) => Err(InvalidRequest(problem.to_string())),
            None => Ok(()),
        }
    }

    pub fn profile(mut self, profile: Profile) -> Self {
        self.options.profile = profile;
        self
    }

    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.options.user = user.into();
        self
    }

    pub fn timeout_secs(mut self, secs: u64) -> Self {
        self.options.timeout_secs = secs;
        self
    }

    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.options.cwd = Some(cwd.into());
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.env.insert(key.into(), value.into());
        self
    }

    pub fn stdin(mut self, stdin: impl Into<String>) -> Self {
        self.options.stdin = Some(stdin.into());
        self
    }

    pub fn max_output_bytes(mut self, bytes: u64) -> Self {
        self.options.max_output_bytes = bytes;
        self
    }

    pub fn leave_running(mut self, leave: bool) -> Self {
        self.options.leave_running = leave;
        self
    }

    pub fn max_pids(mut self, n: Option<u32>) -> Self {
        self.options.max_pids = n;
        self
    }

    pub fn max_memory_bytes(mut self, bytes: Option<u64>) -> Self {
        self.options.max_memory_bytes = bytes;
        self
    }

    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Meant for instance `id` only (see [`ExecRequest::instance_id`]).
    pub fn instance(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
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
        assert_eq!(r.options.timeout_secs, 60);
        assert_eq!(r.options.user, "root");
        assert_eq!(r.options.max_output_bytes, 1 << 20);
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
    fn instance_id_is_sent_only_when_set_and_must_be_one() {
        let plain = serde_json::to_string(&ExecRequest::new("true")).unwrap();
        assert!(!plain.contains("instance_id"), "{plain}");
        let id = "0123456789abcdef0123456789abcdef";
        let pinned = ExecRequest::new("true").instance(id);
        let text = serde_json::to_string(&pinned).unwrap();
        assert!(
            text.ends_with(&format!(r#","instance_id":"{id}"}}"#)),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<ExecRequest>(&text).unwrap(), pinned);
        assert_eq!(pinned.validate(), Ok(()));
        let err = ExecRequest::new("true")
            .instance("ABC\n")
            .validate()
            .unwrap_err();
        assert!(err.0.contains(r"`ABC\n` is not 32 lowercase hex"), "{err}");
        let twice = format!(r#"{{"command":"x","instance_id":"{id}","instance_id":"{id}"}}"#);
        let err = serde_json::from_str::<ExecRequest>(&twice)
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate field `instance_id`"), "{err}");
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
        assert_eq!(r.options.profile, Profile::System);
        // The default stays off the wire, for agents that predate it.
        let text = serde_json::to_string(&ExecRequest::new("true")).unwrap();
        assert!(!text.contains("profile"), "{text}");
    }

    /// The JSON of a request is what the flat struct of earlier versions
    /// wrote, byte for byte (the options are fields of the request, in the
    /// same order, the same ones left out), and reads back.
    #[test]
    fn the_wire_shape_is_the_flat_one() {
        let text = serde_json::to_string(&ExecRequest::new("true")).unwrap();
        assert_eq!(
            text,
            r#"{"command":"true","timeout_secs":60,"user":"root","cwd":null,"env":{},"stdin":null,"max_output_bytes":1048576}"#
        );
        let full = ExecRequest::new("x")
            .timeout_secs(5)
            .user("student")
            .cwd("/tmp")
            .env("B", "2")
            .env("A", "1")
            .stdin("in")
            .max_output_bytes(10)
            .profile(Profile::System)
            .leave_running(true)
            .max_pids(Some(7))
            .max_memory_bytes(Some(1 << 30))
            .stream(true);
        let text = serde_json::to_string(&full).unwrap();
        assert_eq!(
            text,
            r#"{"command":"x","timeout_secs":5,"user":"student","cwd":"/tmp","env":{"A":"1","B":"2"},"stdin":"in","max_output_bytes":10,"profile":"system","leave_running":true,"max_pids":7,"max_memory_bytes":1073741824,"stream":true}"#
        );
        assert_eq!(serde_json::from_str::<ExecRequest>(&text).unwrap(), full);
        // Fields in any order, `command` last.
        let r: ExecRequest =
            serde_json::from_str(r#"{"stream":true,"user":"u","command":"c"}"#).unwrap();
        assert_eq!(r, ExecRequest::new("c").user("u").stream(true));
    }

    #[test]
    fn unknown_repeated_and_missing_fields_are_named() {
        let err = |text: &str| {
            serde_json::from_str::<ExecRequest>(text)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(r#"{"command":"x","bogus":1}"#),
            "unknown field `bogus`, expected one of `command`, `timeout_secs`, `user`, `cwd`, `env`, `stdin`, `max_output_bytes`, `profile`, `leave_running`, `max_pids`, `max_memory_bytes`, `stream`, `instance_id` at line 1 column 22"
        );
        assert_eq!(
            err(r#"{"command":"x","timeout_secs":1,"timeout_secs":2}"#),
            "duplicate field `timeout_secs` at line 1 column 46"
        );
        assert_eq!(
            err(r#"{"command":"x","command":"y"}"#),
            "duplicate field `command` at line 1 column 24"
        );
        assert_eq!(
            err(r#"{"stream":true}"#),
            "missing field `command` at line 1 column 15"
        );
        assert!(
            err(r#"{"command":"x","stream":1}"#)
                .contains("invalid type: integer `1`, expected a boolean")
        );
        // An array is not a request (the derived struct of earlier versions
        // took `["x"]` as one, field by position).
        assert!(err(r#"["x"]"#).contains("invalid type: sequence, expected struct ExecRequest"));
    }

    #[test]
    fn options_report_every_problem_and_the_request_the_first() {
        let mut o = ExecOptions {
            timeout_secs: 0,
            max_output_bytes: MAX_OUTPUT_BYTES_CAP + 1,
            max_pids: Some(0),
            max_memory_bytes: Some(1),
            ..ExecOptions::default()
        };
        o.env.insert("V".into(), "v".repeat(MAX_COMMAND_BYTES));
        let problems = o.validate();
        let keys: Vec<String> = problems.iter().map(|p| p.key()).collect();
        assert_eq!(
            keys,
            [
                "timeout_secs",
                "max_output_bytes",
                "max_pids",
                "max_memory_bytes",
                "env.V"
            ]
        );
        assert_eq!(
            problems[0].to_string(),
            "timeout_secs is 0: use a number of seconds from 1 to 3600"
        );
        assert_eq!(
            problems[4].to_string(),
            "environment variable `V` is 131073 bytes with its name; Linux passes at most 131071 bytes in one variable: send large data as stdin"
        );
        assert_eq!(
            problems[2].detail().to_string(),
            "is 0: use 1 to 16384 processes, or remove the key for the agent's default (4096)"
        );
        let err = ExecRequest::with_options("x", o).validate().unwrap_err();
        assert_eq!(err.to_string(), problems[0].to_string());
        assert!(ExecOptions::default().validate().is_empty());
        // An author's number: signed, its sign kept in the message.
        assert_eq!(Bounded::TimeoutSecs.check(30), Ok(30));
        assert_eq!(
            Bounded::MaxOutputBytes.check(-1).unwrap_err().to_string(),
            "max_output_bytes is -1: use a number of bytes from 0 to 16777216 (16 MiB)"
        );
        assert_eq!(Bounded::MaxOutputBytes.check(0), Ok(0));
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
        assert!(!r.options.leave_running);
        assert_eq!(
            (r.options.max_pids, r.options.max_memory_bytes),
            (None, None)
        );
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
