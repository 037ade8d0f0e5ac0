//! The command line, environment and working directory of a command's
//! shell: what `execve` gets, checked before anything is started (a NUL
//! byte, a bad variable name or a missing cwd is the request's fault).

use super::{Cwd, SYSTEM_PROFILE, Script, SpawnError};
use crate::process::identity::Identity;
use lab_agent_proto::Profile;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub(super) fn cstr(what: &str, bytes: &[u8]) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| nul_in(what))
}

fn nul_in(what: &str) -> SpawnError {
    SpawnError::Invalid(format!("{what} contains a NUL byte"))
}

/// C strings in one buffer, for `execve`'s argv or envp: one allocation for
/// all of them instead of one or two each (an environment is a dozen, on
/// every exec).
#[derive(Debug, Default)]
pub(super) struct CStrings {
    bytes: Vec<u8>,
    /// Where each string's NUL is.
    ends: Vec<usize>,
}

impl CStrings {
    /// Room for `count` strings of `bytes` in all (NULs included), so that
    /// building them does not grow the buffers.
    pub(super) fn with_capacity(bytes: usize, count: usize) -> CStrings {
        CStrings {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(count),
        }
    }

    /// Appends one string made of `parts`; `what` names it when a part
    /// holds a NUL byte (nothing is appended then).
    pub(super) fn push(&mut self, what: &str, parts: &[&[u8]]) -> Result<(), SpawnError> {
        if parts.iter().any(|p| p.contains(&0)) {
            return Err(nul_in(what));
        }
        for p in parts {
            self.bytes.extend_from_slice(p);
        }
        self.ends.push(self.bytes.len());
        self.bytes.push(0);
        Ok(())
    }

    pub(super) fn as_cstrs(&self) -> Vec<&CStr> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let s = &self.bytes[start..=end];
                start = end + 1;
                // Each ends at its only NUL, by `push`.
                CStr::from_bytes_with_nul(s).unwrap_or(c"")
            })
            .collect()
    }
}

/// The shell's argv: `SHELL --login -c COMMAND` or its `profile` variants,
/// or the setup script run by a login shell.
pub(super) fn argv(
    script: &Script<'_>,
    profile: Profile,
    shell: &str,
    login_flag: &str,
) -> Result<CStrings, SpawnError> {
    let command_len = match *script {
        Script::Command(c) => SYSTEM_PROFILE.len() + c.len(),
        Script::File(p) => p.as_os_str().len(),
    };
    let mut argv = CStrings::with_capacity(64 + command_len, 6);
    argv.push("the shell", &[shell.as_bytes()])?;
    match *script {
        Script::Command(command) => {
            let is_bash = login_flag == "--login";
            match profile {
                Profile::Login => {
                    argv.push("", &[login_flag.as_bytes()])?;
                    argv.push("", &[b"-c"])?;
                    argv.push("command", &[command.as_bytes()])?;
                }
                Profile::System | Profile::None => {
                    // Not a login shell, so no ~/.bash_profile or ~/.profile;
                    // not interactive, so no ~/.bashrc (and --norc to be sure).
                    if is_bash {
                        argv.push("", &[b"--noprofile"])?;
                        argv.push("", &[b"--norc"])?;
                    }
                    argv.push("", &[b"-c"])?;
                    // `system`: what a login shell reads before the user's
                    // own files, /etc/profile (root's, and what it sources),
                    // on its own line, so the command parses as it would
                    // alone.
                    let profile_text: &[u8] = match profile {
                        Profile::System => SYSTEM_PROFILE.as_bytes(),
                        _ => b"",
                    };
                    argv.push("command", &[profile_text, command.as_bytes()])?;
                }
            }
        }
        Script::File(path) => {
            argv.push("", &[login_flag.as_bytes()])?;
            let executable = std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            if executable {
                argv.push("", &[b"-c"])?;
                argv.push("", &[b"exec \"$0\""])?;
            }
            argv.push("the script path", &[path.as_os_str().as_bytes()])?;
        }
    }
    Ok(argv)
}

/// The lab's variables for this VM (`--env-file`, which the payload writes
/// when the lab has any: `LAB_VM`, `LAB_VMS`, `LAB_PARAM_<KEY>`). Read once
/// at start; every command of the process, setup and checks alike, gets
/// them after its login environment and before the request's `env`.
static LAB_ENV: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Reads the env file at `path` (no file: no variables) for every command
/// this process starts; the error says what is wrong with it.
pub fn load_lab_env(path: &Path) -> Result<(), String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let vars = lab_agent_proto::guest::parse_env_file(&bytes)
        .ok_or("is not NUL-ended KEY=VALUE entries in UTF-8")?;
    let vars = vars
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let _ = LAB_ENV.set(vars);
    Ok(())
}

/// The clean login environment of `id` plus the request's variables.
pub(super) fn envp(
    id: &Identity,
    env_vars: &BTreeMap<String, String>,
) -> Result<CStrings, SpawnError> {
    // The clean login environment plus the request's `env`, which may
    // override it (later entries win, as with std's Command).
    let mut env: BTreeMap<&[u8], &[u8]> = BTreeMap::new();
    env.insert(b"HOME", id.home.as_os_str().as_bytes());
    env.insert(b"USER", id.name.as_bytes());
    env.insert(b"LOGNAME", id.name.as_bytes());
    env.insert(b"SHELL", id.shell.as_os_str().as_bytes());
    env.insert(b"PATH", id.default_path().as_bytes());
    for (k, v) in LAB_ENV.get().into_iter().flatten() {
        env.insert(k.as_bytes(), v.as_bytes());
    }
    for (k, v) in env_vars {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(SpawnError::Invalid(format!(
                "environment variable {k:?} is not valid: names must be non-empty without `=` or NUL, values without NUL"
            )));
        }
        env.insert(k.as_bytes(), v.as_bytes());
    }
    let bytes = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut envp = CStrings::with_capacity(bytes, env.len());
    for (k, v) in env {
        envp.push("the environment", &[k, b"=", v])?;
    }
    Ok(envp)
}

/// The working directory (absolute, an existing folder) and whether it is
/// the default, the user's home.
pub(super) fn working_dir(cwd: &Cwd<'_>, id: &Identity) -> Result<(PathBuf, bool), SpawnError> {
    Ok(match *cwd {
        Cwd::Home => (id.home.clone(), true),
        Cwd::Dir(dir) => {
            if !dir.is_absolute() {
                return Err(SpawnError::Invalid(format!(
                    "cwd `{}` is not an absolute path",
                    dir.display()
                )));
            }
            match std::fs::metadata(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(SpawnError::CwdMissing(dir.to_path_buf()));
                }
                Ok(m) if !m.is_dir() => return Err(SpawnError::CwdNotDir(dir.to_path_buf())),
                _ => {}
            }
            (dir.to_path_buf(), false)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_strings_share_one_buffer_and_refuse_a_nul() {
        let mut s = CStrings::default();
        s.push("a", &[b"HOME", b"=", b"/home/x"]).unwrap();
        s.push("b", &[b""]).unwrap();
        let e = s.push("the environment", &[b"A=", b"b\0c"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("the environment contains a NUL byte"),
            "{e}"
        );
        s.push("c", &[b"-c"]).unwrap();
        let all: Vec<&[u8]> = s.as_cstrs().iter().map(|c| c.to_bytes()).collect();
        assert_eq!(all, [&b"HOME=/home/x"[..], b"", b"-c"]);
    }
}
