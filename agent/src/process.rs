//! Spawning a login shell as a user, in its own session, and supervising it:
//! timeout → SIGTERM to the whole process group → SIGKILL after a grace.
//!
//! Both `/v1/exec` and the setup script run through here, so they share one
//! notion of "login shell", "clean environment" and "kill everything".

use crate::identity::Identity;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::{BTreeMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a terminating group is checked for having emptied.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// What the shell runs.
#[derive(Debug, Clone, Copy)]
pub enum Script<'a> {
    /// `bash --login -c COMMAND`.
    Command(&'a str),
    /// A script file: executed directly when it is executable (so its `#!`
    /// line counts), otherwise interpreted by the login shell.
    File(&'a Path),
}

/// Where the command starts.
#[derive(Debug, Clone, Copy)]
pub enum Cwd<'a> {
    /// The user's home, or `/` when it does not exist (as login(1) does).
    Home,
    /// Exactly this directory; an error if it cannot be entered.
    Dir(&'a Path),
}

#[derive(Debug)]
pub struct ShellCommand<'a> {
    pub identity: &'a Identity,
    pub script: Script<'a>,
    pub cwd: Cwd<'a>,
    pub env: &'a BTreeMap<String, String>,
    pub stdin: Stdio,
    pub stdout: Stdio,
    pub stderr: Stdio,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("{0}")]
    Invalid(String),
    #[error("cwd `{}` does not exist", .0.display())]
    CwdMissing(PathBuf),
    #[error("cwd `{}` is not a directory", .0.display())]
    CwdNotDir(PathBuf),
    #[error("failed to start `{shell} -c …` as user `{user}` in `{cwd}`: {source}")]
    Start {
        shell: String,
        user: String,
        cwd: String,
        source: io::Error,
    },
}

impl SpawnError {
    /// Caller's fault (400) or the guest's (500)?
    pub fn is_client_error(&self) -> bool {
        match self {
            SpawnError::Invalid(_) | SpawnError::CwdMissing(_) | SpawnError::CwdNotDir(_) => true,
            SpawnError::Start { source, .. } => {
                matches!(
                    source.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                ) || source.raw_os_error() == Some(Errno::ENOTDIR as i32)
            }
        }
    }
}

/// The process groups of every command still running, so a shutting-down
/// agent can kill what is left after its grace period.
#[derive(Debug, Clone, Default)]
pub struct Jobs(Arc<Mutex<HashSet<i32>>>);

impl Jobs {
    fn insert(&self, pgid: i32) {
        self.lock().insert(pgid);
    }

