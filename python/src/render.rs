//! `render_secret`: `labctl secret` as a function. It calls what the verb
//! calls (the generator's `lab_payload::render`, the same agent finder and
//! token generator), so `.text` is byte-identical to what `labctl secret
//! --format FORMAT` prints for the same lab, agent and token.

use crate::error::{RenderError, plain};
use crate::lab::Lab;
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::lab_payload::{self, BudgetReport, RenderOptions};
use lab_agent_cloudinit::{AgentFrom, Arch, Channel, Format, SecretMeta};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A rendered payload. `budget` is the JSON object `labctl secret --json`
/// prints as `budget`.
#[pyclass(frozen, module = "lab_agent", get_all)]
#[derive(Debug)]
pub struct Rendered {
    /// The Secret manifest (YAML or JSON).
    text: String,
    /// The cloud-init user-data as text: the MIME message cloud-init splits.
    user_data: String,
    /// Exactly what the Secret's `userdata` holds: `user_data`'s bytes, or
    /// them gzip'd with `agent_from="disk"`.
    user_data_bytes: Py<PyBytes>,
    /// `"embedded"` or `"disk"`.
    agent_from: &'static str,
    /// `"tcp"`, `"vsock"` or `"both"`: where the agent listens.
    channel: &'static str,
    /// The SHA-256 of the agent (what a `"disk"` payload pins).
    agent_sha256: String,
    /// The token the agent will require (generated unless one was given).
    token: String,
    /// Whether `token` was generated here.
    token_generated: bool,
    /// The agent binary that went in.
    agent_path: PathBuf,
    /// The lab VM's architecture: `amd64` or `arm64`.
    arch: &'static str,
    /// The VM of a lab with `[[vms]]` this payload is for; `None` in a lab
    /// of one VM.
    vm: Option<String>,
    budget_json: String,
}

fn render_error(py: Python<'_>, message: String, hint: Option<String>) -> PyErr {
    plain(py, RenderError::new_err(message), hint)
}

/// The `labctl` that `PATH` names (symlinks resolved, as `labctl` sees
/// itself), if any.
pub(crate) fn labctl_on_path() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("labctl"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .and_then(|p| std::fs::canonicalize(p).ok())
}

#[pyfunction]
#[pyo3(signature = (lab, name, namespace=None, labels=None, agent_path=None, token=None, format="yaml", arch=None, vm=None, params=None, agent_from="embedded", channel="both"))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments
pub fn render_secret(
    py: Python<'_>,
    lab: &Lab,
    name: String,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    agent_path: Option<PathBuf>,
    token: Option<String>,
    format: &str,
    arch: Option<&str>,
    vm: Option<&str>,
    params: Option<BTreeMap<String, String>>,
    agent_from: &str,
    channel: &str,
) -> PyResult<Rendered> {
    let agent_from = agent_from
        .parse::<AgentFrom>()
        .map_err(|e| plain(py, PyValueError::new_err(e), None))?;
    let channel = channel
        .parse::<Channel>()
        .map_err(|e| plain(py, PyValueError::new_err(e), None))?;
    // As `labctl secret --vm --param`: the VM's setup and variables; the
    // model says what is wrong with either.
    let for_vm = lab
        .inner
        .for_vm(vm, &params.unwrap_or_default())
        .map_err(|e| plain(py, PyValueError::new_err(e.to_string()), None))?;
    let format = match format {
        "yaml" => Format::Yaml,
        "json" => Format::Json,
        other => {
            let msg = format!("format must be \"yaml\" or \"json\", not {other:?}");
            return Err(plain(py, PyValueError::new_err(msg), None));
        }
    };
    let meta = SecretMeta {
        name,
        namespace,
        labels: labels.unwrap_or_default(),
        annotations: Default::default(),
    };
    meta.validate()
        .map_err(|e| render_error(py, e.to_string(), e.hint().map(str::to_owned)))?;
    // As `labctl secret`: `arch`, else the given agent's, else amd64.
    let arch = arch
        .map(|name| name.parse::<Arch>())
        .transpose()
        .map_err(|e| plain(py, PyValueError::new_err(e.to_string()), None))?;
    let hint = |e: &agent_bin::AgentBinError| e.hint_giving("`agent_path=PATH`");
    let arch = lab_payload::payload_arch(arch, agent_path.as_deref())
        .map_err(|e| render_error(py, e.to_string(), e.hint()))?;
    // Without `agent_path`: where `labctl secret` (the `labctl` on PATH)
    // finds it, not beside this interpreter.
    let agent = match &agent_path {
        Some(path) => agent_bin::load(Some(path), Linkage::Static(arch)),
        None => agent_bin::load_as_labctl(labctl_on_path().as_deref(), Linkage::Static(arch)),
    }
    .map_err(|e| render_error(py, e.to_string(), hint(&e)))?;
    let (token, token_generated) = match token {
        Some(t) => (t, false),
        None => (
            lab_agent_cloudinit::token::generate().map_err(|e| {
                render_error(
                    py,
                    format!("failed to get random bytes for the token: {e}"),
                    None,
                )
            })?,
            true,
        ),
    };
    let opts = RenderOptions {
        arch,
        meta,
        format,
        serial_autologin: true,
        agent_from,
        channel,
    };
    let lab = &for_vm;
    let rendered = py
        .detach(|| lab_payload::render(lab, &agent, &token, &opts))
        .map_err(|e| render_error(py, e.to_string(), e.hint().map(str::to_owned)))?;
    let budget = BudgetReport::from(rendered.user_data.budget());
    Ok(Rendered {
        text: rendered.manifest,
        budget_json: serde_json::to_string(&budget).expect("a budget serializes"),
        user_data_bytes: PyBytes::new(py, rendered.user_data.as_bytes()).unbind(),
        user_data: rendered.user_data.into_string(),
        agent_from: agent_from.name(),
        channel: channel.name(),
        agent_sha256: lab_agent_cloudinit::AgentPin::of(&agent.bytes).sha256,
        token,
        token_generated,
        agent_path: agent.path,
        arch: arch.name(),
        vm: for_vm.vm_env.get(lab_agent_proto::lab::LAB_VM_ENV).cloned(),
    })
}
