//! Everything that can make rendering fail. All of it is a problem with the
//! input (the renderer does no I/O), so every message says which input and
//! how to fix it.

use crate::budget::{Budget, Kib, SECRET_LIMIT};
use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The per-VM token is too short or has characters an HTTP header cannot carry.
    #[error("invalid token: {problem}")]
    Token { problem: String },

    /// The lab's name (it goes into a comment of the user-data).
    #[error("invalid lab name `{name}`: {problem}")]
    LabName { name: String, problem: String },

    /// A lab file's path or mode cannot be written under `/opt/lab/`.
    #[error("lab file `{path}`: {problem}")]
    LabFile { path: String, problem: String },

    /// The agent binary is for another machine than the payload.
    #[error("the agent is built for {agent}, and the payload is for {arch}")]
    AgentArch {
        /// `amd64`, `arm64`, or `ELF machine N`.
        agent: String,
        arch: crate::Arch,
    },

    /// The setup timeout is outside what `lab.toml` allows.
    #[error("setup timeout of {secs} s: use 1 to {max} seconds", max = lab_agent_proto::lab::MAX_SETUP_TIMEOUT_SECS)]
    SetupTimeout { secs: u64 },

    /// A variable of the lab's env file that no environment can hold.
    #[error("variable `{name}` for the VM: {problem}")]
    Env { name: String, problem: String },

    /// A Secret `metadata` field (name, namespace, label) Kubernetes would reject.
    #[error("invalid {field} `{value}`: {problem}")]
    Metadata {
        /// `metadata.name`, `metadata.namespace`, `label key`, `label value of KEY`.
        field: String,
        value: String,
        problem: String,
    },

    /// The agent's disk cannot be made as asked.
    #[error("{0}")]
    AgentDisk(String),

    /// The user-data does not fit in a Secret.
    #[error("{0}")]
    TooLarge(Box<TooLarge>),
}

impl Error {
    /// The payload is over the 1 MiB Secret limit.
    pub fn is_too_large(&self) -> bool {
        matches!(self, Error::TooLarge(_))
    }

    /// What to try, for a person reading the error (printed as `hint: …`
    /// after it; not part of the message).
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            Error::AgentArch { arch, .. } => Some(match arch {
                crate::Arch::Amd64 => {
                    "build the agent for amd64 (`packaging/build-agent.sh --arch amd64`), or render \
                     for the agent's architecture (`--arch`)"
                }
                crate::Arch::Arm64 => {
                    "build the agent for arm64 (`packaging/build-agent.sh --arch arm64`), or render \
                     for the agent's architecture (`--arch`)"
                }
            }),
            Error::TooLarge(_) => Some(
                "lab files are sent compressed when that is smaller; move large ones out of \
                 the lab (download them in the setup script), and build the agent with \
                 `packaging/build-agent.sh` (static, stripped, size-optimized)",
            ),
            _ => None,
        }
    }
}

/// Over the limit: by how much, and the largest parts, so the operator knows
/// what to shrink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    pub budget: Budget,
}

impl TooLarge {
    /// Bytes over [`SECRET_LIMIT`].
    pub fn excess(&self) -> usize {
        self.budget.secret_bytes().saturating_sub(SECRET_LIMIT)
    }
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.budget;
        write!(
            f,
            "the user-data is {} bytes ({}), {} bytes ({}) over the 1 MiB Secret limit \
             ({SECRET_LIMIT} bytes of decoded data); largest parts:",
            b.secret_bytes(),
            Kib(b.secret_bytes()),
            self.excess(),
            Kib(self.excess()),
        )?;
        for (i, part) in b.parts.iter().take(3).enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}`{}` {}", part.name, Kib(part.bytes))?;
        }
        Ok(())
    }
}
