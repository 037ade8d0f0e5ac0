//! Every Kubernetes object of a lab's VM, or of a session of several, from
//! one set of inputs ([`ManifestSpec`]), so that they cannot disagree: the
//! Secret (rendered by [`crate::lab_payload`], handed in), the
//! `VirtualMachine` that takes its user-data from it (`vm.rs`), and the
//! NetworkPolicy and the session's headless Service (`network.rs`). Pure: no
//! I/O; the edge that reads a lab and renders its payloads is
//! [`crate::lab_manifest`].
//!
//! [`plan`] checks the inputs against each other first, so a mismatch is an
//! error on the author's machine ([`ManifestError::Conflict`] names both
//! sides) rather than a VM that never becomes ready in the cluster; and it
//! picks the root disk ([`golden`]: the golden PVC when it is usable, else
//! the containerDisk, and why).
//!
//! The KubeVirt fields are those of kubevirt/kubevirt's Go types
//! (`staging/src/kubevirt.io/api/core/v1/`, `types.go` and `schema.go`),
//! cited where each is written.

pub mod golden;
mod network;
pub mod quantity;
mod vm;

pub use golden::{GOLDEN_IMAGE_ANNOTATION, Reason, Unusable, golden_unusable_reason};

use crate::arch::Arch;
use crate::k8s_names;
use crate::secret::SecretMeta;
use crate::spec::{AgentFrom, Channel};
use crate::yaml::{self, Node};
use quantity::Quantity;
use std::collections::BTreeMap;
use std::fmt;

/// The label on every object of one render (VMs, their pods, Secrets, the
/// Service, the policy), valued `--name`: what the NetworkPolicy and the
/// Service select. The `lab-agent/` prefix is the renderer's own.
pub const SESSION_LABEL: &str = "lab-agent/session";
/// The label naming a session VM's `[[vms]]` entry.
pub const VM_LABEL: &str = "lab-agent/vm";
/// The prefix of the renderer's labels; a `--label` may not use it.
pub const LABEL_PREFIX: &str = "lab-agent/";
/// The parameter a session's VMs get: the DNS domain their names resolve
/// in (`$LAB_PARAM_SESSION_DOMAIN`).
pub const SESSION_DOMAIN_PARAM: &str = "SESSION_DOMAIN";
/// The Secret of VM `NAME` is `NAME` + this.
pub const SECRET_SUFFIX: &str = "-userdata";

/// The volume that brings the agent's disk (`labctl agent-disk`) to a VM
/// whose payload pins its agent (`--agent-disk`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentDiskVolume {
    /// `containerdisk:IMAGE`: the pushed `lab-agent.containerdisk.tar`.
    ContainerDisk(String),
    /// `configmap:NAME`: the ConfigMap `lab-agent.configmap.yaml`, in the
    /// VM's namespace.
    ConfigMap(String),
}

impl std::str::FromStr for AgentDiskVolume {
    type Err = String;
    fn from_str(s: &str) -> Result<AgentDiskVolume, String> {
        match s.split_once(':') {
            Some(("containerdisk", image)) if !image.is_empty() => {
                Ok(AgentDiskVolume::ContainerDisk(image.to_owned()))
            }
            Some(("configmap", name)) if !name.is_empty() => {
                Ok(AgentDiskVolume::ConfigMap(name.to_owned()))
            }
            _ => Err(format!(
                "the agent's disk must be `containerdisk:IMAGE` or `configmap:NAME`, not {s:?}"
            )),
        }
    }
}

impl fmt::Display for AgentDiskVolume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentDiskVolume::ContainerDisk(image) => write!(f, "containerdisk:{image}"),
            AgentDiskVolume::ConfigMap(name) => write!(f, "configmap:{name}"),
        }
    }
}

/// Who may reach the agents' port: the backend's pods, by namespace and/or
/// labels (a NetworkPolicy peer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backend {
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
}

impl Backend {
    fn is_empty(&self) -> bool {
        self.namespace.is_none() && self.labels.is_empty()
    }
}

