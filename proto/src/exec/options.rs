//! How a command runs — user, timeout, environment, output cap, limits —
//! declared once, with its limits and its one validation. The wire request
//! ([`ExecRequest`](super::ExecRequest): `command` + these), a lab's check
//! and the lab-wide defaults (`lab.toml`) are all made of [`ExecOptions`], so
//! a rule changed here is changed for the agent, the client and `lab.toml`
//! alike.

use serde::de::{Error as _, MapAccess};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Default `timeout_secs`.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Longest `timeout_secs` of a command or a check: an hour. A check is part
/// of a grade a student waits for; anything longer is a hang, not a check.
pub const MAX_TIMEOUT_SECS: u64 = 3600;
/// Default per-stream output cap.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1024 * 1024;
/// Hard per-stream output cap (16 MiB): a request asking for more is
/// rejected. The agent holds up to this much per stream per exec, so it
/// bounds the agent's memory (eight concurrent execs: 256 MiB at most).
pub const MAX_OUTPUT_BYTES_CAP: u64 = 16 * 1024 * 1024;
/// Longest `command`: Linux limits one argument of `execve` to 128 KiB
/// (`MAX_ARG_STRLEN`, including its NUL). Longer scripts belong in a file.
/// Each `env` variable (`NAME=value`) is under the same limit.
pub const MAX_COMMAND_BYTES: usize = 128 * 1024 - 1;
/// Default user commands run as.
pub const DEFAULT_USER: &str = "root";
/// Largest `max_pids`: half of the smallest default `pid_max` (32768, what
/// the kernel picks on a VM with few vCPUs), so even a command at the
/// maximum leaves the other half to the rest of the guest (systemd, sshd,
/// the agent's next command).
pub const MAX_PIDS: u32 = 16_384;
/// The agent's `pids.max` per command unless told otherwise (`lab-agent
/// serve --pids-max`; the argument is in SECURITY.md): far above what a
/// real check starts (a build with `make -j`, a kubeadm phase: hundreds),
/// and low enough that a fork bomb stops at it within milliseconds while
/// the guest still has processes to spare.
pub const DEFAULT_MAX_PIDS: u32 = 4096;
/// Smallest `max_memory_bytes` (16 MiB): a login shell alone takes a few
/// MiB, and a limit below that fails every command for a reason that has
/// nothing to do with it.
pub const MIN_MEMORY_BYTES: u64 = 16 * 1024 * 1024;

/// How a command runs: every field of an exec request but `command` (and
/// `stream`, which is about the answer). [`Default`] is what a request that
/// leaves a field out gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOptions {
    /// 1 to [`MAX_TIMEOUT_SECS`]; then the command and all it started are
    /// killed.
    pub timeout_secs: u64,
    pub user: String,
    /// Working directory; `None` means the user's home.
    pub cwd: Option<String>,
    /// Added to the clean login environment. On the wire a name given twice
    /// is an error, not last-wins: the two values say different things.
    pub env: BTreeMap<String, String>,
    /// Written to the command's stdin; `None` means `/dev/null`.
    pub stdin: Option<String>,
    /// Per-stream cap (at most [`MAX_OUTPUT_BYTES_CAP`]); output past it is
    /// drained and dropped.
    pub max_output_bytes: u64,
    /// Which profile files the shell reads; left out of the JSON when it is
    /// the default, so a request stays readable by agents that predate it.
    pub profile: Profile,
    /// Keep what the command leaves running after its shell exits (a server
    /// a lab needs). By default it is killed with the command. What is left
    /// stays in the command's cgroup, under its limits; a timeout or an
    /// abandoned request kills it either way. Sent only when true, so a
    /// request stays readable by agents that predate it.
    pub leave_running: bool,
    /// The command's process limit (`pids.max` of its cgroup), 1 to
    /// [`MAX_PIDS`]; `None`: the agent's default. Enforced where the guest
    /// delegates the pids controller (else `RLIMIT_NPROC` for a non-root
    /// user, see SECURITY.md).
    pub max_pids: Option<u32>,
    /// The command's memory limit (`memory.max` of its cgroup), at least
    /// [`MIN_MEMORY_BYTES`]; `None`: the agent's default, which is also the
    /// most it gives (a larger value gets the default). Enforced where the
    /// guest delegates the memory controller.
    pub max_memory_bytes: Option<u64>,
}

