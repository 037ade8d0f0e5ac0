//! The work behind `labctl render`: every object of a lab's VM or session
//! written out ([`RenderJob::run`]): the golden PVC read (when given as a
//! file), the token read (by the one rule) or one made per VM, the agent
//! found for the architecture, the objects rendered by the generator
//! ([`lab_manifest::render`]: each Secret through the payload renderer
//! `labctl secret` uses), the tokens written first, then the YAML.
//!
//! The data (the YAML stream, or the report's JSON) goes to `out`; what a
//! person wants to see on the way (the agent, each payload's budget, the
//! root disk chosen and why) to `log`.

use crate::payload::{BudgetReport, PayloadError, write_private};
use crate::secret::{TokenSource, write_out};
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::lab_manifest::{self, ManifestOptions};
use lab_agent_cloudinit::manifest::RootChoice;
use lab_agent_cloudinit::{AgentPin, Arch, lab_payload};
use lab_agent_proto::lab::Lab;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `--token-out`'s placeholder for the VM's name, in a session.
pub const VM_PLACEHOLDER: &str = "{vm}";

/// What to render and where to write it, checked by the front end.
#[derive(Debug)]
pub struct RenderJob {
    pub lab: Lab,
    /// The objects' inputs; its `spec.arch` is replaced by the architecture
    /// `arch` and the agent decide, its `token` by `token`'s.
    pub options: ManifestOptions,
    pub token: TokenSource,
    /// The guest's machine; `None`: the agent's, else amd64.
    pub arch: Option<Arch>,
    /// The static agent; `None`: found as `labctl secret` finds it.
    pub agent: Option<PathBuf>,
    /// The golden PVC as `kubectl get pvc NAME -o json` printed it (empty
    /// or `null`: it does not exist).
    pub golden_pvc_json: Option<PathBuf>,
    /// The YAML's file; `None`: `out` (or the report, with `json`).
    pub output: Option<PathBuf>,
    /// Where each token goes: a path, with [`VM_PLACEHOLDER`] for a
    /// session's VM names.
    pub token_out: Option<String>,
    pub json: bool,
}

/// What one run produced, as `labctl render --json` prints it.
#[derive(Debug, serde::Serialize)]
pub struct RenderReport {
    pub lab: String,
    pub name: String,
    pub namespace: Option<String>,
    pub arch: &'static str,
    pub agent: PathBuf,
    pub agent_from: &'static str,
    pub agent_sha256: String,
    pub channel: &'static str,
    pub root: RootReport,
    pub vms: Vec<VmReport>,
    /// `kind/name` of each object, in the order written.
    pub objects: Vec<String>,
    pub file: Option<PathBuf>,
    /// The YAML, when it was not written to a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifests: Option<String>,
}

