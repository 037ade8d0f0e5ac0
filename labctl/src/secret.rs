//! `labctl secret LAB_DIR --name NAME …`: the edge of the payload generator.
//! It checks the flags and loads the lab for its VM; the runner's
//! [`SecretJob`] reads the agent and the token (or makes one), renders the
//! payload (the generator's `lab_payload`, which `labctl try --vm` and the
//! Python package call too) and writes the results.
//!
//! stdout carries data only (the Secret, or the `--json` object); progress,
//! the budget line and errors go to stderr. Exit status: 0 done; 2 anything
//! that stopped it (flags, the lab, the agent binary, the token, Kubernetes
//! names, over 1 MiB, a file that cannot be written).

use crate::exit::{Exit, Failure};
pub use crate::payload::{AgentFromArg, ArchArg};
use crate::payload::{PayloadError, pairs, params};
use lab_agent_cloudinit::{Arch, Format, SecretMeta};
use lab_agent_proto::lab::Lab;
pub use lab_runner::secret::SecretReport as Report;
use lab_runner::secret::{SecretJob, TokenSource};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct SecretArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab_dir: PathBuf,
    /// The Secret's `metadata.name` (a DNS-1123 subdomain)
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// The Secret's `metadata.namespace` (default: none, `kubectl -n` decides)
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// A label for the Secret; repeatable
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// Use the token in FILE instead of generating one
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The lab VM's architecture: picks the agent and the serial console
    /// (default: the `--agent`'s, else amd64)
    #[arg(long, value_enum, value_name = "ARCH")]
    pub arch: Option<ArchArg>,
    /// The static lab-agent binary (default: next to labctl, then the build
    /// tree's for `--arch`); with `--agent-from disk`, the one the agent's
    /// disk holds, whose SHA-256 the payload pins
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,
    /// Where the VM takes its agent from: `embedded` in the payload, or
    /// `disk`, the agent's disk (`labctl agent-disk`) attached to the VM,
    /// the payload holding only the agent's SHA-256 (a few KiB per VM)
    #[arg(long, value_enum, value_name = "FROM", default_value_t = AgentFromArg::Embedded)]
    pub agent_from: AgentFromArg,
    /// Where the agent listens: `tcp` (port 8899), `vsock` (virtio-vsock
    /// port 8899, KubeVirt's `autoattachVSOCK`; no network at all) or both
    #[arg(long, value_name = "CHANNEL", default_value = "both")]
    pub channel: lab_agent_cloudinit::Channel,
    /// Syntax of the Secret manifest
    #[arg(long, value_enum, default_value_t = ManifestFormat::Yaml)]
    pub format: ManifestFormat,
    /// Write the Secret to FILE (mode 0600) instead of stdout
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the raw user-data to FILE (mode 0600), e.g. for a NoCloud seed
    #[arg(long, value_name = "FILE")]
    pub user_data_out: Option<PathBuf>,
    /// Write the token to FILE (mode 0600): the backend needs it to talk to the agent
    #[arg(long, value_name = "FILE")]
    pub token_out: Option<PathBuf>,
    /// Do not log root in automatically on the serial console
    #[arg(long)]
    pub no_autologin: bool,
    /// Print one JSON object on stdout (token, budget, and the Secret unless `-o`)
    #[arg(long)]
    pub json: bool,
    /// The VM of a lab with `[[vms]]` this payload is for (required there,
    /// refused in a lab of one VM): its setup, and LAB_VM/LAB_VMS for it
    #[arg(long, value_name = "NAME")]
    pub vm: Option<String>,
    /// A value for this VM's setup and checks, as the variable
    /// LAB_PARAM_KEY (KEY: letters, digits, `_`; VALUE: any text); repeatable
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ManifestFormat {
    Yaml,
    Json,
}

/// `labctl secret`'s arguments, checked, with the lab loaded: the
/// runner's job.
#[derive(Debug)]
pub struct Config(SecretJob);

impl Config {
    pub fn from_args(args: &SecretArgs) -> Result<Config, PayloadError> {
        let meta = secret_meta(args)?;
        let params = params(&args.params)?;
        // The lab (and `--vm`) before the token flags: one round of fixes.
        let lab = Lab::load(&args.lab_dir)?
            .for_vm(args.vm.as_deref(), &params)
            .map_err(|e| PayloadError::Usage(e.to_string()))?;
        if args.token_file.is_none() && args.token_out.is_none() && !args.json {
            return Err(PayloadError::Usage(
                "a generated token would only be inside the Secret: pass `--token-out FILE` or \
                 `--json` to get it back, or `--token-file FILE` to use your own"
                    .into(),
            ));
        }
        Ok(Config(SecretJob {
            lab,
            meta,
            format: match args.format {
                ManifestFormat::Yaml => Format::Yaml,
                ManifestFormat::Json => Format::Json,
            },
            token: match &args.token_file {
                Some(path) => TokenSource::File(path.clone()),
                None => TokenSource::Generate,
            },
            arch: args.arch.map(Arch::from),
            agent: args.agent.clone(),
            output: args.output.clone(),
            user_data_out: args.user_data_out.clone(),
            token_out: args.token_out.clone(),
            serial_autologin: !args.no_autologin,
            agent_from: args.agent_from.into(),
            channel: args.channel,
            json: args.json,
        }))
    }
}

pub fn run(args: &SecretArgs) -> Result<Exit, Failure> {
    let config = Config::from_args(args)?;
    let mut stdout = std::io::stdout().lock();
    execute(&config, &mut stdout, &mut std::io::stderr())?;
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

/// `--name`, `--namespace` and `--label k=v`, checked before any work.
fn secret_meta(args: &SecretArgs) -> Result<SecretMeta, PayloadError> {
    let meta = SecretMeta {
        name: args.name.clone(),
        namespace: args.namespace.clone(),
        labels: pairs("--label", "key=value", "label", &args.labels)?,
        annotations: Default::default(),
    };
    meta.validate()?;
    Ok(meta)
}