impl Default for ExecOptions {
    fn default() -> ExecOptions {
        ExecOptions {
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
        }
    }
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

/// An option with a numeric range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bounded {
    /// 1 to [`MAX_TIMEOUT_SECS`].
    TimeoutSecs,
    /// 0 to [`MAX_OUTPUT_BYTES_CAP`].
    MaxOutputBytes,
    /// 1 to [`MAX_PIDS`].
    MaxPids,
    /// At least [`MIN_MEMORY_BYTES`].
    MaxMemoryBytes,
}

impl Bounded {
    /// Its name, the same in JSON and in `lab.toml`.
    pub fn key(self) -> &'static str {
        match self {
            Bounded::TimeoutSecs => "timeout_secs",
            Bounded::MaxOutputBytes => "max_output_bytes",
            Bounded::MaxPids => "max_pids",
            Bounded::MaxMemoryBytes => "max_memory_bytes",
        }
    }

    /// Whether `v` is within its range.
    pub fn allows(self, v: u64) -> bool {
        match self {
            Bounded::TimeoutSecs => (1..=MAX_TIMEOUT_SECS).contains(&v),
            Bounded::MaxOutputBytes => v <= MAX_OUTPUT_BYTES_CAP,
            Bounded::MaxPids => (1..=u64::from(MAX_PIDS)).contains(&v),
            Bounded::MaxMemoryBytes => v >= MIN_MEMORY_BYTES,
        }
    }

    /// A value as an author wrote it (TOML numbers are signed): the number
    /// when it is within the range, else the problem naming it.
    pub fn check(self, v: i64) -> Result<u64, OptionProblem> {
        match u64::try_from(v) {
            Ok(n) if self.allows(n) => Ok(n),
            _ => Err(self.problem(v)),
        }
    }

    fn problem(self, value: impl fmt::Display) -> OptionProblem {
        OptionProblem::OutOfRange {
            option: self,
            value: value.to_string(),
        }
    }

    /// What to give instead: the range, and why where it is not obvious.
    fn rule(self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bounded::TimeoutSecs => {
                write!(f, "use a number of seconds from 1 to {MAX_TIMEOUT_SECS}")
            }
            Bounded::MaxOutputBytes => write!(
                f,
                "use a number of bytes from 0 to {MAX_OUTPUT_BYTES_CAP} (16 MiB)"
            ),
            Bounded::MaxPids => write!(
                f,
                "use 1 to {MAX_PIDS} processes, or remove the key for the agent's default ({DEFAULT_MAX_PIDS})"
            ),
            Bounded::MaxMemoryBytes => write!(
                f,
                "use at least {MIN_MEMORY_BYTES} (16 MiB), as a login shell alone needs a few MiB, or remove the key for the agent's default (the guest's memory less a reserve)"
            ),
        }
    }
}

/// Why options cannot run, one option each; see [`ExecOptions::validate`].
/// Its text is `KEY is VALUE: what to do` (the agent's 400 message);
/// [`OptionProblem::key`] and [`OptionProblem::detail`] give the two halves,
/// for a front end that names the key its own way (`lab.toml`'s `check
/// `a`: max_pids`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionProblem {
    /// A number outside its range, with the value as given.
    OutOfRange { option: Bounded, value: String },
    /// An `env` variable that, as `NAME=value`, is longer than Linux passes
    /// to a program ([`MAX_COMMAND_BYTES`]).
    EnvTooLong { name: String, bytes: usize },
}

impl OptionProblem {
    /// The option it is about, as JSON and `lab.toml` name it: `max_pids`,
    /// `env.NAME`.
    pub fn key(&self) -> String {
        match self {
            OptionProblem::OutOfRange { option, .. } => option.key().to_owned(),
            OptionProblem::EnvTooLong { name, .. } => format!("env.{name}"),
        }
    }

    /// What is wrong and what to do, after the key: `is 0: use 1 to …`.
    pub fn detail(&self) -> impl fmt::Display + '_ {
        Detail(self)
    }
}

struct Detail<'a>(&'a OptionProblem);

impl fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            OptionProblem::OutOfRange { option, value } => {
                write!(f, "is {value}: ")?;
                option.rule(f)
            }
            OptionProblem::EnvTooLong { bytes, .. } => write!(
                f,
                "is {bytes} bytes with its name; Linux passes at most {MAX_COMMAND_BYTES} bytes in one variable: send large data as stdin"
            ),
        }
    }
}