/// One render's inputs, beyond the lab.
#[derive(Debug, Clone)]
pub struct ManifestSpec {
    /// The VM's name, or the session's (its VMs are `NAME-VM`): a DNS-1123
    /// label.
    pub name: String,
    pub namespace: Option<String>,
    /// The caller's labels, on every object and the VMs' pods.
    pub labels: BTreeMap<String, String>,
    pub arch: Arch,
    pub agent_from: AgentFrom,
    pub agent_disk: Option<AgentDiskVolume>,
    pub channel: Channel,
    /// The guest's containerDisk image: the root, or the golden's original
    /// and fallback.
    pub root_image: String,
    /// The golden PVC to boot from (`--golden-pvc`), taken as usable.
    pub golden_pvc: Option<String>,
    /// The golden PVC as the API returned it (`--golden-pvc-json`), judged
    /// by [`golden_unusable_reason`]; `Some(Null)`: not found.
    pub golden_observed: Option<serde_json::Value>,
    pub cpus: u32,
    /// The guest's memory, a quantity (`4Gi`).
    pub memory: String,
    pub backend: Backend,
    /// The cluster's DNS domain (`cluster.local`): a session's domain.
    pub cluster_domain: String,
}

/// What of the lab the plan needs.
#[derive(Debug, Clone)]
pub struct LabShape<'a> {
    pub lab: &'a str,
    /// `[[vms]]`' names; empty for a lab of one VM.
    pub vms: Vec<&'a str>,
    /// The one VM of a session to render (`--vm`).
    pub only: Option<&'a str>,
    /// `[readiness] min_root_bytes`.
    pub min_root_bytes: Option<u64>,
    /// The caller's parameters (`--param`), checked against the session's.
    pub params: &'a BTreeMap<String, String>,
}

/// Why the inputs cannot make objects that work together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// Two inputs that each make sense and together make a VM that cannot
    /// work: both named, and why.
    #[error("{first} and {second} cannot go together: {why}")]
    Conflict {
        first: String,
        second: String,
        why: String,
    },
    #[error("invalid {what} `{value}`: {problem}")]
    Invalid {
        what: &'static str,
        value: String,
        problem: String,
    },
}

fn conflict(
    first: impl Into<String>,
    second: impl Into<String>,
    why: impl Into<String>,
) -> ManifestError {
    ManifestError::Conflict {
        first: first.into(),
        second: second.into(),
        why: why.into(),
    }
}

fn invalid(what: &'static str, value: &str, problem: impl Into<String>) -> ManifestError {
    ManifestError::Invalid {
        what,
        value: value.escape_debug().to_string(),
        problem: problem.into(),
    }
}

/// The root disk the VMs boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootChoice {
    /// The golden PVC, under a copy-on-write layer each.
    Golden { claim: String },
    /// The containerDisk; `fallback`: the golden asked for, and why not.
    ContainerDisk {
        image: String,
        fallback: Option<Unusable>,
    },
}

/// One VM of the render.
#[derive(Debug, Clone)]
pub struct VmPlan {
    /// Its `[[vms]]` entry; `None` in a lab of one VM.
    pub vm: Option<String>,
    /// The `VirtualMachine`'s name.
    pub name: String,
    /// Its Secret's metadata (the lab's readiness annotation is the
    /// payload renderer's to add).
    pub secret: SecretMeta,
    /// Parameters the render adds to the caller's (the session's domain).
    pub params: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
}

/// Checked inputs and the objects they make.
#[derive(Debug, Clone)]
pub struct Plan {
    pub vms: Vec<VmPlan>,
    pub root: RootChoice,
    spec: ManifestSpec,
    /// A session: the Service, `hostname`/`subdomain`, the peers' rule.
    session: bool,
}

/// One object, as YAML (what `labctl render` prints) and as JSON.
#[derive(Debug, Clone)]
pub struct Document {
    pub kind: &'static str,
    pub name: String,
    /// The `[[vms]]` entry a Secret or VM is for.
    pub vm: Option<String>,
    pub yaml: String,
    pub json: serde_json::Value,
}

