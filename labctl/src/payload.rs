//! A lab's payload, rendered and written by the runner
//! ([`lab_runner::payload`]), and what `labctl` makes of its errors and of
//! `--arch`.

use crate::exit::{Exit, Failure};
use lab_agent_cloudinit::{AgentFrom, Arch};
pub use lab_runner::payload::*;

/// Every way a payload fails stops its verb before a usable payload: exit 2.
impl From<PayloadError> for Failure {
    fn from(e: PayloadError) -> Failure {
        match e {
            PayloadError::Lab(e) => Failure::lab(e),
            e => {
                let hint = e.hint();
                Failure::from_error(Exit::Usage, e, hint)
            }
        }
    }
}

/// `--arch`: a lab VM's architecture, as Kubernetes names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArchArg {
    /// x86_64
    Amd64,
    /// aarch64
    Arm64,
}

impl From<ArchArg> for Arch {
    fn from(a: ArchArg) -> Arch {
        match a {
            ArchArg::Amd64 => Arch::Amd64,
            ArchArg::Arm64 => Arch::Arm64,
        }
    }
}

/// `--agent-from`: where a lab VM takes its agent from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentFromArg {
    /// In the payload: the Secret holds the agent (~600 KiB)
    Embedded,
    /// From the agent's disk (`labctl agent-disk`), attached to the VM:
    /// the payload holds only its SHA-256
    Disk,
}

impl From<AgentFromArg> for AgentFrom {
    fn from(a: AgentFromArg) -> AgentFrom {
        match a {
            AgentFromArg::Embedded => AgentFrom::Embedded,
            AgentFromArg::Disk => AgentFrom::Disk,
        }
    }
}
