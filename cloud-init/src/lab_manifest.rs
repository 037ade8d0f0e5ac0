//! A lab rendered into every object of its VM, or of its session (feature
//! `fs`): the inputs checked whole ([`manifest::plan`]), then for each VM
//! its payload and Secret through [`lab_payload::render`] (the one payload
//! renderer: `labctl secret` makes the same bytes) and its
//! `VirtualMachine`, with the NetworkPolicy and the session's Service.
//! `labctl render` and the Python package's `render_vm`/`render_session`
//! call [`render`], so both print the same text.

use crate::Format;
use crate::agent_bin::AgentBinary;
use crate::lab_payload::{self, RenderLabError, RenderOptions};
use crate::manifest::{self, Document, LabShape, ManifestSpec, Plan, RootChoice};
use crate::payload::UserData;
use crate::secret::render_secret;
use lab_agent_proto::lab::Lab;
use std::collections::BTreeMap;

/// How to render, beyond the lab and the agent.
#[derive(Debug, Clone)]
pub struct ManifestOptions {
    pub spec: ManifestSpec,
    /// One VM of a session (`--vm`): its Secret and VM, and the session's
    /// objects; `None`: every VM.
    pub vm: Option<String>,
    /// `LAB_PARAM_<KEY>` for every VM's setup and checks.
    pub params: BTreeMap<String, String>,
    /// The token of a lab of one VM, or of the one VM asked for; `None`:
    /// a new one per VM.
    pub token: Option<String>,
    pub serial_autologin: bool,
}

/// One VM's payload, beside the objects.
#[derive(Debug)]
pub struct RenderedVm {
    /// Its `[[vms]]` entry; `None` in a lab of one VM.
    pub vm: Option<String>,
    /// The `VirtualMachine`'s name and its Secret's.
    pub name: String,
    pub secret_name: String,
    pub token: String,
    pub token_generated: bool,
    pub user_data: UserData,
}

/// Every object, in the order to apply them, and each VM's payload.
#[derive(Debug)]
pub struct RenderedManifests {
    pub documents: Vec<Document>,
    pub vms: Vec<RenderedVm>,
    /// The root the VMs boot, and why not the golden when it was asked for.
    pub root: RootChoice,
}

impl RenderedManifests {
    /// The objects as one YAML stream (`labctl render`'s output).
    pub fn text(&self) -> String {
        manifest::join(&self.documents)
    }
}

/// Checks `opts` against `lab` and each other (the VM asked for, the
/// parameters, every pair of inputs): what [`render`] does first, and what
/// a caller may do before it finds an agent.
pub fn plan(lab: &Lab, opts: &ManifestOptions) -> Result<Plan, RenderLabError> {
    let names = lab.vm_names();
    // `--vm` and `--param` as `labctl secret` checks them.
    if opts.vm.is_some() || names.is_empty() {
        lab.for_vm(opts.vm.as_deref(), &opts.params)?;
    } else if opts.token.is_some() && names.len() > 1 {
        return Err(manifest::ManifestError::Conflict {
            first: "a given token".into(),
            second: format!(
                "lab `{}` of {} VMs ({})",
                lab.name,
                names.len(),
                names.join(", ")
            ),
            why: "each VM of a session has its own token: render one VM with `--vm NAME` to \
                  give its token, or let render make one per VM"
                .into(),
        }
        .into());
    }
    let shape = LabShape {
        lab: &lab.name,
        vms: names,
        only: opts.vm.as_deref(),
        min_root_bytes: lab.readiness.min_root_bytes,
        params: &opts.params,
    };
    Ok(manifest::plan(&opts.spec, &shape)?)
}

/// Renders `lab`'s objects with `agent` (the agent the payloads embed or
/// pin).
pub fn render(
    lab: &Lab,
    agent: &AgentBinary,
    opts: &ManifestOptions,
) -> Result<RenderedManifests, RenderLabError> {
    let plan = plan(lab, opts)?;
    let mut secrets = Vec::with_capacity(plan.vms.len());
    let mut vms = Vec::with_capacity(plan.vms.len());
    for vm in &plan.vms {
        let mut params = opts.params.clone();
        params.extend(vm.params.clone());
        let for_vm = lab
            .for_vm(vm.vm.as_deref(), &params)
            .map_err(RenderLabError::from)?;
        let (token, token_generated) = match &opts.token {
            Some(token) => (token.clone(), false),
            None => (
                crate::token::generate().map_err(RenderLabError::Random)?,
                true,
            ),
        };
        let payload_opts = RenderOptions {
            arch: opts.spec.arch,
            meta: vm.secret.clone(),
            format: Format::Yaml,
            serial_autologin: opts.serial_autologin,
            agent_from: opts.spec.agent_from,
            channel: opts.spec.channel,
        };
        let rendered = lab_payload::render(&for_vm, agent, &token, &payload_opts)?;
        // The same Secret as JSON, for callers that want objects; only
        // base64 again, the payload is rendered once.
        let meta = lab_payload::secret_meta(&for_vm, &vm.secret);
        let json = render_secret(&rendered.user_data, &meta, Format::Json)?;
        secrets.push(Document {
            kind: "Secret",
            name: vm.secret.name.clone(),
            vm: vm.vm.clone(),
            yaml: rendered.manifest,
            json: serde_json::from_str(&json).expect("the Secret's JSON parses"),
        });
        vms.push(RenderedVm {
            vm: vm.vm.clone(),
            name: vm.name.clone(),
            secret_name: vm.secret.name.clone(),
            token,
            token_generated,
            user_data: rendered.user_data,
        });
    }
    Ok(RenderedManifests {
        documents: plan.documents(secrets),
        vms,
        root: plan.root,
    })
}
