//! `render_manifests`: `labctl render` as a function (the package's
//! `render_vm` and `render_session`), and `golden_unusable_reason`. It
//! calls what the verb calls (the generator's `lab_manifest::plan` and
//! `render`, the same agent finder and token generator), so `.text` is
//! byte-identical to what `labctl render -o FILE` writes for the same lab,
//! agent and token.
//!
//! The generator's messages name `labctl render`'s flags; every error that
//! names one gets a hint with the keyword argument it is here
//! ([`keyword_hint`]), and an input that is wrong on its own is a
//! `ValueError` that starts with its keyword.

use crate::error::{RenderError, plain};
use crate::lab::Lab;
use crate::render::labctl_on_path;
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::lab_manifest::{self, ManifestOptions};
use lab_agent_cloudinit::lab_payload::{self, BudgetReport, RenderLabError};
use lab_agent_cloudinit::manifest::{
    self, AgentDiskVolume, Backend, ManifestError, ManifestSpec, RootChoice,
};
use lab_agent_cloudinit::{AgentFrom, AgentPin, Arch, Channel};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Every object of a lab's VM or session: `text` is the YAML stream
/// `labctl render` writes; `report_json` the rest (the objects as JSON in
/// apply order, each VM's name, Secret, token and budget, the root disk),
/// which `lab_agent._render_manifests` turns into typed objects.
#[pyclass(frozen, module = "lab_agent", get_all)]
#[derive(Debug)]
pub struct RenderedManifests {
    text: String,
    report_json: String,
}

/// `labctl render`'s flags, as this module's keyword arguments: for the
/// hint under a message that names one.
const KEYWORDS: &[(&str, &str)] = &[
    ("--name", "name"),
    ("--namespace", "namespace"),
    ("--label", "labels"),
    ("--vm", "vm"),
    ("--param", "params"),
    ("--arch", "arch"),
    ("--agent", "agent_path"),
    ("--agent-from", "agent_from"),
    ("--agent-disk", "agent_disk"),
    ("--channel", "channel"),
    ("--root-image", "root_image"),
    ("--golden-pvc", "golden_pvc"),
    ("--golden-pvc-json", "golden_pvc_object"),
    ("--cpus", "cpus"),
    ("--memory", "memory"),
    ("--backend-namespace", "backend_namespace"),
    ("--backend-label", "backend_labels"),
    ("--cluster-domain", "cluster_domain"),
    ("--token-file", "token"),
    ("--no-autologin", "autologin"),
];

/// "in Python, `--agent-from` is `agent_from=`, …" for each of `labctl
/// render`'s flags `message` names, in the order named; `None` if none.
fn keyword_hint(message: &str) -> Option<String> {
    let mut named: Vec<String> = Vec::new();
    for (at, _) in message.match_indices("`--") {
        let rest = &message[at + 1..];
        let end = rest[2..]
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .map_or(rest.len(), |i| i + 2);
        let flag = &rest[..end];
        if let Some((_, keyword)) = KEYWORDS.iter().find(|(f, _)| *f == flag) {
            let said = format!("`{flag}` is `{keyword}=`");
            if !named.contains(&said) {
                named.push(said);
            }
        }
    }
    (!named.is_empty()).then(|| format!("in Python, {}", named.join(", ")))
}

/// The keyword argument a [`ManifestError::Invalid`] is about.
fn invalid_keyword(what: &str) -> &'static str {
    match what {
        "namespace" => "namespace",
        "label key" | "label value" => "labels",
        "backend namespace" => "backend_namespace",
        "backend label key" | "backend label value" => "backend_labels",
        "CPU count" => "cpus",
        "memory" => "memory",
        "root image" => "root_image",
        "golden PVC name" => "golden_pvc",
        "cluster domain" => "cluster_domain",
        w if w.contains("agent-disk") => "agent_disk",
        _ => "name",
    }
}

fn value_error(py: Python<'_>, message: String) -> PyErr {
    let hint = keyword_hint(&message);
    plain(py, PyValueError::new_err(message), hint)
}

