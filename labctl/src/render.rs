//! `labctl render LAB_DIR --name NAME …`: every object of a lab's VM (or
//! session) from one set of flags, as YAML documents separated by `---`:
//! the NetworkPolicy, a session's headless Service, and per VM its Secret
//! (as `labctl secret` renders it) and its `VirtualMachine`. The flags are
//! checked here; the generator (`lab_manifest`, `manifest`) checks them
//! against each other and renders; the runner's [`RenderJob`] reads and
//! writes.
//!
//! Exit status: 0 done (also when a golden PVC given as a file is
//! unusable: the VMs boot the containerDisk, and stderr says why); 2
//! anything that stopped it, among them two flags that cannot work
//! together, each named.

use crate::exit::{Exit, Failure};
use crate::payload::{AgentFromArg, ArchArg, PayloadError, pairs, params};
use lab_agent_cloudinit::Arch;
use lab_agent_cloudinit::Channel;
use lab_agent_cloudinit::lab_manifest::ManifestOptions;
use lab_agent_cloudinit::manifest::{AgentDiskVolume, Backend, ManifestSpec};
use lab_agent_proto::lab::Lab;
use lab_runner::render::RenderJob;
pub use lab_runner::render::RenderReport as Report;
use lab_runner::secret::TokenSource;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct RenderArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab_dir: PathBuf,
    /// The VM's name, or the session's (its VMs are NAME-VM, its Service
    /// NAME); Secrets are VM-userdata; a DNS-1123 label
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// The namespace of every object (required for a session)
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// A label for every object and the VMs' pods; repeatable (the
    /// `lab-agent/` prefix is render's own)
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// One VM of a session: its Secret and VM, and the session's objects
    #[arg(long, value_name = "NAME")]
    pub vm: Option<String>,
    /// A value for the setup and checks, as LAB_PARAM_KEY; repeatable
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// The VMs' architecture: the agent, the serial console, the node
    /// selector (default: the `--agent`'s, else amd64)
    #[arg(long, value_enum, value_name = "ARCH")]
    pub arch: Option<ArchArg>,
    /// The static lab-agent binary (default: as `labctl secret` finds it)
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,
    /// Where the VM takes its agent from: `embedded` in the payload, or
    /// `disk`, the agent's disk (`--agent-disk`)
    #[arg(long, value_enum, value_name = "FROM", default_value_t = AgentFromArg::Embedded)]
    pub agent_from: AgentFromArg,
    /// The volume of the agent's disk (`labctl agent-disk`):
    /// `containerdisk:IMAGE` (its disk gets serial `lab-agent`) or
    /// `configmap:NAME` (`volumeLabel: LAB-AGENT`)
    #[arg(long, value_name = "VOLUME")]
    pub agent_disk: Option<AgentDiskVolume>,
    /// Where the agent listens: `tcp` (port 8899, opened to the backend
    /// alone), `vsock` (`autoattachVSOCK`; no port at all) or both
    #[arg(long, value_name = "CHANNEL", default_value = "both")]
    pub channel: Channel,
    /// The guest's containerDisk image: the root disk, and the original a
    /// golden PVC must hold
    #[arg(long, value_name = "IMAGE")]
    pub root_image: String,
    /// Boot from this golden PVC (an `ephemeral` volume, read-only),
    /// taken as usable
    #[arg(long, value_name = "PVC")]
    pub golden_pvc: Option<String>,
    /// The golden PVC as `kubectl get pvc NAME -o json` printed it (empty:
    /// not found): boot from it if usable, else from `--root-image`, and
    /// say why
    #[arg(long, value_name = "FILE")]
    pub golden_pvc_json: Option<PathBuf>,
    /// The VM's cores
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub cpus: u32,
    /// The VM's memory, a Kubernetes quantity
    #[arg(long, value_name = "QUANTITY", default_value = "4Gi")]
    pub memory: String,
    /// The backend's namespace: its pods alone reach the agents' port
    #[arg(long, value_name = "NS")]
    pub backend_namespace: Option<String>,
    /// A label the backend's pods carry; repeatable
    #[arg(long = "backend-label", value_name = "KEY=VALUE")]
    pub backend_labels: Vec<String>,
    /// The cluster's DNS domain, for a session's names
    #[arg(long, value_name = "DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Use the token in FILE (a lab of one VM, or `--vm`) instead of
    /// making one per VM
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Write each VM's token to FILE (mode 0600); in a session `{vm}` in
    /// FILE is the VM's name
    #[arg(long, value_name = "FILE")]
    pub token_out: Option<String>,
    /// Do not log root in automatically on the serial console
    #[arg(long)]
    pub no_autologin: bool,
    /// Write the YAML to FILE (mode 0600) instead of stdout
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print one JSON object on stdout (tokens, root disk, budgets, and
    /// the YAML unless `-o`)
    #[arg(long)]
    pub json: bool,
}

/// `labctl render`'s arguments, checked, with the lab loaded: the
/// runner's job.
#[derive(Debug)]
pub struct Config(RenderJob);

impl Config {
    pub fn from_args(args: &RenderArgs) -> Result<Config, PayloadError> {
        let lab = Lab::load(&args.lab_dir)?;
        if args.token_file.is_none() && args.token_out.is_none() && !args.json {
            return Err(PayloadError::Usage(
                "generated tokens would only be inside the Secrets: pass `--token-out FILE` or \
                 `--json` to get them back, or `--token-file FILE` to use your own"
                    .into(),
            ));
        }
        let spec = ManifestSpec {
            name: args.name.clone(),
            namespace: args.namespace.clone(),
            labels: pairs("--label", "key=value", "label", &args.labels)?,
            // The job's: `--arch`, else the agent's.
            arch: Arch::default(),
            agent_from: args.agent_from.into(),
            agent_disk: args.agent_disk.clone(),
            channel: args.channel,
            root_image: args.root_image.clone(),
            golden_pvc: args.golden_pvc.clone(),
            golden_observed: None,
            cpus: args.cpus,
            memory: args.memory.clone(),
            backend: Backend {
                namespace: args.backend_namespace.clone(),
                labels: pairs(
                    "--backend-label",
                    "key=value",
                    "label",
                    &args.backend_labels,
                )?,
            },
            cluster_domain: args.cluster_domain.clone(),
        };
        Ok(Config(RenderJob {
            lab,
            options: ManifestOptions {
                spec,
                vm: args.vm.clone(),
                params: params(&args.params)?,
                token: None,
                serial_autologin: !args.no_autologin,
            },
            token: match &args.token_file {
                Some(path) => TokenSource::File(path.clone()),
                None => TokenSource::Generate,
            },
            arch: args.arch.map(Arch::from),
            agent: args.agent.clone(),
            golden_pvc_json: args.golden_pvc_json.clone(),
            output: args.output.clone(),
            token_out: args.token_out.clone(),
            json: args.json,
        }))
    }
}

pub fn run(args: &RenderArgs) -> Result<Exit, Failure> {
    let config = Config::from_args(args)?;
    execute(
        &config,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    )?;
    Ok(Exit::Success)
}

/// The whole verb, with stdout and stderr passed in (tests capture them).
pub fn execute(
    config: &Config,
    out: &mut dyn Write,
    log: &mut dyn Write,
) -> Result<Report, PayloadError> {
    config.0.run(out, log)
}
