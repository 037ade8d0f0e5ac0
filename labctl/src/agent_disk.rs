//! `labctl agent-disk -o DIR`: the agent's disk, made once per cluster
//! (the runner's [`AgentDiskJob`]), so that lab VMs rendered with
//! `labctl secret --agent-from disk` carry only the agent's SHA-256.
//!
//! stdout carries data only (`--json`); what was found and written, and
//! how it reaches a cluster, go to stderr. Exit status: 0 written; 2
//! anything that stopped it (an agent missing or of the wrong machine, a
//! ConfigMap over 1 MiB, a file that cannot be written).

use crate::exit::{Exit, Failure};
use crate::payload::ArchArg;
use lab_agent_cloudinit::Arch;
use lab_runner::agent_disk::AgentDiskJob;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct AgentDiskArgs {
    /// The folder to write `lab-agent.img`, `lab-agent.containerdisk.tar`,
    /// `lab-agent.configmap.yaml` and `SHA256SUMS` to (made if missing)
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    /// The architectures to hold an agent for, comma-separated [default:
    /// the `--agent`s' own, else amd64,arm64]
    #[arg(long, value_enum, value_name = "LIST", value_delimiter = ',')]
    pub arch: Vec<ArchArg>,
    /// A static lab-agent binary, its architecture read from its ELF
    /// header; repeatable, one per architecture [default: as `labctl
    /// secret` finds it, for each `--arch`]
    #[arg(long, value_name = "PATH")]
    pub agent: Vec<PathBuf>,
    /// The ConfigMap's name [default: lab-agent- and 12 hex digits of the
    /// agents' SHA-256: an immutable ConfigMap gets a new name per agent]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The ConfigMap's namespace (a ConfigMap volume must be in the VM's)
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Print one JSON object on stdout: the agents, their SHA-256, the files
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &AgentDiskArgs) -> Result<Exit, Failure> {
    let job = AgentDiskJob {
        output: args.output.clone(),
        arches: (!args.arch.is_empty()).then(|| args.arch.iter().map(|&a| Arch::from(a)).collect()),
        agents: args.agent.clone(),
        configmap_name: args.name.clone(),
        namespace: args.namespace.clone(),
        json: args.json,
    };
    job.run(&mut std::io::stdout().lock(), &mut std::io::stderr())?;
    Ok(Exit::Success)
}
