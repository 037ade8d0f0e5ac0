//! A lab started where its [`Plan`] says ([`Tried`]): one VM (a local
//! agent, in a sandbox or on the machine, or a qemu guest) or a session of
//! several (a sandbox or a qemu guest per VM), watched and stopped as one.

use super::{Ended, Plan, StartError, Target, interruptible, start_watched};
use crate::changes::Changes;
use crate::vm::{Stop, VmSession, VmTarget};
use crate::{Error, LocalAgent, LocalSession};
use lab_agent_client::Session;
use std::time::Duration;

/// A lab of one VM's name in [`Tried::session`].
pub const ONE_VM: &str = "the VM";

/// The lab, running. A single VM's target is boxed: it is many times the
/// size of a session's handle (a qemu machine with its vsock backend).
pub enum Tried {
    /// One VM: `lab-agent serve` on loopback, in a sandbox or on the machine.
    Local(Box<LocalAgent>),
    /// One VM: a qemu guest.
    Vm(Box<VmTarget>),
    /// A session: a sandbox of this machine per VM.
    Sandboxes(LocalSession),
    /// A session: a qemu guest per VM.
    Vms(VmSession),
}

impl std::fmt::Debug for Tried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what())
    }
}

impl Tried {
    /// Starts the lab where `plan` says, interruptibly: an interrupted or
    /// failed start leaves nothing behind.
    pub fn start(rt: &tokio::runtime::Runtime, plan: &Plan) -> Result<Tried, StartError> {
        let (lab, agent, image) = (&plan.lab, &plan.agent, plan.image.as_ref());
        match image {
            Some(image) => eprintln!(
                "the sandbox's root: {} read-only, the guest's own users, packages and /etc",
                image.describe()
            ),
            None if plan.sandbox => eprintln!(
                "note: the sandbox is a copy of this machine: the lab meets its users and \
                 packages, which a guest may lack; `--sandbox-image IMAGE` runs it on a guest \
                 image's own files, `--vm IMAGE` boots one"
            ),
            None => {}
        }
        Ok(match (&plan.vm, lab.vms.is_empty()) {
            (Some(vm), true) => Tried::Vm(Box::new(start_watched(
                rt,
                |cancelled| VmTarget::start(lab, agent, plan.keep, vm, cancelled),
                |target| target.stop(Stop::Interrupted),
            )??)),
            (Some(vm), false) => Tried::Vms(start_watched(
                rt,
                |cancelled| VmSession::start(lab, agent, vm, &plan.params, plan.keep, cancelled),
                |vms| vms.stop(Stop::Interrupted),
            )??),
            (None, true) => Tried::Local(Box::new(rt.block_on(interruptible(
                LocalAgent::start(lab, agent, plan.sandbox, image),
            ))??)),
            (None, false) => Tried::Sandboxes(rt.block_on(interruptible(
                LocalSession::start(lab, agent, &plan.params, image),
            ))??),
        })
    }

    /// A lab of one VM: its target (`None` for a session).
    pub fn one(&self) -> Option<&dyn Target> {
        match self {
            Tried::Local(agent) => Some(&**agent),
            Tried::Vm(vm) => Some(&**vm),
            _ => None,
        }
    }

    /// The VM named `name` in [`Tried::session`]: a session's, or a lab of
    /// one VM's one (whatever the name).
    pub fn target(&self, name: &str) -> Option<&dyn Target> {
        match self {
            Tried::Sandboxes(s) => s.vm(name).map(|a| a as &dyn Target),
            Tried::Vms(s) => s.vm(name).map(|t| t as &dyn Target),
            _ => self.one(),
        }
    }

    /// A session's clients, for waiting and grading it as one (a lab of one
    /// VM: a session of one, its VM called [`ONE_VM`]).
    pub fn session(&self) -> Result<Session, lab_agent_client::Error> {
        match self {
            Tried::Sandboxes(s) => s.session(),
            Tried::Vms(s) => s.session(),
            Tried::Local(_) | Tried::Vm(_) => {
                let client = self.one().expect("one VM").client()?;
                Ok(Session::new([(ONE_VM.to_owned(), client)]).expect("one name"))
            }
        }
    }

    /// What the lab changed, by VM, where that can be told (a sandbox).
    pub fn changes(&self) -> Vec<(String, Result<Changes, Error>)> {
        match self {
            Tried::Sandboxes(s) => s.changes(),
            Tried::Local(a) => a
                .changes()
                .map(|c| (ONE_VM.to_owned(), c))
                .into_iter()
                .collect(),
            Tried::Vm(_) | Tried::Vms(_) => Vec::new(),
        }
    }

    /// What the front end calls it in messages ("stopped the VM").
    pub fn what(&self) -> &'static str {
        what(
            matches!(self, Tried::Vm(_) | Tried::Vms(_)),
            self.one().is_some(),
        )
    }

    /// Resolves only when a machine under an agent is gone or hung: a
    /// guest's qemu exited, or its console stayed silent `boot_silence`
    /// before its agent first answered; in a session, with its VM's name
    /// (for [`Tried::finish`]'s `culprit`). Local agents never resolve
    /// here: the wait itself sees them go.
    pub async fn gone(&self, boot_silence: Duration) -> (Option<String>, Error) {
        match self {
            Tried::Local(_) | Tried::Sandboxes(_) => std::future::pending().await,
            Tried::Vm(vm) => tokio::select! {
                e = vm.qemu_exited() => (None, e),
                e = vm.silent_console(boot_silence) => (None, e),
            },
            Tried::Vms(s) => {
                let (vm, e) = tokio::select! {
                    gone = s.qemu_exited() => gone,
                    gone = s.silent_console(boot_silence) => gone,
                };
                (Some(vm), e)
            }
        }
    }

    /// Stops everything and removes its files. A guest that failed keeps
    /// its console log (shown when its machine failed, not its setup); in
    /// a session only the VM that failed (`culprit`; all when unknown).
    pub async fn finish(self, how: Ended, culprit: Option<&str>) {
        let stop = |ours: bool| match how {
            Ended::Interrupted => Stop::Interrupted,
            Ended::SetupFailed if ours => Stop::KeepConsole,
            Ended::Failed if ours => Stop::ShowConsole,
            _ => Stop::Discard,
        };
        match self {
            Tried::Local(mut agent) => agent.stop().await,
            Tried::Vm(vm) => vm.stop(stop(true)),
            Tried::Sandboxes(s) => s.stop().await,
            Tried::Vms(s) => s.stop_each(|vm| stop(culprit.is_none_or(|c| c == vm))),
        }
    }
}

/// What a front end calls a lab tried in a VM or not, of one VM or not.
pub(super) fn what(vm: bool, one: bool) -> &'static str {
    match (vm, one) {
        (false, true) => "the agent",
        (true, true) => "the VM",
        (false, false) => "the session's sandboxes",
        (true, false) => "the session's VMs",
    }
}