/// The root disk the VMs boot.
#[derive(Debug, serde::Serialize)]
pub struct RootReport {
    /// `golden` or `containerdisk`.
    pub disk: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Why not the golden asked for (`--golden-pvc-json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
}

/// One VM: its objects' names, its token, its payload's budget.
#[derive(Debug, serde::Serialize)]
pub struct VmReport {
    /// The `[[vms]]` entry (absent for a lab of one VM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    pub name: String,
    pub secret: String,
    pub token: String,
    pub token_generated: bool,
    pub token_file: Option<PathBuf>,
    pub budget: BudgetReport,
}

impl RenderJob {
    /// Renders and writes; the data to `out`, notes to `log`.
    pub fn run(
        &self,
        out: &mut dyn Write,
        log: &mut dyn Write,
    ) -> Result<RenderReport, PayloadError> {
        let mut options = self.options.clone();
        if let Some(path) = &self.golden_pvc_json {
            options.spec.golden_observed = Some(read_pvc(path)?);
        }
        let several = options.vm.is_none() && self.lab.vms.len() > 1;
        if let Some(template) = &self.token_out
            && several
            && !template.contains(VM_PLACEHOLDER)
        {
            return Err(PayloadError::Usage(format!(
                "`--token-out {template}` names one file, and lab `{}` has {} VMs, each with \
                 its own token: put `{VM_PLACEHOLDER}` in the path (`--token-out \
                 'tokens/{VM_PLACEHOLDER}.token'`)",
                self.lab.name,
                self.lab.vms.len()
            )));
        }
        options.token = match &self.token {
            TokenSource::File(path) => Some(lab_agent_proto::token_file::read_token_file(path)?),
            TokenSource::Generate => None,
        };
        // Every pair of flags checked before an agent is looked for.
        lab_manifest::plan(&self.lab, &options)?;
        let arch = lab_payload::payload_arch(self.arch, self.agent.as_deref())?;
        options.spec.arch = arch;
        let agent = agent_bin::load(self.agent.as_deref(), Linkage::Static(arch))?;
        if self.agent.is_none()
            && let Some(w) = agent_bin::stale_warning(&agent.path)
        {
            let _ = writeln!(log, "warning: {w}");
        }
        let _ = writeln!(
            log,
            "agent: `{}` ({} bytes)",
            agent.path.display(),
            agent.bytes.len()
        );
        let rendered = lab_manifest::render(&self.lab, &agent, &options)?;
        let root = match &rendered.root {
            RootChoice::Golden { claim } => {
                let _ = writeln!(log, "root: the golden PVC `{claim}`");
                RootReport {
                    disk: "golden",
                    claim: Some(claim.clone()),
                    image: None,
                    fallback_reason: None,
                }
            }
            RootChoice::ContainerDisk { image, fallback } => {
                if let Some(why) = fallback {
                    let _ = writeln!(
                        log,
                        "note: {why}; the VMs boot the containerDisk `{image}` instead"
                    );
                }
                RootReport {
                    disk: "containerdisk",
                    claim: None,
                    image: Some(image.clone()),
                    fallback_reason: fallback.as_ref().map(ToString::to_string),
                }
            }
        };

        // The tokens first: if a later write fails, the caller still has them.
        let mut vms = Vec::with_capacity(rendered.vms.len());
        for vm in &rendered.vms {
            let budget = vm.user_data.budget();
            let who = vm
                .vm
                .as_deref()
                .map(|v| format!("{v}: "))
                .unwrap_or_default();
            let _ = writeln!(log, "{who}{budget}");
            let whose = vm
                .vm
                .as_deref()
                .map(|v| format!("`{v}`'s "))
                .unwrap_or("the ".into());
            let token_file = match &self.token_out {
                Some(template) => {
                    let path = PathBuf::from(
                        template.replace(VM_PLACEHOLDER, vm.vm.as_deref().unwrap_or(&vm.name)),
                    );
                    write_private(&path, format!("{}\n", vm.token).as_bytes(), "the token")?;
                    let _ = writeln!(log, "wrote {whose}token to `{}`", path.display());
                    Some(path)
                }
                None if !vm.token_generated => match &self.token {
                    TokenSource::File(path) => Some(path.clone()),
                    TokenSource::Generate => None,
                },
                None => None,
            };
            vms.push(VmReport {
                vm: vm.vm.clone(),
                name: vm.name.clone(),
                secret: vm.secret_name.clone(),
                token: vm.token.clone(),
                token_generated: vm.token_generated,
                token_file,
                budget: budget.into(),
            });
        }
        let text = rendered.text();
        let mut inline = None;
        match &self.output {
            Some(path) => {
                write_private(path, text.as_bytes(), "the manifests")?;
                let _ = writeln!(
                    log,
                    "wrote {} objects to `{}`",
                    rendered.documents.len(),
                    path.display()
                );
            }
            None if self.json => inline = Some(text),
            None => write_out(out, text.as_bytes())?,
        }
        let report = RenderReport {
            lab: self.lab.name.clone(),
            name: options.spec.name.clone(),
            namespace: options.spec.namespace.clone(),
            arch: arch.name(),
            agent_sha256: AgentPin::of(&agent.bytes).sha256,
            agent: agent.path,
            agent_from: options.spec.agent_from.name(),
            channel: options.spec.channel.name(),
            root,
            vms,
            objects: rendered
                .documents
                .iter()
                .map(|d| format!("{}/{}", d.kind, d.name))
                .collect(),
            file: self.output.clone(),
            manifests: inline,
        };
        if self.json {
            let mut text = serde_json::to_string_pretty(&report).expect("serialize report");
            text.push('\n');
            write_out(out, text.as_bytes())?;
        }
        Ok(report)
    }
}

/// The PVC object of `--golden-pvc-json`: empty or `null` is "not found"
/// (what a backend's `kubectl get … || true` leaves).
fn read_pvc(path: &Path) -> Result<serde_json::Value, PayloadError> {
    let text = std::fs::read_to_string(path).map_err(|source| PayloadError::Read {
        what: "the golden PVC",
        path: path.to_owned(),
        source,
    })?;
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Null);
    }
    serde_json::from_str(&text).map_err(|e| {
        PayloadError::Usage(format!(
            "`--golden-pvc-json {}` is not JSON ({e}): write it with `kubectl get pvc NAME -o \
             json`",
            path.display()
        ))
    })
}
