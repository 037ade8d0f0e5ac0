//! A lab tried: where it runs, checked before anything starts ([`Plan`]),
//! and the lab started there, stopped or kept ([`Tried`]). `labctl try`
//! and `labctl test` are its front end: they wait, grade and print on a
//! [`Target`] between [`Tried::start`] and [`Tried::finish`], and watch
//! for signals with [`interruptible`] the whole time.
//!
//! # Layout
//! - this file: the plan (the lab, the agent, the place, the timeout) and
//!   the started lab, one VM (a local agent or a qemu guest).
//! - `target`: [`Target`], what the wait-and-grade flow needs from either.
//! - `interrupt`: Ctrl-C and SIGTERM, also while a VM starts.
//!
//! - `session`: a lab of several VMs, as one ([`TriedSession`]: a sandbox
//!   or a qemu guest per VM).

mod interrupt;
mod session;
mod target;

pub use interrupt::{Interrupted, interruptible, start_watched};
pub use session::TriedSession;
pub use target::Target;

use crate::vm::{self, Stop, VmConfig, VmTarget};
use crate::{Error, LocalAgent, local, sandbox};
use lab_agent_proto::lab::Lab;
use std::path::PathBuf;
use std::time::Duration;

/// How a lab is to be tried, as the front end's flags give it.
#[derive(Debug, Default)]
pub struct Options {
    /// `--host`: on this machine itself, not in a sandbox.
    pub host: bool,
    /// `--changes`: list what the lab changed in the sandbox.
    pub list_changes: bool,
    /// `--keep`: leave the lab running after the front end is done.
    pub keep: bool,
    /// `--keep-going`: grade after a failed setup.
    pub keep_going: bool,
    /// `--timeout`: the wait for setup (default: from the lab).
    pub timeout: Option<Duration>,
    /// `--check NAME`s: only these.
    pub checks: Vec<String>,
    /// `--agent`: the agent binary.
    pub agent: Option<PathBuf>,
}

/// A lab and where it runs, checked.
#[derive(Debug)]
pub struct Plan {
    pub lab: Lab,
    /// The agent binary: any build locally, the static one for a VM.
    pub agent: PathBuf,
    pub keep_going: bool,
    pub timeout: Duration,
    pub keep: bool,
    /// `Some`: in a VM, not on this machine.
    pub vm: Option<VmConfig>,
    /// Locally: in a sandbox of this machine (not `--host`).
    pub sandbox: bool,
    pub list_changes: bool,
}

impl Plan {
    /// The flags that exclude each other or need root, checked before the
    /// lab is read (and linted) at all.
    pub fn check_place(opts: &Options, vm: Option<&VmConfig>) -> Result<(), Error> {
        if vm.is_some() && opts.host {
            return Err(Error::usage("`--host` and `--vm` exclude each other"));
        }
        if opts.list_changes && (vm.is_some() || opts.host) {
            return Err(Error::usage(
                "`--changes` reads the sandbox of a local try: drop `--host`/`--vm`",
            ));
        }
        if vm.is_none() && !sandbox::is_root() {
            return Err(Error::usage(
                "`labctl try` builds its sandbox of this machine with namespaces and mounts, \
                 and runs the lab's setup and checks in it as root and as the lab's users, \
                 and this user is not root",
            )
            .hint("run as root, or use `--vm IMAGE` to try the lab in a VM"));
        }
        Ok(())
    }

    /// The plan for `lab` (loaded and linted by the front end), after
    /// [`Plan::check_place`].
    pub fn new(mut lab: Lab, opts: Options, vm: Option<VmConfig>) -> Result<Plan, Error> {
        if !lab.vms.is_empty() {
            check_session(&lab, &opts, vm.as_ref())?;
        }
        lab.select_checks(&opts.checks)
            .map_err(|e| Error::usage(e.to_string()))?;
        let timeout = match opts.timeout {
            Some(t) => t,
            // A VM must boot first: minutes under software emulation.
            None if vm.is_some() => {
                Duration::from_secs(lab.setup_timeout_secs()).saturating_add(vm::BOOT_ALLOWANCE)
            }
            None => Duration::from_secs(lab.setup_timeout_secs() + 60),
        };
        let agent = match &vm {
            Some(v) => vm::find_static_agent(opts.agent.as_deref(), v.arch)?,
            None => local::find_agent(opts.agent.as_deref())?,
        };
        Ok(Plan {
            lab,
            agent,
            keep_going: opts.keep_going,
            timeout,
            keep: opts.keep,
            sandbox: vm.is_none() && !opts.host,
            list_changes: opts.list_changes,
            vm,
        })
    }
}