/// The generator's error: a value wrong on its own (a name, a quantity,
/// the VM asked for, a parameter) is a `ValueError` starting with its
/// keyword; two that cannot go together a `RenderError` naming both; the
/// rest (the lab's files, the payload) a `RenderError` with the
/// generator's hint.
fn lab_error(py: Python<'_>, e: RenderLabError) -> PyErr {
    match &e {
        RenderLabError::Manifest(ManifestError::Invalid { what, .. }) => {
            value_error(py, format!("{}: {e}", invalid_keyword(what)))
        }
        RenderLabError::Vm(_) => value_error(py, e.to_string()),
        RenderLabError::Manifest(ManifestError::Conflict { .. }) => {
            let message = e.to_string();
            let hint = keyword_hint(&message);
            plain(py, RenderError::new_err(message), hint)
        }
        _ => {
            let hint = e.hint().map(str::to_owned);
            plain(py, RenderError::new_err(e.to_string()), hint)
        }
    }
}

fn parse_pvc(py: Python<'_>, json: &str, keyword: &str) -> PyResult<Value> {
    serde_json::from_str(json).map_err(|e| {
        let msg = format!("{keyword} is not a JSON object as the API returns one: {e}");
        plain(py, PyValueError::new_err(msg), None)
    })
}

#[pyfunction]
#[pyo3(signature = (lab, name, root_image, session, namespace=None, labels=None, vm=None, params=None, arch=None, agent_path=None, agent_from="embedded", agent_disk=None, channel="both", golden_pvc=None, golden_pvc_json=None, cpus=2, memory="4Gi", backend_namespace=None, backend_labels=None, cluster_domain="cluster.local", token=None, autologin=true))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments
pub fn render_manifests(
    py: Python<'_>,
    lab: &Lab,
    name: String,
    root_image: String,
    session: bool,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    vm: Option<String>,
    params: Option<BTreeMap<String, String>>,
    arch: Option<&str>,
    agent_path: Option<PathBuf>,
    agent_from: &str,
    agent_disk: Option<&str>,
    channel: &str,
    golden_pvc: Option<String>,
    golden_pvc_json: Option<&str>,
    cpus: i64,
    memory: &str,
    backend_namespace: Option<String>,
    backend_labels: Option<BTreeMap<String, String>>,
    cluster_domain: &str,
    token: Option<String>,
    autologin: bool,
) -> PyResult<RenderedManifests> {
    let lab = &lab.inner;
    // The lab's shape decides the function: a session's VMs need their
    // Service, domain and one token each, which render_vm does not say.
    let vms = lab.vm_names();
    if session && vms.is_empty() {
        let msg = format!(
            "lab `{}` is one VM (it has no [[vms]]): render it with render_vm",
            lab.name
        );
        return Err(value_error(py, msg));
    }
    if !session && !vms.is_empty() {
        let msg = format!(
            "lab `{}` is a session of VMs {}: render it with render_session (`vm=` for one of them)",
            lab.name,
            vms.join(", ")
        );
        return Err(value_error(py, msg));
    }
    let agent_from = agent_from
        .parse::<AgentFrom>()
        .map_err(|e| value_error(py, e))?;
    let channel = channel.parse::<Channel>().map_err(|e| value_error(py, e))?;
    let agent_disk = agent_disk
        .map(|s| {
            s.parse::<AgentDiskVolume>().map_err(|_| {
                value_error(
                    py,
                    format!(
                        "agent_disk must be \"containerdisk:IMAGE\" or \"configmap:NAME\", not {s:?}"
                    ),
                )
            })
        })
        .transpose()?;
    let arch = arch
        .map(|a| a.parse::<Arch>())
        .transpose()
        .map_err(|e| value_error(py, format!("arch: {e}")))?;
    let cpus = u32::try_from(cpus)
        .map_err(|_| value_error(py, format!("cpus: {cpus} is not a count of cores")))?;
    let golden_observed = golden_pvc_json
        .map(|j| parse_pvc(py, j, "golden_pvc_object"))
        .transpose()?;
    let spec = ManifestSpec {
        name,
        namespace,
        labels: labels.unwrap_or_default(),
        // Below: `arch`, else the agent's.
        arch: Arch::default(),
        agent_from,
        agent_disk,
        channel,
        root_image,
        golden_pvc,
        golden_observed,
        cpus,
        memory: memory.to_owned(),
        backend: Backend {
            namespace: backend_namespace,
            labels: backend_labels.unwrap_or_default(),
        },
        cluster_domain: cluster_domain.to_owned(),
    };
    let mut options = ManifestOptions {
        spec,
        vm,
        params: params.unwrap_or_default(),
        token,
        serial_autologin: autologin,
    };
    // As `labctl render`: every pair of inputs checked before an agent is
    // looked for.
    lab_manifest::plan(lab, &options).map_err(|e| lab_error(py, e))?;
    let render_error = |message: String, hint: Option<String>| {
        let hint = hint.or_else(|| keyword_hint(&message));
        plain(py, RenderError::new_err(message), hint)
    };
    let arch = lab_payload::payload_arch(arch, agent_path.as_deref())
        .map_err(|e| render_error(e.to_string(), e.hint()))?;
    options.spec.arch = arch;
    let agent = match &agent_path {
        Some(path) => agent_bin::load(Some(path), Linkage::Static(arch)),
        None => agent_bin::load_as_labctl(labctl_on_path().as_deref(), Linkage::Static(arch)),
    }
    .map_err(|e| render_error(e.to_string(), e.hint_giving("`agent_path=PATH`")))?;
    let (rendered, objects) = py
        .detach(|| {
            let rendered = lab_manifest::render(lab, &agent, &options)?;
            let objects: Vec<&Value> = rendered.documents.iter().map(|d| &d.json).collect();
            let objects = serde_json::to_value(objects).expect("objects serialize");
            Ok((rendered, objects))
        })
        .map_err(|e| lab_error(py, e))?;
    let root = match &rendered.root {
        RootChoice::Golden { claim } => json!({"disk": "golden", "claim": claim}),
        RootChoice::ContainerDisk { image, fallback } => json!({
            "disk": "containerdisk",
            "image": image,
            "fallback_reason": fallback.as_ref().map(ToString::to_string),
        }),
    };
    let vms: Vec<Value> = rendered
        .vms
        .iter()
        .map(|vm| {
            let budget = BudgetReport::from(vm.user_data.budget());
            json!({
                "vm": vm.vm,
                "name": vm.name,
                "secret_name": vm.secret_name,
                "token": vm.token,
                "token_generated": vm.token_generated,
                "user_data_size": budget.secret_bytes,
                "budget": budget,
            })
        })
        .collect();
    let report = json!({
        "lab": lab.name,
        "name": options.spec.name,
        "namespace": options.spec.namespace,
        "arch": arch.name(),
        "agent_path": agent.path,
        "agent_from": agent_from.name(),
        "agent_sha256": AgentPin::of(&agent.bytes).sha256,
        "channel": channel.name(),
        "root": root,
        "vms": vms,
        "objects": objects,
    });
    Ok(RenderedManifests {
        text: rendered.text(),
        report_json: report.to_string(),
    })
}

/// The golden disk's verdict (`manifest::golden_unusable_reason`): `None`
/// when the PVC object (`pvc_json`, as `kubectl get pvc NAME -o json`
/// prints it; `null`: not found) can be `image`'s root for a lab that
/// needs `min_bytes`, else the one sentence saying why not.
#[pyfunction]
pub fn golden_unusable_reason(
    py: Python<'_>,
    pvc_json: &str,
    image: &str,
    min_bytes: i128,
) -> PyResult<Option<String>> {
    let min_bytes = u64::try_from(min_bytes).map_err(|_| {
        let msg = format!("min_bytes: {min_bytes} is not a size in bytes (0 to 2**64 - 1)");
        plain(py, PyValueError::new_err(msg), None)
    })?;
    let pvc = parse_pvc(py, pvc_json, "pvc")?;
    Ok(manifest::golden_unusable_reason(Some(&pvc), image, min_bytes).map(|u| u.to_string()))
}