impl Document {
    fn of(kind: &'static str, name: &str, vm: Option<&str>, node: &Node) -> Document {
        Document {
            kind,
            name: name.to_owned(),
            vm: vm.map(str::to_owned),
            yaml: yaml::document(node),
            json: node.to_json(),
        }
    }
}

/// The documents as one YAML stream, separated by `---` lines.
pub fn join(documents: &[Document]) -> String {
    let texts: Vec<&str> = documents.iter().map(|d| d.yaml.as_str()).collect();
    texts.join("---\n")
}

/// Checks `spec` against itself and the lab, and names the objects.
pub fn plan(spec: &ManifestSpec, shape: &LabShape<'_>) -> Result<Plan, ManifestError> {
    let session = !shape.vms.is_empty();
    check_names(spec, shape, session)?;
    check_agent_disk(spec)?;
    check_labels(spec)?;
    check_channel(spec)?;
    let cores = spec.cpus;
    if cores == 0 {
        return Err(invalid("CPU count", "0", "give the VM at least 1 core"));
    }
    match Quantity::parse(&spec.memory) {
        Ok(q) if !q.is_zero() => {}
        Ok(_) => return Err(invalid("memory", &spec.memory, "is zero")),
        Err(problem) => return Err(invalid("memory", &spec.memory, problem)),
    }
    let root = choose_root(spec, shape)?;

    let mut common = spec.labels.clone();
    common.insert(SESSION_LABEL.into(), spec.name.clone());
    let vm_names: Vec<Option<&str>> = if session {
        shape
            .vms
            .iter()
            .copied()
            .filter(|v| shape.only.is_none_or(|o| o == *v))
            .map(Some)
            .collect()
    } else {
        vec![None]
    };
    let mut params = BTreeMap::new();
    if session {
        let domain = session_domain(spec);
        if let Some(given) = shape.params.get(SESSION_DOMAIN_PARAM) {
            return Err(conflict(
                format!("`--param {SESSION_DOMAIN_PARAM}={given}`"),
                format!(
                    "the session's domain `{domain}` (from `--name`, `--namespace`, `--cluster-domain`)"
                ),
                "render gives every VM of a session the domain its names resolve in; leave the \
                 parameter out",
            ));
        }
        params.insert(SESSION_DOMAIN_PARAM.to_owned(), domain);
    }
    let vms = vm_names
        .into_iter()
        .map(|vm| {
            let name = match vm {
                Some(vm) => format!("{}-{vm}", spec.name),
                None => spec.name.clone(),
            };
            let mut labels = common.clone();
            if let Some(vm) = vm {
                labels.insert(VM_LABEL.into(), vm.to_owned());
            }
            VmPlan {
                vm: vm.map(str::to_owned),
                secret: SecretMeta {
                    name: format!("{name}{SECRET_SUFFIX}"),
                    namespace: spec.namespace.clone(),
                    labels: labels.clone(),
                    annotations: BTreeMap::new(),
                },
                name,
                params: params.clone(),
                labels,
            }
        })
        .collect();
    Ok(Plan {
        vms,
        root,
        spec: spec.clone(),
        session,
    })
}

impl Plan {
    /// The objects in the order to apply them: the policy first (so no VM
    /// runs unprotected), the Service, then each VM's Secret (`secrets`,
    /// in [`Plan::vms`]' order, as [`crate::lab_payload`] rendered them)
    /// and `VirtualMachine`.
    pub fn documents(&self, secrets: Vec<Document>) -> Vec<Document> {
        assert_eq!(secrets.len(), self.vms.len(), "one Secret per VM");
        let mut docs = vec![Document::of(
            "NetworkPolicy",
            &self.spec.name,
            None,
            &network::policy(&self.spec, self.session),
        )];
        if self.session {
            docs.push(Document::of(
                "Service",
                &self.spec.name,
                None,
                &network::service(&self.spec),
            ));
        }
        for (vm, secret) in self.vms.iter().zip(secrets) {
            docs.push(secret);
            docs.push(Document::of(
                "VirtualMachine",
                &vm.name,
                vm.vm.as_deref(),
                &vm::virtual_machine(&self.spec, vm, &self.root, self.session),
            ));
        }
        docs
    }
}

