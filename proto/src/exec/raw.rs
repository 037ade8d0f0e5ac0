//! The exec options as a person writes them, declared once: each key of a
//! check in `lab.toml` (and, as the lab's defaults, of its top level) and
//! each flag of `labctl exec` is a field of [`RawExecOptions`], flattened
//! into both (serde for `lab.toml`, clap with feature `cli`). A new option
//! is a field here, a field of [`ExecOptions`] and its line in
//! [`RawExecOptions::over`]; the rules stay [`ExecOptions::validate`]'s.
//!
//! Numbers are `i64` because TOML's are signed: a negative one is reported
//! by its option's range ([`Bounded::check`]), not as a type error.

use super::options::{Bounded, ExecOptions, OptionProblem, Profile};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// Every option a command runs with, each `None` (or empty) where it was
/// not given: what it then is comes from the base [`RawExecOptions::over`]
/// is given (the lab's defaults for a check, [`ExecOptions::default`] for
/// the lab's defaults and for `labctl exec`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RawExecOptions {
    /// Run as this user [default: root]
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_name = "USER"))]
    pub user: Option<String>,
    /// Kill the command, and everything it started, after this many
    /// seconds (1 to 3600) [default: 60]
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long = "timeout", value_name = "SECS"))]
    pub timeout_secs: Option<i64>,
    /// Working directory in the guest, absolute [default: the user's home]
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub cwd: Option<String>,
    /// Set an environment variable for the command; repeatable (in
    /// `lab.toml` a table, over the lab's own)
    #[serde(default, deserialize_with = "env_table")]
    #[cfg_attr(
        feature = "cli",
        arg(long = "env", value_name = "KEY=VALUE", value_parser = env_var)
    )]
    pub env: Vec<(String, String)>,
    /// What the command reads on stdin (`labctl exec` has `--stdin`: its
    /// own standard input) [default: none, /dev/null]
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(skip))]
    pub stdin: Option<String>,
    /// Keep at most this many bytes of each output stream (0 to 16 MiB);
    /// the rest is drained and dropped [default: 1048576]
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_name = "BYTES"))]
    pub max_output_bytes: Option<i64>,
    /// Startup files the shell reads: `login` (the user's own too),
    /// `system` (only /etc/profile and what it sources) or `none`
    /// [default: login]
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_name = "PROFILE"))]
    pub profile: Option<Profile>,
    /// Keep what the command leaves running after it exits (a server); by
    /// default it is killed with the command
    #[serde(default)]
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")
    )]
    pub leave_running: Option<bool>,
    /// The command's process limit (its cgroup's `pids.max`, 1 to 16384)
    /// where the guest delegates the pids controller [default: the
    /// agent's, 4096]
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_pids: Option<i64>,
    /// The command's memory limit (its cgroup's `memory.max`; in
    /// `labctl exec`, `--max-memory MIB`) where the guest delegates the
    /// memory controller [default and most: the agent's]
    #[serde(default)]
    #[cfg_attr(
        feature = "cli",
        arg(long = "max-memory", value_name = "MIB", value_parser = mib_as_bytes)
    )]
    pub max_memory_bytes: Option<i64>,
}

impl RawExecOptions {
    /// These options over `base`: each one given replaces the base's (its
    /// `env` adds to the base's, a name given here winning), the numbers
    /// held to their ranges, then every other rule of
    /// [`ExecOptions::validate`]. Every problem is returned, each naming
    /// its key; an option out of range keeps the base's value.
    pub fn over(self, base: &ExecOptions) -> (ExecOptions, Vec<OptionProblem>) {
        let RawExecOptions {
            user,
            timeout_secs,
            cwd,
            env,
            stdin,
            max_output_bytes,
            profile,
            leave_running,
            max_pids,
            max_memory_bytes,
        } = self;
        let mut out = base.clone();
        let mut problems = Vec::new();
        out.user = user.unwrap_or(out.user);
        out.cwd = cwd.or(out.cwd);
        out.env.extend(env);
        out.stdin = stdin.or(out.stdin);
        out.profile = profile.unwrap_or(out.profile);
        out.leave_running = leave_running.unwrap_or(out.leave_running);
        for (option, value) in [
            (Bounded::TimeoutSecs, timeout_secs),
            (Bounded::MaxOutputBytes, max_output_bytes),
            (Bounded::MaxPids, max_pids),
            (Bounded::MaxMemoryBytes, max_memory_bytes),
        ] {
            let Some(value) = value else { continue };
            match option.check(value) {
                Ok(n) => match option {
                    Bounded::TimeoutSecs => out.timeout_secs = n,
                    Bounded::MaxOutputBytes => out.max_output_bytes = n,
                    // `check` kept it within MAX_PIDS.
                    Bounded::MaxPids => out.max_pids = Some(n as u32),
                    Bounded::MaxMemoryBytes => out.max_memory_bytes = Some(n),
                },
                Err(problem) => problems.push(problem),
            }
        }
        problems.extend(out.validate());
        (out, problems)
    }
}

/// `lab.toml`'s `env` table, in its order (a TOML table cannot name a key
/// twice).
fn env_table<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    Ok(BTreeMap::<String, String>::deserialize(d)?
        .into_iter()
        .collect())
}

/// `--env KEY=VALUE`.
#[cfg(feature = "cli")]
fn env_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{text}` is not of the form `KEY=VALUE`")),
    }
}

/// `--max-memory MIB`, as the bytes the option holds.
#[cfg(feature = "cli")]
fn mib_as_bytes(text: &str) -> Result<i64, String> {
    let mib: u64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number of MiB"))?;
    Ok(i64::try_from(mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_options_replace_the_base_and_env_adds_to_it() {
        let base = ExecOptions {
            profile: Profile::System,
            env: [("A".to_owned(), "base".to_owned())].into(),
            max_pids: Some(10),
            ..ExecOptions::default()
        };
        let raw = RawExecOptions {
            user: Some("student".into()),
            timeout_secs: Some(5),
            env: vec![("A".into(), "mine".into()), ("B".into(), "b".into())],
            leave_running: Some(true),
            ..RawExecOptions::default()
        };
        let (got, problems) = raw.over(&base);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!((got.user.as_str(), got.timeout_secs), ("student", 5));
        assert_eq!(got.profile, Profile::System, "not given: the base's");
        assert_eq!(got.max_pids, Some(10));
        assert!(got.leave_running);
        assert_eq!(got.env["A"], "mine");
        assert_eq!(got.env["B"], "b");
        let (same, _) = RawExecOptions::default().over(&base);
        assert_eq!(same, base);
    }

    #[test]
    fn every_problem_is_named_and_leaves_the_base() {
        let raw = RawExecOptions {
            timeout_secs: Some(0),
            max_pids: Some(-1),
            max_memory_bytes: Some(1),
            max_output_bytes: Some(i64::MAX),
            ..RawExecOptions::default()
        };
        let (got, problems) = raw.over(&ExecOptions::default());
        let keys: Vec<String> = problems.iter().map(OptionProblem::key).collect();
        assert_eq!(
            keys,
            [
                "timeout_secs",
                "max_output_bytes",
                "max_pids",
                "max_memory_bytes"
            ]
        );
        assert_eq!(got, ExecOptions::default());
        assert_eq!(
            problems[2].to_string(),
            "max_pids is -1: use 1 to 16384 processes, or remove the key for the agent's default (4096)"
        );
    }
}
