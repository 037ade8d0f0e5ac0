//! The guest contract: where things live in a lab VM, the agent's port, the
//! token rule and the defaults. The agent's defaults (`agent/src/cli.rs`),
//! the payload the generator writes (`cloud-init/src/cloud_config.rs` and
//! `installer.rs`) and the qemu driver's port forward (`labctl`) all come
//! from here, so a path or a rule changes in one place.

use std::fmt;

/// Port the agent listens on in a lab VM.
pub const PORT: u16 = 8899;
/// Where the agent binary goes.
pub const AGENT_PATH: &str = "/usr/local/bin/lab-agent";
/// The agent's private directory: token and setup script (mode 0700).
pub const CONFIG_DIR: &str = "/etc/lab-agent";
/// The per-VM token; `lab-agent serve`'s default `--token-file`.
pub const TOKEN_PATH: &str = "/etc/lab-agent/token";
/// The lab's variables for this VM (`LAB_VM`, `LAB_VMS`, `LAB_PARAM_<KEY>`):
/// written by the payload when it has any, read by `lab-agent serve` and
/// `setup` (`--env-file`) into every command's environment. Its format is
/// [`parse_env_file`]'s.
pub const ENV_PATH: &str = "/etc/lab-agent/env";
/// The lab's setup script, run by `lab-agent setup --script`.
pub const SETUP_SCRIPT_PATH: &str = "/etc/lab-agent/setup.sh";
/// `lab-agent`'s default `--state-dir` (setup.json, setup.log), mode 0700.
pub const STATE_DIR: &str = "/var/lib/lab-agent";
/// The file in the agent's state dir where the payload's installer records
/// why it failed; `lab-agent setup` then reports a failed setup with that
/// reason instead of running the script.
pub const INSTALL_ERROR_FILE: &str = "install-error";
/// [`STATE_DIR`]/[`INSTALL_ERROR_FILE`].
pub const INSTALL_ERROR_PATH: &str = "/var/lib/lab-agent/install-error";
/// Where cloud-init's `result.json` appears at the end of its final stage
/// (tmpfs: never a leftover of an earlier boot); `--cloud-init-dir`.
pub const CLOUD_INIT_DIR: &str = "/run/cloud-init";
/// The systemd unit.
pub const UNIT_PATH: &str = "/etc/systemd/system/lab-agent.service";
/// The drop-in that turns the login prompt on serial console `console`
/// (`ttyS0` on x86, `ttyAMA0` on arm64 `virt`) into a root shell.
pub fn autologin_dropin_path(console: &str) -> String {
    format!("/etc/systemd/system/serial-getty@{console}.service.d/autologin.conf")
}
/// Where a lab's files live in the guest, and the default `LAB_DIR`.
pub const LAB_DIR: &str = "/opt/lab";
/// Default timeout of the lab's setup script (`[setup].timeout_secs`,
/// `lab-agent setup --timeout`).
pub const DEFAULT_SETUP_TIMEOUT_SECS: u64 = 600;
/// Longest setup a lab may ask for (`[setup].timeout_secs`, a VM's
/// `setup_timeout_secs`): an hour, the longest the backend waits for a VM
/// to be ready (`[readiness].timeout_secs`): a setup that ran longer could
/// never be ready in time. The agent's own flags take up to
/// [`MAX_WAIT_SECS`]: the agent carries out what it is given, and an
/// operator running `lab-agent setup` by hand on a slow machine may need
/// more than a lab may promise a student.
pub const MAX_SETUP_TIMEOUT_SECS: u64 = 3600;
/// The most seconds any flag lets a tool wait for something (a day):
/// `lab-agent setup --timeout` and `serve --setup-timeout`, `labctl`'s
/// `--timeout`/`--wait`/`--answer-timeout`, the Python package's
/// `request_timeout`. A wait longer is a hang, and an unchecked count of
/// seconds overflows the clock when added to it.
pub const MAX_WAIT_SECS: u64 = 24 * 60 * 60;

/// Where `lab-agent setup` writes the small-root banner (`--small-root-banner`):
/// `/etc/profile` sources every `*.sh` here in login shells, and the file
/// itself prints only in interactive ones.
pub const SMALL_ROOT_BANNER_PATH: &str = "/etc/profile.d/lab-agent-small-root.sh";

/// What a root filesystem under the lab's `[readiness] min_root_bytes`
/// does (`on_small_root`, `lab-agent setup --on-small-root`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "lab", derive(serde::Deserialize))]
#[cfg_attr(feature = "lab", serde(rename_all = "lowercase"))]
pub enum OnSmallRoot {
    /// The VM is set up and ready, flagged (`root.below_min`, the reason),
    /// and the student's interactive shells show a banner: the seeds'
    /// fallback from a golden disk to a containerDisk (~2.4 GiB root) must
    /// still run the lab.
    #[default]
    Warn,
    /// The setup fails before the script runs, with both sizes.
    Fail,
}

