//! The work behind `labctl secret`: a lab's payload for one VM written out
//! ([`SecretJob::run`]): the token read (by the one rule) or generated, the
//! agent found for the architecture, the payload rendered
//! ([`render_logged`]), the token, the user-data and the Secret written
//! 0600 (the token first: if a later write fails, the caller still has
//! it), and what was done as a [`SecretReport`].
//!
//! The data (the Secret, or the report's JSON) goes to `out`; what a person
//! wants to see on the way (the agent, the budget, the files written) to
//! `log`.

use crate::payload::{
    BudgetReport, PayloadError, RenderOptions, Rendered, render_logged, write_private,
};
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::{
    AgentFrom, AgentPin, Arch, Channel, Format, SecretMeta, agent_disk, lab_payload,
};
use lab_agent_proto::lab::{LAB_VM_ENV, Lab};
use std::io::Write;
use std::path::PathBuf;

/// Where the token comes from.
#[derive(Debug, Clone)]
pub enum TokenSource {
    /// A token file, read by the one rule (owner-only, trimmed, valid).
    File(PathBuf),
    /// A new random token.
    Generate,
}

/// What to render and where to write it, checked by the front end, with
/// the lab loaded for its VM.
#[derive(Debug)]
pub struct SecretJob {
    pub lab: Lab,
    pub meta: SecretMeta,
    pub format: Format,
    pub token: TokenSource,
    /// The guest's machine; `None`: the agent's, else amd64.
    pub arch: Option<Arch>,
    /// The static agent; `None`: found next to the program, then in the
    /// build tree (with a warning when it is older than the sources).
    pub agent: Option<PathBuf>,
    /// The Secret's file; `None`: `out` (or the report, with `json`).
    pub output: Option<PathBuf>,
    pub user_data_out: Option<PathBuf>,
    pub token_out: Option<PathBuf>,
    pub serial_autologin: bool,
    /// The agent in the payload, or only its pin (the VM then needs the
    /// agent's disk, which `log` is told how to attach).
    pub agent_from: AgentFrom,
    /// Where the agent listens (`--channel`).
    pub channel: Channel,
    /// Write the [`SecretReport`] to `out` as JSON (the Secret in it
    /// unless `output` is given).
    pub json: bool,
}