/// A lab of several VMs is tried as a session (a sandbox or a guest per
/// VM): what that does not do is refused, saying what does.
fn check_session(lab: &Lab, opts: &Options, vm: Option<&VmConfig>) -> Result<(), Error> {
    let vms = lab.vm_names().join(", ");
    let refuse = |what: &str| {
        Error::usage(format!(
            "lab `{}` has several VMs ({vms}): {what}",
            lab.name
        ))
    };
    if opts.host {
        return Err(
            refuse("`--host` would run every VM's setup on this one machine")
                .hint("leave out `--host`: each VM gets a sandbox of its own"),
        );
    }
    if opts.keep && vm.is_none() {
        return Err(refuse(
            "`--keep` keeps a session's VMs under qemu (`--vm IMAGE`), not its sandboxes",
        ));
    }
    if opts.keep_going {
        return Err(refuse(
            "`--keep-going` grades one VM whose setup failed; a session is graded only when every VM is ready",
        ));
    }
    Ok(())
}

/// A lab of one VM, started where its [`Plan`] says.
pub enum Tried {
    /// `lab-agent serve` on loopback, in a sandbox or on the machine.
    Local(LocalAgent),
    /// A qemu guest.
    Vm(VmTarget),
}

impl std::fmt::Debug for Tried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what())
    }
}

/// How a run ended, for what [`Tried::finish`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Graded (whatever the grades).
    Done,
    /// The setup failed (its log was shown).
    SetupFailed,
    /// Something else failed: the agent or the machine.
    Failed,
    /// By a signal: stop at once.
    Interrupted,
}

impl Tried {
    /// Starts the lab where `plan` says (interruptibly: an interrupted start
    /// leaves nothing behind).
    pub fn start(rt: &tokio::runtime::Runtime, plan: &Plan) -> Result<Tried, StartError> {
        match &plan.vm {
            Some(vm) => {
                let started = start_watched(
                    rt,
                    |cancelled| VmTarget::start(&plan.lab, &plan.agent, plan.keep, vm, cancelled),
                    |target| target.stop(Stop::Interrupted),
                )?;
                Ok(Tried::Vm(started?))
            }
            None => {
                let start = LocalAgent::start(&plan.lab, &plan.agent, plan.sandbox);
                Ok(Tried::Local(rt.block_on(interruptible(start))??))
            }
        }
    }

    pub fn target(&self) -> &dyn Target {
        match self {
            Tried::Local(agent) => agent,
            Tried::Vm(vm) => vm,
        }
    }

    /// What the front end calls it in messages ("stopped the VM").
    pub fn what(&self) -> &'static str {
        match self {
            Tried::Local(_) => "the agent",
            Tried::Vm(_) => "the VM",
        }
    }

    /// Resolves only when the machine under the agent is gone or hung: a
    /// VM's qemu exited, or its console stayed silent `boot_silence`
    /// before its agent first answered. A local agent never resolves here:
    /// the wait itself sees it go.
    pub async fn gone(&self, boot_silence: Duration) -> Error {
        match self {
            Tried::Local(_) => std::future::pending().await,
            Tried::Vm(vm) => tokio::select! {
                e = vm.qemu_exited() => e,
                e = vm.silent_console(boot_silence) => e,
            },
        }
    }

    /// Stops the lab and removes its files (a VM's console log stays when
    /// it failed, and is shown when the VM did).
    pub async fn finish(self, how: Ended) {
        match self {
            Tried::Local(mut agent) => agent.stop().await,
            Tried::Vm(vm) => vm.stop(match how {
                Ended::Done => Stop::Discard,
                Ended::SetupFailed => Stop::KeepConsole,
                Ended::Failed => Stop::ShowConsole,
                Ended::Interrupted => Stop::Interrupted,
            }),
        }
    }
}

/// Why [`Tried::start`] returned no lab.
#[derive(Debug)]
pub enum StartError {
    Failed(Error),
    Interrupted(Interrupted),
}

impl From<Error> for StartError {
    fn from(e: Error) -> StartError {
        StartError::Failed(e)
    }
}

impl From<Interrupted> for StartError {
    fn from(i: Interrupted) -> StartError {
        StartError::Interrupted(i)
    }
}