    fn remove(&self, pgid: i32) {
        self.lock().remove(&pgid);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SIGKILL to every running command's process group.
    pub fn kill_all(&self) -> usize {
        let groups: Vec<i32> = self.lock().iter().copied().collect();
        for &pgid in &groups {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        groups.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<i32>> {
        // A poisoned set of integers is still a valid set of integers.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The login shell of this guest: bash when there is one, else sh.
fn login_shell() -> (&'static str, &'static str) {
    for bash in ["/bin/bash", "/usr/bin/bash"] {
        if Path::new(bash).exists() {
            return (bash, "--login");
        }
    }
    ("/bin/sh", "-l")
}

/// A running command in its own session and process group.
#[derive(Debug)]
pub struct Job {
    pub child: tokio::process::Child,
    pgid: i32,
    pub started: Instant,
    reaped: bool,
    jobs: Jobs,
}

/// How a supervised command ended.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub status: ExitStatus,
    pub timed_out: bool,
    pub duration: Duration,
}

impl Exit {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    pub fn signal(&self) -> Option<i32> {
        self.status.signal()
    }
}

pub fn spawn(cmd: ShellCommand<'_>, jobs: &Jobs) -> Result<Job, SpawnError> {
    let (shell, login_flag) = login_shell();
    let id = cmd.identity;

    let mut c = std::process::Command::new(shell);
    c.arg(login_flag);
    match cmd.script {
        Script::Command(command) => {
            if command.contains('\0') {
                return Err(SpawnError::Invalid("command contains a NUL byte".into()));
            }
            c.arg("-c").arg(command);
        }
        Script::File(path) => {
            let executable = std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            if executable {
                c.arg("-c").arg("exec \"$0\"").arg(path);
            } else {
                c.arg(path);
            }
        }
    }

    c.env_clear()
        .env("HOME", &id.home)
        .env("USER", &id.name)
        .env("LOGNAME", &id.name)
        .env("SHELL", &id.shell)
        .env("PATH", id.default_path());
    for (k, v) in cmd.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(SpawnError::Invalid(format!(
                "environment variable {k:?} is not valid: names must be non-empty without `=` or NUL, values without NUL"
            )));
        }
        c.env(k, v);
    }
    c.stdin(cmd.stdin).stdout(cmd.stdout).stderr(cmd.stderr);

    let (cwd, cwd_is_default) = match cmd.cwd {
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
    };
    let cwd_c = CString::new(cwd.as_os_str().as_bytes())
        .map_err(|_| SpawnError::Invalid("cwd contains a NUL byte".into()))?;
    let switch = id
        .needs_switch()
        .then(|| (id.groups.clone(), id.gid, id.uid));

    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe system calls on data prepared above (no
    // allocation: the group list and the C path already exist).
    unsafe {
        c.pre_exec(move || {
            // Own session, hence own process group: the timeout can kill
            // the whole tree, and the command has no controlling terminal.
            nix::unistd::setsid()?;
            if let Some((groups, gid, uid)) = &switch {
                nix::unistd::setgroups(groups)?;
                nix::unistd::setgid(*gid)?;
                nix::unistd::setuid(*uid)?;
            }
            // After dropping privileges, so a directory the user may not
            // enter is an error rather than a root-granted favour.
            if let Err(e) = nix::unistd::chdir(cwd_c.as_c_str()) {
                if !cwd_is_default || nix::unistd::chdir(c"/").is_err() {
                    return Err(e.into());
                }
            }
            Ok(())
        });
    }

    let mut tc = tokio::process::Command::from(c);
    tc.kill_on_drop(false);
    let started = Instant::now();
    let child = tc.spawn().map_err(|source| SpawnError::Start {
        shell: Path::new(shell)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| shell.to_owned()),
        user: id.name.clone(),
        cwd: cwd.display().to_string(),
        source,
    })?;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    jobs.insert(pgid);
    Ok(Job {
        child,
        pgid,
        started,
        reaped: false,
        jobs: jobs.clone(),
    })
}

impl Job {
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// Waits for the shell to exit. When `timeout` expires the whole group
    /// gets SIGTERM, then SIGKILL once `grace` has passed; processes that
    /// ignore SIGTERM or that the shell left behind are killed as well.
    pub async fn wait(&mut self, timeout: Duration, grace: Duration) -> io::Result<Exit> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => {
                self.reaped = true;
                Ok(Exit {
                    status: status?,
                    timed_out: false,
                    duration: self.started.elapsed(),
                })
            }
            Err(_) => {
                let status = self.terminate(grace).await?;
                Ok(Exit {
                    status,
                    timed_out: true,
                    duration: self.started.elapsed(),
                })
            }
        }
    }

    /// SIGTERM to the group; SIGKILL to whatever is left after `grace`.
    pub async fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        let pgid = Pid::from_raw(self.pgid);
        let _ = killpg(pgid, Signal::SIGTERM);
        let deadline = tokio::time::Instant::now() + grace;
        let mut status = None;
        loop {
            if status.is_none() {
                tokio::select! {
                    s = self.child.wait() => { status = Some(s?); self.reaped = true; }
                    _ = tokio::time::sleep(GROUP_POLL) => {}
                }
            } else {
                tokio::time::sleep(GROUP_POLL).await;
            }
            // With the shell reaped, a group without live members means
            // nothing is left.
            if status.is_some() && !group_alive(self.pgid) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = killpg(pgid, Signal::SIGKILL);
                break;
            }
        }
        match status {
            Some(s) => Ok(s),
            None => {
                let s = self.child.wait().await?;
                self.reaped = true;
                Ok(s)
            }
        }
    }
}

/// Whether any process of the group is alive. Zombies do not count: their
/// reaping is up to init, which may take its time (or, in a container, never).
fn group_alive(pgid: i32) -> bool {
    if killpg(Pid::from_raw(pgid), None) == Err(Errno::ESRCH) {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    dir.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // `pid (comm) state ppid pgrp …`; comm may contain spaces and parens.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        pgrp == Some(pgid) && state != Some("Z")
    })
}

impl Drop for Job {
    fn drop(&mut self) {
        // Dropped before the shell was reaped: the request was abandoned
        // (client gone, agent stopping). Leave no orphans behind; tokio reaps
        // the killed child in the background.
        if !self.reaped && self.pgid > 0 {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
        self.jobs.remove(self.pgid);
    }
}