impl fmt::Display for OptionProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionProblem::OutOfRange { option, .. } => f.write_str(option.key())?,
            OptionProblem::EnvTooLong { name, .. } => {
                let name: String = name.chars().take(64).collect();
                write!(f, "environment variable `{}`", name.escape_debug())?;
            }
        }
        write!(f, " {}", self.detail())
    }
}

impl std::error::Error for OptionProblem {}

impl ExecOptions {
    /// Every rule the options break (empty when they can run): the agent
    /// answers 400 with the first; `lab.toml` reports them all, each under
    /// its check.
    pub fn validate(&self) -> Vec<OptionProblem> {
        let mut problems = Vec::new();
        let mut bounded = |option: Bounded, v: Option<u64>| {
            if let Some(v) = v.filter(|&v| !option.allows(v)) {
                problems.push(option.problem(v));
            }
        };
        bounded(Bounded::TimeoutSecs, Some(self.timeout_secs));
        bounded(Bounded::MaxOutputBytes, Some(self.max_output_bytes));
        bounded(Bounded::MaxPids, self.max_pids.map(u64::from));
        bounded(Bounded::MaxMemoryBytes, self.max_memory_bytes);
        // Each variable reaches execve as one `NAME=value` string, under the
        // same limit as the command.
        for (k, v) in &self.env {
            let bytes = k.len() + 1 + v.len();
            if bytes > MAX_COMMAND_BYTES {
                problems.push(OptionProblem::EnvTooLong {
                    name: k.clone(),
                    bytes,
                });
            }
        }
        problems
    }
}

/// The options' JSON names, in the order they are written (after
/// `command`).
pub(super) const FIELDS: [&str; 10] = [
    "timeout_secs",
    "user",
    "cwd",
    "env",
    "stdin",
    "max_output_bytes",
    "profile",
    "leave_running",
    "max_pids",
    "max_memory_bytes",
];

impl ExecOptions {
    /// Reads the value of option `FIELDS[i]` from `map`. The request's
    /// deserializer finds `i` (refusing unknown and repeated fields), so the
    /// options compose a request without serde's `flatten`, which cannot
    /// refuse unknown fields by name and buffers every value.
    pub(super) fn read<'de, A: MapAccess<'de>>(
        &mut self,
        i: usize,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match i {
            0 => self.timeout_secs = map.next_value()?,
            1 => self.user = map.next_value()?,
            2 => self.cwd = map.next_value()?,
            3 => self.env = map.next_value::<UniqueKeys>()?.0,
            4 => self.stdin = map.next_value()?,
            5 => self.max_output_bytes = map.next_value()?,
            6 => self.profile = map.next_value()?,
            7 => self.leave_running = map.next_value()?,
            8 => self.max_pids = map.next_value()?,
            _ => self.max_memory_bytes = map.next_value()?,
        }
        Ok(())
    }

    /// Writes the options as fields of a request, leaving out those an
    /// older agent does not know when they are at their defaults.
    pub(super) fn write<S: SerializeStruct>(&self, s: &mut S) -> Result<(), S::Error> {
        s.serialize_field(FIELDS[0], &self.timeout_secs)?;
        s.serialize_field(FIELDS[1], &self.user)?;
        s.serialize_field(FIELDS[2], &self.cwd)?;
        s.serialize_field(FIELDS[3], &self.env)?;
        s.serialize_field(FIELDS[4], &self.stdin)?;
        s.serialize_field(FIELDS[5], &self.max_output_bytes)?;
        if !self.profile.is_login() {
            s.serialize_field(FIELDS[6], &self.profile)?;
        }
        if self.leave_running {
            s.serialize_field(FIELDS[7], &true)?;
        }
        if let Some(n) = &self.max_pids {
            s.serialize_field(FIELDS[8], n)?;
        }
        if let Some(b) = &self.max_memory_bytes {
            s.serialize_field(FIELDS[9], b)?;
        }
        Ok(())
    }
}

/// A JSON object into a map, refusing a key that appears twice (serde's
/// map impl keeps the last one silently).
struct UniqueKeys(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<UniqueKeys, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<UniqueKeys, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    if out.contains_key(&k) {
                        return Err(A::Error::custom(format_args!(
                            "environment variable `{}` is given twice: send each name once",
                            k.escape_debug()
                        )));
                    }
                    out.insert(k, v);
                }
                Ok(UniqueKeys(out))
            }
        }
        d.deserialize_map(Visitor)
    }
}
