//! A lab tried: where it runs, checked before anything starts ([`Plan`]),
//! and the lab started there, stopped or kept ([`Tried`]). `labctl try`
//! and `labctl test` are its front end: between [`Tried::start`] and
//! [`Tried::finish`] they wait on [`Tried::session`] (a lab of one VM is a
//! session of one), grade and print, with each VM's [`Target`] for what is
//! its own, and watch for signals with [`interruptible`] the whole time.
//!
//! # Layout
//! - this file: the plan (the lab, the agent, the place, the timeout).
//! - `tried`: the started lab: one VM (a local agent or a qemu guest) or a
//!   session (a sandbox or a qemu guest per VM).
//! - `target`: [`Target`], what the wait-and-grade flow needs from a VM.
//! - `interrupt`: Ctrl-C and SIGTERM, also while a VM starts.
//! - `params`: `--param KEY=VALUE` and `VM.KEY=VALUE`, by VM.

mod interrupt;
mod params;
mod target;
mod tried;

pub use interrupt::{Interrupted, interruptible, start_watched};
pub use params::Params;
pub use target::Target;
pub use tried::{ONE_VM, Tried};

use crate::vm::{self, VmConfig};
use crate::{Error, local, sandbox};
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
    /// `--sandbox-image`: the sandbox on this guest image's root file
    /// system instead of this machine's.
    pub sandbox_image: Option<PathBuf>,
    /// `--param`: each VM's parameters.
    pub params: Params,
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
    /// The sandbox's root: this guest image's (`None`: this machine's).
    pub image: Option<sandbox::Image>,
    /// Each VM's parameters (a lab of one VM has them in `lab` already).
    pub params: Params,
    pub list_changes: bool,
}

impl Plan {
    /// What the front end calls the lab tried ("stopped the VM"), as
    /// [`Tried::what`] does once it has started.
    pub fn what(&self) -> &'static str {
        tried::what(self.vm.is_some(), self.lab.vms.is_empty())
    }

    /// The flags that exclude each other or need root, checked before the
    /// lab is read (and linted) at all.
    pub fn check_place(opts: &Options, vm: Option<&VmConfig>) -> Result<(), Error> {
        if vm.is_some() && opts.host {
            return Err(Error::usage("`--host` and `--vm` exclude each other"));
        }
        if opts.sandbox_image.is_some() && (vm.is_some() || opts.host) {
            return Err(Error::usage(
                "`--sandbox-image` is the sandbox's root: drop `--host`/`--vm` (`--vm IMAGE` boots \
                 the image under qemu instead)",
            ));
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
        opts.params.check(&lab)?;
        if lab.vms.is_empty() {
            // A lab of one VM: its payload's env file, `LAB_PARAM_*`.
            lab = lab
                .for_vm(None, &opts.params.for_vm(None))
                .map_err(|e| Error::usage(e.to_string()))?;
        }
        let image = opts
            .sandbox_image
            .as_deref()
            .map(sandbox::Image::probe)
            .transpose()?;
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
        let agent = match (&vm, &image) {
            (Some(v), _) => vm::find_static_agent(opts.agent.as_deref(), v.arch)?,
            // The guest's own libraries are in the sandbox: the agent that
            // runs there is the static one a VM gets, for this machine.
            (None, Some(_)) => vm::find_static_agent(opts.agent.as_deref(), host_arch())?,
            (None, None) => local::find_agent(opts.agent.as_deref())?,
        };
        Ok(Plan {
            lab,
            agent,
            keep_going: opts.keep_going,
            timeout,
            keep: opts.keep,
            sandbox: vm.is_none() && !opts.host,
            image,
            params: opts.params,
            list_changes: opts.list_changes,
            vm,
        })
    }
}

/// This machine's architecture, if it is one a lab VM can have.
fn host_arch() -> Option<lab_agent_cloudinit::Arch> {
    lab_agent_cloudinit::Arch::ALL
        .into_iter()
        .find(|a| a.uname() == std::env::consts::ARCH)
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
