//! A lab of several VMs (`[[vms]]`) tried as one session
//! ([`TriedSession`]): a sandbox per VM on one private switch, or, with a
//! VM config, a qemu guest per VM on one private network; started, watched
//! and stopped as one, each VM a [`Target`] of its own.

use super::{Ended, Plan, StartError, Target, interruptible, start_watched};
use crate::changes::Changes;
use crate::vm::{LeftRunning, Stop, VmSession};
use crate::{Error, LocalSession};
use lab_agent_client::Session;
use std::path::PathBuf;
use std::time::Duration;

/// The session's VMs, started where the [`Plan`] says.
#[derive(Debug)]
pub enum TriedSession {
    /// A sandbox of this machine per VM.
    Sandboxes(LocalSession),
    /// A qemu guest per VM.
    Vms(VmSession),
}

impl TriedSession {
    /// Starts every VM of `plan`'s lab, interruptibly: an interrupted or
    /// failed start leaves nothing behind.
    pub fn start(rt: &tokio::runtime::Runtime, plan: &Plan) -> Result<TriedSession, StartError> {
        match &plan.vm {
            Some(vm) => {
                let started = start_watched(
                    rt,
                    |cancelled| VmSession::start(&plan.lab, &plan.agent, vm, plan.keep, cancelled),
                    |vms| vms.stop(Stop::Interrupted),
                )?;
                Ok(TriedSession::Vms(started?))
            }
            None => {
                let start = LocalSession::start(&plan.lab, &plan.agent);
                Ok(TriedSession::Sandboxes(rt.block_on(interruptible(start))??))
            }
        }
    }

    /// What the front end calls them ("stopped the session's VMs").
    pub fn what(&self) -> &'static str {
        match self {
            TriedSession::Sandboxes(_) => "the session's sandboxes",
            TriedSession::Vms(_) => "the session's VMs",
        }
    }

    /// The clients, for waiting and grading the session as one.
    pub fn session(&self) -> Result<Session, lab_agent_client::Error> {
        match self {
            TriedSession::Sandboxes(s) => s.session(),
            TriedSession::Vms(s) => s.session(),
        }
    }

    /// The VM named `name`.
    pub fn vm(&self, name: &str) -> Option<&dyn Target> {
        match self {
            TriedSession::Sandboxes(s) => s.vm(name).map(|a| a as &dyn Target),
            TriedSession::Vms(s) => s.vm(name).map(|t| t as &dyn Target),
        }
    }

    /// What the lab changed in each VM, where that can be told (sandboxes).
    pub fn changes(&self) -> Vec<(String, Result<Changes, Error>)> {
        match self {
            TriedSession::Sandboxes(s) => s.changes(),
            TriedSession::Vms(_) => Vec::new(),
        }
    }

    /// Resolves only when a VM's machine is gone or hung (a guest's qemu
    /// exited, or its console stayed silent `boot_silence` before its
    /// agent first answered), naming it; sandboxes never resolve here.
    pub async fn gone(&self, boot_silence: Duration) -> Error {
        match self {
            TriedSession::Sandboxes(_) => std::future::pending().await,
            TriedSession::Vms(s) => tokio::select! {
                e = s.qemu_exited() => e,
                e = s.silent_console(boot_silence) => e,
            },
        }
    }

    /// Stops every VM and removes their files; after a failure, the VM
    /// that failed (`culprit`) keeps its console log (shown when its
    /// machine failed, not its setup), the others are discarded.
    pub async fn finish(self, how: Ended, culprit: Option<&str>) {
        match self {
            TriedSession::Sandboxes(s) => s.stop().await,
            TriedSession::Vms(s) => s.stop_each(|vm| {
                let ours = culprit.is_none_or(|c| c == vm);
                match how {
                    Ended::Interrupted => Stop::Interrupted,
                    Ended::SetupFailed if ours => Stop::KeepConsole,
                    Ended::Failed if ours => Stop::ShowConsole,
                    _ => Stop::Discard,
                }
            }),
        }
    }

    /// `--keep`: the guests left running past this process (with their
    /// `stop.sh`, and the session's, which stops them all); `Err(self)`
    /// for sandboxes, which a session does not keep.
    #[allow(clippy::result_large_err)]
    pub fn leave_running(self) -> Result<(PathBuf, Vec<(String, LeftRunning)>), TriedSession> {
        match self {
            TriedSession::Vms(s) => Ok(s.leave_running()),
            other => Err(other),
        }
    }
}
