//! The command line, environment and working directory of a command's
//! shell: what `execve` gets, checked before anything is started (a NUL
//! byte, a bad variable name or a missing cwd is the request's fault).

use super::{Cwd, SYSTEM_PROFILE, Script, SpawnError};
use crate::process::identity::Identity;
use lab_agent_proto::Profile;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub(super) fn cstr(what: &str, bytes: &[u8]) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| SpawnError::Invalid(format!("{what} contains a NUL byte")))
}

/// The shell's argv: `SHELL --login -c COMMAND` or its `profile` variants,
/// or the setup script run by a login shell.
pub(super) fn argv(
    script: &Script<'_>,
    profile: Profile,
    shell: &str,
    login_flag: &str,
) -> Result<Vec<CString>, SpawnError> {
    let mut argv = vec![cstr("the shell", shell.as_bytes())?];
    match *script {
        Script::Command(command) => {
            let is_bash = login_flag == "--login";
            match profile {
                Profile::Login => {
                    argv.push(cstr("", login_flag.as_bytes())?);
                    argv.push(c"-c".to_owned());
                    argv.push(cstr("command", command.as_bytes())?);
                }
                Profile::System | Profile::None => {
                    // Not a login shell, so no ~/.bash_profile or ~/.profile;
                    // not interactive, so no ~/.bashrc (and --norc to be sure).
                    if is_bash {
                        argv.extend([c"--noprofile".to_owned(), c"--norc".to_owned()]);
                    }
                    argv.push(c"-c".to_owned());
                    let text = if profile == Profile::System {
                        // What a login shell reads before the user's own
                        // files: /etc/profile (root's, and what it sources).
                        // On its own line, so the command parses as it would
                        // alone.
                        [SYSTEM_PROFILE.as_bytes(), command.as_bytes()].concat()
                    } else {
                        command.as_bytes().to_vec()
                    };
                    argv.push(cstr("command", &text)?);
                }
            }
        }
        Script::File(path) => {
            argv.push(cstr("", login_flag.as_bytes())?);
            let executable = std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            let path = cstr("the script path", path.as_os_str().as_bytes())?;
            if executable {
                argv.extend([c"-c".to_owned(), c"exec \"$0\"".to_owned(), path]);
            } else {
                argv.push(path);
            }
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
) -> Result<Vec<CString>, SpawnError> {
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
    let envp: Vec<CString> = env
        .into_iter()
        .map(|(k, v)| cstr("the environment", &[k, b"=", v].concat()))
        .collect::<Result<_, _>>()?;
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