/// `NAME.NAMESPACE.svc.CLUSTER_DOMAIN`: where a session's VMs resolve
/// (`HOSTNAME.SUBDOMAIN.NAMESPACE.svc.CLUSTER_DOMAIN`).
fn session_domain(spec: &ManifestSpec) -> String {
    format!(
        "{}.{}.svc.{}",
        spec.name,
        spec.namespace.as_deref().unwrap_or_default(),
        spec.cluster_domain
    )
}

fn check_names(
    spec: &ManifestSpec,
    shape: &LabShape<'_>,
    session: bool,
) -> Result<(), ManifestError> {
    k8s_names::check_dns_label(&spec.name).map_err(|p| invalid("name", &spec.name, p))?;
    if let Some(ns) = &spec.namespace {
        k8s_names::check_namespace(ns).map_err(|p| invalid("namespace", ns, p))?;
    }
    if !session {
        return Ok(());
    }
    // The Service is named like the session and must be a DNS-1035 label.
    if !spec.name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(invalid(
            "name",
            &spec.name,
            format!(
                "names a session's headless Service, which must start with a letter (lab `{}` \
                 has several VMs)",
                shape.lab
            ),
        ));
    }
    for vm in &shape.vms {
        let name = format!("{}-{vm}", spec.name);
        if name.len() > k8s_names::MAX_LABEL {
            return Err(invalid(
                "name",
                &spec.name,
                format!(
                    "makes VM `{name}` of {} characters: a VM's name is at most {} (shorten \
                     `--name`)",
                    name.len(),
                    k8s_names::MAX_LABEL
                ),
            ));
        }
    }
    if spec.namespace.is_none() {
        return Err(conflict(
            format!(
                "a session (lab `{}` has VMs {})",
                shape.lab,
                shape.vms.join(", ")
            ),
            "no `--namespace`",
            "its VMs find each other at HOSTNAME.SESSION.NAMESPACE.svc.CLUSTER_DOMAIN, and each \
             VM's payload is given that domain: name the namespace",
        ));
    }
    k8s_names::check_object_name(&spec.cluster_domain)
        .map_err(|p| invalid("cluster domain", &spec.cluster_domain, p))
}

fn check_agent_disk(spec: &ManifestSpec) -> Result<(), ManifestError> {
    match (spec.agent_from, &spec.agent_disk) {
        (AgentFrom::Disk, None) => Err(conflict(
            "`--agent-from disk`",
            "no `--agent-disk`",
            "the payload leaves the agent out, and the VM would have no disk to take it from: \
             give `--agent-disk containerdisk:IMAGE` or `--agent-disk configmap:NAME` (`labctl \
             agent-disk` makes both)",
        )),
        (AgentFrom::Embedded, Some(disk)) => Err(conflict(
            format!("`--agent-disk {disk}`"),
            "`--agent-from embedded`",
            "the payload carries the agent and never reads the disk: add `--agent-from disk`, or \
             leave the disk out",
        )),
        (_, Some(AgentDiskVolume::ConfigMap(name))) => k8s_names::check_object_name(name)
            .map_err(|p| invalid("ConfigMap name of `--agent-disk`", name, p)),
        _ => Ok(()),
    }
}

