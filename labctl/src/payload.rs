//! A lab's payload, rendered and written by the runner
//! ([`lab_runner::payload`]), and what `labctl` makes of its errors and of
//! `--arch`, `--agent-from`, `--param` and `--label`, which `secret` and
//! `render` share.

use crate::exit::{Exit, Failure};
use lab_agent_cloudinit::{AgentFrom, Arch};
pub use lab_runner::payload::*;
use std::collections::BTreeMap;

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

/// `--param KEY=VALUE`s; the lab's model checks keys and values.
pub fn params(args: &[String]) -> Result<BTreeMap<String, String>, PayloadError> {
    pairs("--param", "KEY=VALUE", "parameter", args)
}

/// `FLAG K=V`s into a map; each key once (`what` names a key in messages).
pub fn pairs(
    flag: &str,
    form: &str,
    what: &str,
    args: &[String],
) -> Result<BTreeMap<String, String>, PayloadError> {
    let escape = lab_agent_proto::text::escape;
    let mut pairs = BTreeMap::new();
    for arg in args {
        let Some((key, value)) = arg.split_once('=') else {
            return Err(PayloadError::Usage(format!(
                "`{flag} {}` has no `=`: write `{flag} {form}`",
                escape(arg)
            )));
        };
        if pairs.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(PayloadError::Usage(format!(
                "{what} `{}` is given twice: give each key once",
                escape(key)
            )));
        }
    }
    Ok(pairs)
}
