//! One cgroup v2 per command, where the agent has a subtree of its own.
//!
//! A process group or session is a promise the command can break (`setsid`,
//! `setpgid`, `timeout(1)`, a double fork); a cgroup is not: every process
//! a command starts is born in its cgroup and cannot leave it without
//! write access to another cgroup's `cgroup.procs`, which only root has. The
//! command starts inside it (`clone3` with `CLONE_INTO_CGROUP`, see
//! [`crate::process::spawn`]), so killing the cgroup (`cgroup.kill`) reaches all of
//! it, whatever it did to its process group.
//!
//! Where the subtree comes from ([`Mode`]):
//! - under systemd the unit sets `Delegate=yes`; systemd marks the
//!   service's cgroup with the `trusted.delegate` xattr. The agent runs in
//!   a leaf `agent/` (cgroup v2 forbids processes in a cgroup whose
//!   controllers its children use) and creates `exec-PID-N/` beside it for
//!   each command. systemd ≥ 254 puts it there itself (`DelegateSubgroup=
//!   agent`): only then are the `pids` and `memory` controllers enabled for
//!   the exec cgroups (see [`Cgroups::setup`] for why not otherwise). On
//!   older systemd (252) the agent moves itself into `agent/` and enables
//!   no controller;
//! - `--cgroup PATH` names a directory the operator (or a test) made for it;
//!   the controllers are enabled there when PATH has them;
//! - elsewhere (`labctl try` on a workstation, containers) there is none, and
//!   [`crate::process`] falls back to killing by session and ancestry.
//!
//! Creating a cgroup is a `mkdir` in cgroupfs and removing one an `rmdir`
//! (tens of µs each, more with controllers, and on a busy machine the
//! kernel's cgroup locks make them slower still). So cgroups are recycled:
//! a finished command's cgroup that is empty goes back into a small pool
//! ([`POOL`]) with its open directory and is handed to the next command; in
//! steady state an exec makes and removes none. One that still holds
//! processes the command left in the background is kept until they are
//! gone, then recycled or removed. Only [`Cgroups::sweep`] (the agent's
//! housekeeping, after the answer) looks at them: [`Cgroups::release`] on
//! the answer's path is a push onto a list.
//!
//! A pooled cgroup is not quite empty: it keeps one idle process of the
//! agent's between commands ([`holder`]), so that a command's start and
//! end do not empty and refill it (which costs the kernel work on the
//! command's path). Why a recycled cgroup holds nothing of an earlier
//! command when taken: the command's end or the sweep saw nothing in it but
//! its holder (or, without a holder, `populated 0` in its `cgroup.events`,
//! which counts every process in it and below it), the sweep no cgroup
//! below it, and
//! nothing can enter it afterwards but a process that can write its
//! `cgroup.procs` and the agent's root's (root-owned, mode 0644, so only
//! root) — the agent's own `clone3`, or a root command, which could as well
//! leave its own cgroup and is not what cgroups contain. What a root command
//! may have changed in its cgroup is checked too ([`Cgroups::reusable`]):
//! a cgroup frozen or with child cgroups is removed, not reused, and the
//! limits are written again. A cgroup that was killed (`cgroup.kill`, what
//! a command left) is removed too, never reused: see [`ExecCgroup::kill`].
//!
//! Limits ([`Limits`]): each exec cgroup gets `pids.max` and `memory.max`
//! (and `memory.swap.max` 0) where those controllers are on. Whether a
//! command hit one is read from `pids.events` and `memory.events`, whose
//! counters only grow: a cgroup is recycled only while they are all 0, so
//! a taken cgroup starts at 0 and any count at the end is this command's.

mod discover;
mod exec_cgroup;
mod holder;
mod pool;

pub use exec_cgroup::{ExecCgroup, kill};
pub use holder::{HOLD_COMMAND, hold, holder_pids};
pub use pool::Cgroups;

use std::io;
use std::path::PathBuf;

/// The `--cgroup` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Use the agent's own cgroup when systemd delegated it, else none.
    Auto,
    /// Never: kill by session.
    Off,
    /// Create the per-exec cgroups in this directory.
    Path(PathBuf),
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "off" => Ok(Mode::Off),
            p if p.starts_with('/') => Ok(Mode::Path(PathBuf::from(p))),
            other => Err(format!(
                "`--cgroup {other}` is not `auto`, `off` or an absolute path"
            )),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("`{}` is not a cgroup v2 directory: {reason}", .path.display())]
    NotCgroup2 { path: PathBuf, reason: String },
    #[error("failed to {what} `{}`: {source}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// A command's limits; `None`: none (`max`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub pids: Option<u64>,
    pub memory: Option<u64>,
}

/// Which limits a finished command ran into (from its cgroup's events).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hit {
    pub pids: bool,
    pub memory: bool,
}

#[derive(Debug)]
pub enum Containment {
    /// Each command in a cgroup of its own.
    Cgroups(Cgroups),
    /// No cgroup: commands are killed by session; `why` is for the log.
    Sessions { why: String },
}

/// How many empty cgroups are kept for reuse. Sequential execs need one
/// (the sweep after an answer returns it before the next request); the
/// second covers an exec that comes before the sweep ran, or two at once.
pub const POOL: usize = 2;