fn check_labels(spec: &ManifestSpec) -> Result<(), ManifestError> {
    for (key, value) in &spec.labels {
        k8s_names::check_label_key(key).map_err(|p| invalid("label key", key, p))?;
        k8s_names::check_label_value(value).map_err(|p| invalid("label value", value, p))?;
        if key.starts_with(LABEL_PREFIX) {
            return Err(conflict(
                format!("`--label {key}={value}`"),
                format!("the label `{SESSION_LABEL}={}` render sets", spec.name),
                format!(
                    "the NetworkPolicy and the Service select the VMs by the renderer's \
                     `{LABEL_PREFIX}` labels; use a key of your own"
                ),
            ));
        }
    }
    let backend = &spec.backend;
    if let Some(ns) = &backend.namespace {
        k8s_names::check_namespace(ns).map_err(|p| invalid("backend namespace", ns, p))?;
    }
    for (key, value) in &backend.labels {
        k8s_names::check_label_key(key).map_err(|p| invalid("backend label key", key, p))?;
        k8s_names::check_label_value(value)
            .map_err(|p| invalid("backend label value", value, p))?;
    }
    // A backend selector that the VMs' own pods match would let every lab
    // VM (whose student is root) reach every other VM's agent.
    let same_namespace = backend.namespace.is_none() || backend.namespace == spec.namespace;
    let selects_vms = !backend.labels.is_empty()
        && backend
            .labels
            .iter()
            .all(|(k, v)| spec.labels.get(k) == Some(v));
    if same_namespace && selects_vms {
        let pairs = |m: &BTreeMap<String, String>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(conflict(
            format!("`--backend-label {}`", pairs(&backend.labels)),
            format!("`--label {}`", pairs(&spec.labels)),
            "the lab VMs' own pods would match the backend's selector, so every lab VM in the \
             namespace could reach the agents' port: select the backend by a label its pods alone \
             carry (and its namespace)",
        ));
    }
    Ok(())
}

fn check_channel(spec: &ManifestSpec) -> Result<(), ManifestError> {
    match (spec.channel.tcp(), spec.backend.is_empty()) {
        (true, true) => Err(conflict(
            format!("`--channel {}`", spec.channel.name()),
            "no `--backend-namespace` or `--backend-label`",
            "the NetworkPolicy opens the agent's TCP port to the backend alone, and nothing says \
             which pods are the backend's",
        )),
        (false, false) => Err(conflict(
            "`--channel vsock`",
            "`--backend-namespace`/`--backend-label`",
            "the agent listens on no network, so the policy opens no port to anyone: leave the \
             backend's selector out, or use `--channel both`",
        )),
        _ => Ok(()),
    }
}

fn choose_root(spec: &ManifestSpec, shape: &LabShape<'_>) -> Result<RootChoice, ManifestError> {
    if spec.root_image.trim().is_empty() {
        return Err(invalid("root image", &spec.root_image, "is empty"));
    }
    let container = |fallback| RootChoice::ContainerDisk {
        image: spec.root_image.clone(),
        fallback,
    };
    let Some(observed) = &spec.golden_observed else {
        return Ok(match &spec.golden_pvc {
            Some(claim) => {
                k8s_names::check_object_name(claim)
                    .map_err(|p| invalid("golden PVC name", claim, p))?;
                RootChoice::Golden {
                    claim: claim.clone(),
                }
            }
            None => container(None),
        });
    };
    let read_name = observed["metadata"]["name"].as_str();
    if let (Some(asked), Some(read)) = (&spec.golden_pvc, read_name)
        && asked != read
    {
        return Err(conflict(
            format!("`--golden-pvc {asked}`"),
            format!("`--golden-pvc-json`'s PVC `{read}`"),
            "they name two PVCs: give one of them",
        ));
    }
    let min = shape.min_root_bytes.unwrap_or(0);
    match golden_unusable_reason(Some(observed), &spec.root_image, min) {
        None => Ok(RootChoice::Golden {
            claim: read_name.unwrap_or_default().to_owned(),
        }),
        Some(Unusable {
            claim,
            reason: Reason::TooSmall { capacity, .. },
        }) => Err(conflict(
            format!(
                "golden PVC `{}` of {capacity}",
                claim.as_deref().unwrap_or_default()
            ),
            format!("lab `{}`'s `min_root_bytes = {min}`", shape.lab),
            "the root it gives is smaller than the lab needs, and the containerDisk's is smaller \
             still: use a larger golden (or lower `min_root_bytes`)",
        )),
        // A PVC not found has no name of its own: the one asked for.
        Some(mut why) => {
            why.claim = why.claim.or_else(|| spec.golden_pvc.clone());
            Ok(container(Some(why)))
        }
    }
}