/// What one run produced, as `labctl secret --json` prints it.
#[derive(Debug, serde::Serialize)]
pub struct SecretReport {
    pub lab: String,
    /// The VM of a lab with `[[vms]]` (absent for a lab of one VM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    pub name: String,
    pub namespace: Option<String>,
    /// The token the agent will require; the backend needs it.
    pub token: String,
    /// `false` when it came from a token file.
    pub token_generated: bool,
    /// `amd64` or `arm64`.
    pub arch: &'static str,
    pub agent: PathBuf,
    /// `embedded` or `disk`.
    pub agent_from: &'static str,
    /// `tcp`, `vsock` or `both`.
    pub channel: &'static str,
    /// The SHA-256 of the agent (pinned in the payload with `disk`).
    pub agent_sha256: String,
    pub format: &'static str,
    pub secret_file: Option<PathBuf>,
    pub user_data_file: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
    pub budget: BudgetReport,
    /// The manifest, when it was not written to a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl SecretJob {
    /// Renders and writes; the data to `out`, notes to `log`.
    pub fn run(
        &self,
        out: &mut dyn Write,
        log: &mut dyn Write,
    ) -> Result<SecretReport, PayloadError> {
        let (token, token_generated) = match &self.token {
            TokenSource::File(path) => (lab_agent_proto::token_file::read_token_file(path)?, false),
            TokenSource::Generate => (
                lab_agent_cloudinit::token::generate().map_err(PayloadError::Random)?,
                true,
            ),
        };
        let arch = lab_payload::payload_arch(self.arch, self.agent.as_deref())?;
        let agent = agent_bin::load(self.agent.as_deref(), Linkage::Static(arch))?;
        if self.agent.is_none() {
            if let Some(w) = agent_bin::stale_warning(&agent.path) {
                let _ = writeln!(log, "warning: {w}");
            }
        }
        let opts = RenderOptions {
            arch,
            meta: self.meta.clone(),
            format: self.format,
            serial_autologin: self.serial_autologin,
            agent_from: self.agent_from,
            channel: self.channel,
        };
        let Rendered {
            user_data,
            manifest,
        } = render_logged(&self.lab, &agent, &token, &opts, log)?;
        let pin = AgentPin::of(&agent.bytes);
        if self.agent_from == AgentFrom::Disk {
            let _ = write!(log, "{}", disk_volume_note(arch, &pin));
        }

        // The token first: if a later write fails, the caller still has it.
        if let Some(path) = &self.token_out {
            write_private(path, format!("{token}\n").as_bytes(), "the token")?;
            let _ = writeln!(log, "wrote the token to `{}`", path.display());
        }
        if let Some(path) = &self.user_data_out {
            write_private(path, user_data.as_bytes(), "the user-data")?;
            let _ = writeln!(log, "wrote the user-data to `{}`", path.display());
        }
        let mut secret_inline = None;
        match &self.output {
            Some(path) => {
                write_private(path, manifest.as_bytes(), "the Secret")?;
                let _ = writeln!(
                    log,
                    "wrote Secret `{}` to `{}`",
                    self.meta.name,
                    path.display()
                );
            }
            None if self.json => secret_inline = Some(manifest),
            None => write_out(out, manifest.as_bytes())?,
        }

        let report = SecretReport {
            lab: self.lab.name.clone(),
            vm: self.lab.vm_env.get(LAB_VM_ENV).cloned(),
            name: self.meta.name.clone(),
            namespace: self.meta.namespace.clone(),
            token,
            token_generated,
            arch: arch.name(),
            agent: agent.path,
            agent_from: self.agent_from.name(),
            channel: self.channel.name(),
            agent_sha256: pin.sha256,
            format: match self.format {
                Format::Yaml => "yaml",
                Format::Json => "json",
            },
            secret_file: self.output.clone(),
            user_data_file: self.user_data_out.clone(),
            token_file: match &self.token {
                TokenSource::File(path) => self.token_out.clone().or_else(|| Some(path.clone())),
                TokenSource::Generate => self.token_out.clone(),
            },
            budget: user_data.budget().into(),
            secret: secret_inline,
        };
        if self.json {
            let mut text = serde_json::to_string_pretty(&report).expect("serialize report");
            text.push('\n');
            write_out(out, text.as_bytes())?;
        }
        Ok(report)
    }
}

/// What a VM whose payload pins its agent needs, for the person rendering
/// it: the disk and the volume, in the VM's own YAML.
pub fn disk_volume_note(arch: Arch, pin: &AgentPin) -> String {
    format!(
        "the VM needs the agent's disk with the {arch} agent of sha256 {sha} (made by `labctl \
         agent-disk`); in its `spec.template.spec`:\n\
         \x20 domain: {{devices: {{disks: [{{name: lab-agent, serial: {serial}, disk: {{bus: virtio}}}}]}}}}\n\
         \x20 volumes: [{{name: lab-agent, containerDisk: {{image: REGISTRY/lab-agent:TAG}}}}]\n\
         \x20   or: [{{name: lab-agent, configMap: {{name: lab-agent-…, volumeLabel: {label}}}}}] \
         (and `disks: [{{name: lab-agent, disk: {{bus: virtio}}}}]`)\n\
         without it, or with another agent on it, the VM never starts its agent: the reason is \
         on its serial console (`virtctl console VM`)\n",
        sha = pin.sha256,
        serial = agent_disk::SERIAL,
        label = agent_disk::LABEL,
    )
}

pub(crate) fn write_out(out: &mut dyn Write, bytes: &[u8]) -> Result<(), PayloadError> {
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|source| PayloadError::Write {
            what: "the output",
            path: "<stdout>".into(),
            source,
        })
}
