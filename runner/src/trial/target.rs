//! What a front end's wait-and-grade flow needs from wherever a lab's
//! agent runs ([`Target`]): a local agent (in a sandbox or on the machine)
//! or a VM.

use crate::LocalAgent;
use crate::vm::VmTarget;
use lab_agent_client::{Client, Progress};

pub trait Target {
    /// A client for the agent, with its token.
    fn client(&self) -> Result<Client, lab_agent_client::Error>;
    /// The checks' `LAB_DIR` where the agent runs.
    fn guest_lab_dir(&self) -> &str;
    /// Sees every progress report of the wait; returns what to show while
    /// the agent does not answer (default: why it cannot be reached).
    fn on_progress(&self, _progress: &Progress) -> Option<String> {
        None
    }
    /// The wait ended with the agent ready.
    fn on_ready(&self) {}
    /// The wait failed for another reason than a failed setup: show what
    /// helps (the agent's own log, a console).
    fn explain_wait_failure(&self) {}
}

impl Target for LocalAgent {
    fn client(&self) -> Result<Client, lab_agent_client::Error> {
        LocalAgent::client(self)
    }
    fn guest_lab_dir(&self) -> &str {
        LocalAgent::guest_lab_dir(self)
    }
    fn explain_wait_failure(&self) {
        self.print_log_tail();
    }
}

impl Target for VmTarget {
    fn client(&self) -> Result<Client, lab_agent_client::Error> {
        VmTarget::client(self)
    }
    fn guest_lab_dir(&self) -> &str {
        VmTarget::guest_lab_dir(self)
    }
    fn on_progress(&self, progress: &Progress) -> Option<String> {
        VmTarget::on_progress(self, progress)
    }
    fn on_ready(&self) {
        VmTarget::on_ready(self);
    }
}