impl OnSmallRoot {
    pub const fn as_str(self) -> &'static str {
        match self {
            OnSmallRoot::Warn => "warn",
            OnSmallRoot::Fail => "fail",
        }
    }
}

impl std::str::FromStr for OnSmallRoot {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<OnSmallRoot, &'static str> {
        match s {
            "warn" => Ok(OnSmallRoot::Warn),
            "fail" => Ok(OnSmallRoot::Fail),
            _ => Err("use `warn` or `fail`"),
        }
    }
}

/// The shortest token the agent accepts. A generated token is 43
/// characters (32 random bytes, base64url).
pub const MIN_TOKEN_LEN: usize = 32;

/// Why a token is refused; see [`check_token`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenProblem {
    /// Shorter than [`MIN_TOKEN_LEN`].
    TooShort { len: usize },
    /// A character that cannot travel in an HTTP header (only visible
    /// ASCII can).
    BadCharacter(char),
}

impl fmt::Display for TokenProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenProblem::TooShort { len } => write!(
                f,
                "it is {len} characters long; the agent refuses tokens shorter than \
                 {MIN_TOKEN_LEN} (a generated token is 43)"
            ),
            TokenProblem::BadCharacter(c) => write!(
                f,
                "it contains {c:?}; a token travels in an HTTP header, so use only visible \
                 ASCII characters (a generated token is base64url)"
            ),
        }
    }
}

/// The token rule, for a token already trimmed of trailing whitespace: at
/// least [`MIN_TOKEN_LEN`] characters, all visible ASCII.
pub fn check_token(token: &str) -> Result<(), TokenProblem> {
    if token.len() < MIN_TOKEN_LEN {
        return Err(TokenProblem::TooShort { len: token.len() });
    }
    if let Some(bad) = token.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(TokenProblem::BadCharacter(bad));
    }
    Ok(())
}

/// Reads an env file ([`ENV_PATH`]): `KEY=VALUE` entries each ended by a
/// NUL byte, as `/proc/PID/environ` is. NUL is the one byte no environment
/// value can hold, so any text travels as it is, newlines, quotes and `$`
/// included, with nothing to unescape (the agent's reader stays a few
/// lines). `None` when it is not UTF-8 or an entry has no `=` or an empty
/// name. (`tr '\0' '\n' </etc/lab-agent/env` shows it.)
pub fn parse_env_file(bytes: &[u8]) -> Option<Vec<(&str, &str)>> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.split_terminator('\0')
        .map(|entry| entry.split_once('=').filter(|(k, _)| !k.is_empty()))
        .collect()
}

/// The env file for `vars` ([`parse_env_file`]'s format); the caller keeps
/// names free of `=` and NUL, and values free of NUL.
pub fn render_env_file<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in vars {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_agree() {
        assert_eq!(
            INSTALL_ERROR_PATH,
            format!("{STATE_DIR}/{INSTALL_ERROR_FILE}")
        );
        assert_eq!(TOKEN_PATH, format!("{CONFIG_DIR}/token"));
        assert_eq!(SETUP_SCRIPT_PATH, format!("{CONFIG_DIR}/setup.sh"));
    }

    #[test]
    fn the_token_rule() {
        let good = "a".repeat(MIN_TOKEN_LEN);
        assert_eq!(check_token(&good), Ok(()));
        assert_eq!(
            check_token(&good[1..]),
            Err(TokenProblem::TooShort {
                len: MIN_TOKEN_LEN - 1
            })
        );
        let spaced = format!("{good} x");
        assert_eq!(check_token(&spaced), Err(TokenProblem::BadCharacter(' ')));
        assert!(
            TokenProblem::TooShort { len: 3 }
                .to_string()
                .contains("shorter than 32")
        );
    }

    #[test]
    fn env_files_carry_any_text_and_read_back() {
        let vars = [
            ("LAB_VM", "cp"),
            ("LAB_PARAM_X", "a 'b' \"c\"\n$HOME `id` \\ = é"),
            ("LAB_PARAM_EMPTY", ""),
        ];
        let bytes = render_env_file(vars);
        assert_eq!(parse_env_file(&bytes).unwrap(), vars);
        assert_eq!(parse_env_file(b"").unwrap(), vec![]);
        assert!(parse_env_file(b"NOEQUALS\0").is_none());
        assert!(parse_env_file(b"=x\0").is_none());
        assert!(parse_env_file(b"A=\xff\0").is_none());
    }
}
