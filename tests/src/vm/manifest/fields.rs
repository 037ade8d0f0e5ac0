//! The rendered objects read field by field, strictly: every field is
//! taken by the reader or named in an error ([`Fields::end`]), so a field
//! the renderer adds fails the mapping until the mapping says what it
//! becomes in the guest. Pure: no I/O.

use super::ManifestError;
use crate::vm::Arch;
use base64::Engine as _;
use serde_json::{Map, Value};
use std::time::Duration;

/// One JSON object being read: the keys taken so far, and its path in the
/// object (`spec.template.spec.domain`) for errors.
pub(super) struct Fields<'a> {
    path: String,
    map: &'a Map<String, Value>,
    taken: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    pub(super) fn of(path: impl Into<String>, value: &'a Value) -> Result<Self, ManifestError> {
        let path = path.into();
        match value {
            Value::Object(map) => Ok(Fields {
                path,
                map,
                taken: Vec::new(),
            }),
            other => Err(ManifestError::Unsupported {
                path,
                found: summary(other),
                expected: "an object".into(),
            }),
        }
    }

    /// `PATH.key`.
    pub(super) fn path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    pub(super) fn opt(&mut self, key: &'static str) -> Option<&'a Value> {
        self.taken.push(key);
        self.map.get(key)
    }

    pub(super) fn req(&mut self, key: &'static str, why: &str) -> Result<&'a Value, ManifestError> {
        self.opt(key).ok_or_else(|| ManifestError::Missing {
            path: self.path(key),
            why: why.to_owned(),
        })
    }

    pub(super) fn req_str(
        &mut self,
        key: &'static str,
        why: &str,
    ) -> Result<&'a str, ManifestError> {
        let v = self.req(key, why)?;
        v.as_str().ok_or_else(|| ManifestError::Unsupported {
            path: self.path(key),
            found: summary(v),
            expected: "a string".into(),
        })
    }

    pub(super) fn opt_str(&mut self, key: &'static str) -> Result<Option<&'a str>, ManifestError> {
        match self.opt(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(ManifestError::Unsupported {
                path: self.path(key),
                found: summary(v),
                expected: "a string".into(),
            }),
        }
    }

    pub(super) fn opt_bool(&mut self, key: &'static str) -> Result<Option<bool>, ManifestError> {
        match self.opt(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ManifestError::Unsupported {
                path: self.path(key),
                found: summary(v),
                expected: "true or false".into(),
            }),
        }
    }

    /// `key` must be `expected` (a string); `what` says what it means.
    pub(super) fn expect_str(
        &mut self,
        key: &'static str,
        expected: &str,
        what: &str,
    ) -> Result<(), ManifestError> {
        let found = self.req_str(key, what)?;
        if found == expected {
            Ok(())
        } else {
            Err(ManifestError::Unsupported {
                path: self.path(key),
                found: format!("`{found}`"),
                expected: format!("`{expected}` ({what})"),
            })
        }
    }

    /// A list under `key`: each element with its own path (`key[i]`).
    pub(super) fn list(
        &mut self,
        key: &'static str,
        why: &str,
    ) -> Result<Vec<(String, &'a Value)>, ManifestError> {
        let path = self.path(key);
        match self.req(key, why)? {
            Value::Array(items) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("{path}[{i}]"), v))
                .collect()),
            other => Err(ManifestError::Unsupported {
                path,
                found: summary(other),
                expected: "a list".into(),
            }),
        }
    }

    /// An object under `key` whose fields are its own business (labels,
    /// annotations: the cluster's, not the guest's): only its shape is
    /// checked, a map of strings.
    pub(super) fn string_map(&mut self, key: &'static str) -> Result<(), ManifestError> {
        let path = self.path(key);
        let Some(v) = self.opt(key) else {
            return Ok(());
        };
        let ok = v
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string));
        if ok {
            Ok(())
        } else {
            Err(ManifestError::Unsupported {
                path,
                found: summary(v),
                expected: "a map of strings".into(),
            })
        }
    }

    /// Every key not taken is an error, the first one named.
    pub(super) fn end(self) -> Result<(), ManifestError> {
        match self
            .map
            .iter()
            .find(|(k, _)| !self.taken.contains(&k.as_str()))
        {
            None => Ok(()),
            Some((key, value)) => Err(ManifestError::Unmapped {
                path: self.path(key),
                found: summary(value),
            }),
        }
    }
}

/// A value, short, for an error message.
pub(super) fn summary(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

/// What the harness boots as the VM's root disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootPlan {
    /// A `containerDisk` volume: KubeVirt boots a copy-on-write layer over
    /// the image's disk; the harness boots its own guest image (kernel,
    /// initrd, root filesystem) under an overlay, if the image is the one
    /// the cluster's guest image is named.
    ContainerDisk { image: String },
    /// An `ephemeral` PVC volume (the golden): a copy-on-write layer over
    /// the claim's disk, the claim mounted read-only; the harness boots an
    /// overlay on the claim's disk (`BootOptions::root_base`).
    Ephemeral { claim: String },
}

/// A disk after the root and the NoCloud seed, in `disks:` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskPlan {
    pub name: String,
    /// The `disks:` entry's `serial`: the guest's `/dev/disk/by-id/virtio-SERIAL`.
    pub serial: Option<String>,
    pub source: VolumePlan,
}

/// Where a disk's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumePlan {
    /// The image's one file under `/disk/` (or `path`).
    ContainerDisk { image: String, path: Option<String> },
    /// The ConfigMap's keys in an ISO labelled `label` (KubeVirt's default
    /// `cfgdata` when the volume names none).
    ConfigMap { name: String, label: String },
}

/// Everything the harness takes from a `VirtualMachine`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmPlan {
    pub name: String,
    pub namespace: Option<String>,
    pub arch: Arch,
    /// `cpu.cores` (one socket, one thread per core).
    pub cpus: u32,
    pub memory_mib: u32,
    /// The guest's `local-hostname`: `hostname`, else the name up to its
    /// first dot (KubeVirt's `dns.SanitizeHostname`).
    pub hostname: String,
    /// `autoattachVSOCK`.
    pub vsock: bool,
    /// `terminationGracePeriodSeconds`: how long a power-off may take.
    pub grace: Duration,
    pub root: RootPlan,
    /// `cloudInitNoCloud.secretRef.name`: the Secret with the user-data.
    pub user_data_secret: String,
    pub disks: Vec<DiskPlan>,
}

/// Reads a `VirtualMachine` object (`kubevirt.io/v1`).
pub fn parse_vm(vm: &Value) -> Result<VmPlan, ManifestError> {
    let mut top = Fields::of("", vm)?;
    top.expect_str("apiVersion", "kubevirt.io/v1", "KubeVirt's API")?;
    top.expect_str("kind", "VirtualMachine", "a VM")?;
    let mut meta = Fields::of("metadata", top.req("metadata", "the VM's name")?)?;
    let name = meta.req_str("name", "the VM's name")?.to_owned();
    let namespace = meta.opt_str("namespace")?.map(str::to_owned);
    meta.string_map("labels")?;
    meta.end()?;

    let mut spec = Fields::of("spec", top.req("spec", "the VM's template")?)?;
    spec.expect_str(
        "runStrategy",
        "Always",
        "the VM runs once created, as the harness boots it",
    )?;
    let mut template = Fields::of("spec.template", spec.req("template", "the VM's instance")?)?;
    if let Some(m) = template.opt("metadata") {
        let mut m = Fields::of("spec.template.metadata", m)?;
        m.string_map("labels")?;
        m.end()?;
    }
    let plan = parse_instance(name, namespace, template.req("spec", "the VM's instance")?)?;
    template.end()?;
    spec.end()?;
    top.end()?;
    Ok(plan)
}

/// `spec.template.spec`: a `VirtualMachineInstanceSpec`.
fn parse_instance(
    name: String,
    namespace: Option<String>,
    v: &Value,
) -> Result<VmPlan, ManifestError> {
    let mut s = Fields::of("spec.template.spec", v)?;
    let arch_name = s.req_str(
        "architecture",
        "the machine the payload's agent is built for",
    )?;
    let arch = match arch_name {
        "amd64" => Arch::Amd64,
        "arm64" => Arch::Arm64,
        other => {
            return Err(ManifestError::Unsupported {
                path: s.path("architecture"),
                found: format!("`{other}`"),
                expected: "`amd64` or `arm64`".into(),
            });
        }
    };
    if let Some(sel) = s.opt("nodeSelector") {
        // The scheduler's business; the harness checks it agrees.
        let mut sel = Fields::of(s.path("nodeSelector"), sel)?;
        sel.expect_str(
            "kubernetes.io/arch",
            arch_name,
            "the node of the VM's architecture",
        )?;
        sel.end()?;
    }
    let hostname = match s.opt_str("hostname")? {
        Some(h) => h.to_owned(),
        None => name
            .split('.')
            .next()
            .unwrap_or_default()
            .chars()
            .take(63)
            .collect(),
    };
    let grace = match s.opt("terminationGracePeriodSeconds") {
        None => Duration::from_secs(30),
        Some(v) => Duration::from_secs(v.as_u64().ok_or_else(|| ManifestError::Unsupported {
            path: "spec.template.spec.terminationGracePeriodSeconds".into(),
            found: summary(v),
            expected: "a number of seconds".into(),
        })?),
    };
    parse_networks(&mut s)?;

    let mut domain = Fields::of(s.path("domain"), s.req("domain", "the VM's hardware")?)?;
    let cpus = match domain.opt("cpu") {
        None => 1,
        Some(cpu) => {
            let mut cpu = Fields::of(domain.path("cpu"), cpu)?;
            let path = cpu.path("cores");
            let cores = cpu.req("cores", "the VM's cores")?;
            let cores = cores
                .as_u64()
                .and_then(|c| u32::try_from(c).ok())
                .filter(|c| *c > 0)
                .ok_or_else(|| ManifestError::Unsupported {
                    path,
                    found: summary(cores),
                    expected: "a positive number".into(),
                })?;
            cpu.end()?;
            cores
        }
    };
    let mut memory = Fields::of(
        domain.path("memory"),
        domain.req("memory", "the guest's memory")?,
    )?;
    let path = memory.path("guest");
    let memory_mib = mebibytes(&path, memory.req_str("guest", "the guest's memory")?)?;
    memory.end()?;

    let mut devices = Fields::of(
        domain.path("devices"),
        domain.req("devices", "the VM's disks")?,
    )?;
    // The harness's machine always has its serial console (the log, and
    // the student's terminal); KubeVirt attaches one unless told not to.
    if devices.opt_bool("autoattachSerialConsole")? == Some(false) {
        return Err(ManifestError::Unsupported {
            path: devices.path("autoattachSerialConsole"),
            found: "false".into(),
            expected: "true (the harness's guest always has its serial console)".into(),
        });
    }
    let vsock = devices.opt_bool("autoattachVSOCK")?.unwrap_or(false);
    let iface_path = devices.path("interfaces");
    let ifaces = devices.list("interfaces", "the pod network's interface")?;
    match ifaces.as_slice() {
        [(path, iface)] => {
            let mut iface = Fields::of(path.clone(), iface)?;
            iface.expect_str("name", "default", "the pod network")?;
            Fields::of(
                iface.path("masquerade"),
                iface.req("masquerade", "NAT behind the pod's address")?,
            )?
            .end_empty()?;
            iface.end()?;
        }
        _ => {
            return Err(ManifestError::Unsupported {
                path: iface_path,
                found: format!("{} interfaces", ifaces.len()),
                expected: "one, `default`, masquerade (the harness's one NIC)".into(),
            });
        }
    }
    let disks = devices.list("disks", "the VM's disks")?;
    let disks = disks
        .into_iter()
        .map(|(path, d)| parse_disk(path, d))
        .collect::<Result<Vec<_>, _>>()?;
    devices.end()?;
    domain.end()?;

    let volumes = s.list("volumes", "what each disk holds")?;
    let mut volumes = volumes
        .into_iter()
        .map(|(path, v)| parse_volume(path, v))
        .collect::<Result<Vec<_>, _>>()?;
    s.end()?;

    // Every disk has its volume and every volume its disk (KubeVirt's
    // admission refuses either), in `disks:` order: the root first
    // (`/dev/vda`), the NoCloud seed second (the harness's `/dev/vdb`),
    // then the rest on the last PCI slots (`/dev/vdc`, …).
    let mut in_order = Vec::with_capacity(disks.len());
    for (path, disk) in &disks {
        let at = volumes
            .iter()
            .position(|(_, v)| v.name == disk.name)
            .ok_or_else(|| ManifestError::Missing {
                path: format!("spec.template.spec.volumes (for {path}, `{}`)", disk.name),
                why: "a disk without its volume".into(),
            })?;
        in_order.push((path.clone(), disk.clone(), volumes.remove(at).1));
    }
    if let Some((path, v)) = volumes.first() {
        return Err(ManifestError::Missing {
            path: format!(
                "spec.template.spec.domain.devices.disks (for {path}, `{}`)",
                v.name
            ),
            why: "a volume without its disk".into(),
        });
    }
    let mut in_order = in_order.into_iter();
    let root = match in_order.next() {
        Some((
            _,
            disk,
            Volume {
                source: Source::ContainerDisk { image, path: None },
                ..
            },
        )) if disk.serial.is_none() => RootPlan::ContainerDisk { image },
        Some((
            _,
            disk,
            Volume {
                source: Source::Ephemeral { claim },
                ..
            },
        )) if disk.serial.is_none() => RootPlan::Ephemeral { claim },
        Some((path, _, v)) => {
            return Err(ManifestError::Unsupported {
                path,
                found: format!("`{}` ({})", v.name, v.source.kind()),
                expected: "the root disk first: a containerDisk or an ephemeral PVC, \
                           no serial, no path"
                    .into(),
            });
        }
        None => {
            return Err(ManifestError::Missing {
                path: "spec.template.spec.domain.devices.disks".into(),
                why: "the VM has no disk".into(),
            });
        }
    };
    let user_data_secret = match in_order.next() {
        Some((
            _,
            disk,
            Volume {
                source: Source::NoCloud { secret },
                ..
            },
        )) if disk.serial.is_none() => secret,
        Some((path, _, v)) => {
            return Err(ManifestError::Unsupported {
                path,
                found: format!("`{}` ({})", v.name, v.source.kind()),
                expected: "the NoCloud seed second (the harness's `/dev/vdb`), no serial".into(),
            });
        }
        None => {
            return Err(ManifestError::Missing {
                path: "spec.template.spec.domain.devices.disks[1]".into(),
                why: "the payload comes in a cloudInitNoCloud volume".into(),
            });
        }
    };
    let mut rest = Vec::new();
    for (path, disk, v) in in_order {
        let source = match v.source {
            Source::ContainerDisk { image, path } => VolumePlan::ContainerDisk { image, path },
            Source::ConfigMap { name, label } => VolumePlan::ConfigMap { name, label },
            other => {
                return Err(ManifestError::Unsupported {
                    path,
                    found: format!("`{}` ({})", v.name, other.kind()),
                    expected: "after the root and the seed: a containerDisk or a configMap".into(),
                });
            }
        };
        rest.push(DiskPlan {
            name: disk.name,
            serial: disk.serial,
            source,
        });
    }
    Ok(VmPlan {
        name,
        namespace,
        arch,
        cpus,
        memory_mib,
        hostname,
        vsock,
        grace,
        root,
        user_data_secret,
        disks: rest,
    })
}

impl Fields<'_> {
    /// An object that must be `{}` (`masquerade: {}`, `pod: {}`).
    fn end_empty(self) -> Result<(), ManifestError> {
        self.end()
    }
}

/// `networks:`: the pod network alone, the harness's one NIC.
fn parse_networks(s: &mut Fields) -> Result<(), ManifestError> {
    let path = s.path("networks");
    let nets = s.list("networks", "the pod network")?;
    match nets.as_slice() {
        [(path, net)] => {
            let mut net = Fields::of(path.clone(), net)?;
            net.expect_str("name", "default", "the pod network")?;
            Fields::of(net.path("pod"), net.req("pod", "the pod network")?)?.end_empty()?;
            net.end()
        }
        _ => Err(ManifestError::Unsupported {
            path,
            found: format!("{} networks", nets.len()),
            expected: "one, the pod network (the harness's one NIC)".into(),
        }),
    }
}

#[derive(Debug, Clone)]
struct Disk {
    name: String,
    serial: Option<String>,
}

/// A `disks:` entry: a virtio disk, its name and serial. The harness
/// attaches every disk after the root read-only, where KubeVirt layers a
/// containerDisk writable (tests/vm/README.md says why that does not
/// matter to a reader); a `readOnly` or any other field is an error.
fn parse_disk(path: String, v: &Value) -> Result<(String, Disk), ManifestError> {
    let mut d = Fields::of(path.clone(), v)?;
    let name = d.req_str("name", "the volume it shows")?.to_owned();
    let serial = d.opt_str("serial")?.map(str::to_owned);
    let mut disk = Fields::of(
        d.path("disk"),
        d.req("disk", "a disk (not a cdrom or a lun)")?,
    )?;
    disk.expect_str(
        "bus",
        "virtio",
        "a virtio-blk disk, as the harness attaches every disk",
    )?;
    disk.end()?;
    d.end()?;
    Ok((path, Disk { name, serial }))
}

#[derive(Debug)]
struct Volume {
    name: String,
    source: Source,
}

#[derive(Debug)]
enum Source {
    ContainerDisk { image: String, path: Option<String> },
    ConfigMap { name: String, label: String },
    NoCloud { secret: String },
    Ephemeral { claim: String },
}

impl Source {
    fn kind(&self) -> &'static str {
        match self {
            Source::ContainerDisk { .. } => "containerDisk",
            Source::ConfigMap { .. } => "configMap",
            Source::NoCloud { .. } => "cloudInitNoCloud",
            Source::Ephemeral { .. } => "ephemeral",
        }
    }
}

/// A `volumes:` entry: its name and one source.
fn parse_volume(path: String, v: &Value) -> Result<(String, Volume), ManifestError> {
    let mut f = Fields::of(path.clone(), v)?;
    let name = f.req_str("name", "the disk that shows it")?.to_owned();
    let sources = [
        "containerDisk",
        "configMap",
        "cloudInitNoCloud",
        "ephemeral",
    ];
    let mut found = None;
    for key in sources {
        if let Some(s) = f.opt(key) {
            if found.is_some() {
                return Err(ManifestError::Unsupported {
                    path,
                    found: "two sources".into(),
                    expected: "one".into(),
                });
            }
            found = Some((key, s));
        }
    }
    let Some((key, s)) = found else {
        // The unknown source is the error `end` names.
        f.end()?;
        return Err(ManifestError::Missing {
            path,
            why: "a volume without a source".into(),
        });
    };
    let mut s = Fields::of(f.path(key), s)?;
    let source = match key {
        "containerDisk" => Source::ContainerDisk {
            image: s.req_str("image", "the image holding the disk")?.to_owned(),
            path: s.opt_str("path")?.map(str::to_owned),
        },
        "configMap" => Source::ConfigMap {
            name: s.req_str("name", "the ConfigMap")?.to_owned(),
            // `pkg/config/config.go`: "cfgdata" when none is given.
            label: s.opt_str("volumeLabel")?.unwrap_or("cfgdata").to_owned(),
        },
        "cloudInitNoCloud" => {
            let path = s.path("secretRef");
            let mut r = Fields::of(path, s.req("secretRef", "the Secret with the user-data")?)?;
            let secret = r
                .req_str("name", "the Secret with the user-data")?
                .to_owned();
            r.end()?;
            Source::NoCloud { secret }
        }
        "ephemeral" => {
            let mut pvc = Fields::of(
                s.path("persistentVolumeClaim"),
                s.req("persistentVolumeClaim", "the claim")?,
            )?;
            let claim = pvc.req_str("claimName", "the claim")?.to_owned();
            if pvc.opt_bool("readOnly")? != Some(true) {
                return Err(ManifestError::Unsupported {
                    path: pvc.path("readOnly"),
                    found: "not true".into(),
                    expected: "true: the harness only ever reads the claim's disk".into(),
                });
            }
            pvc.end()?;
            Source::Ephemeral { claim }
        }
        _ => unreachable!("one of `sources`"),
    };
    s.end()?;
    f.end()?;
    Ok((path, Volume { name, source }))
}

/// A Kubernetes quantity of memory in MiB, as qemu's `-m` takes it:
/// binary (`Ki`…`Ti`) or decimal (`k`…`T`) suffixes, or bytes; it must be
/// a whole number of MiB (KubeVirt's domain takes bytes; qemu's `-m`
/// whole MiB).
pub(super) fn mebibytes(path: &str, q: &str) -> Result<u32, ManifestError> {
    let unsupported = |why: &str| ManifestError::Unsupported {
        path: path.to_owned(),
        found: format!("`{q}`"),
        expected: why.to_owned(),
    };
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (digits, suffix) = q.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| unsupported("a whole number with a suffix (`1Gi`, `512Mi`)"))?;
    let unit: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return Err(unsupported("a suffix of Ki, Mi, Gi, Ti, k, M, G or T")),
    };
    let bytes = n
        .checked_mul(unit)
        .ok_or_else(|| unsupported("less than 2^64 bytes"))?;
    if bytes == 0 || bytes % (1 << 20) != 0 {
        return Err(unsupported("a whole, positive number of MiB (qemu's `-m`)"));
    }
    u32::try_from(bytes >> 20).map_err(|_| unsupported("under 4 PiB"))
}

/// The user-data of the Secret `name` (`userdata`, else `userData`: the
/// keys KubeVirt reads, `pkg/cloud-init/cloud-init.go`), read strictly.
pub fn secret_user_data(secret: &Value) -> Result<Vec<u8>, ManifestError> {
    let mut top = Fields::of("Secret", secret)?;
    top.expect_str("apiVersion", "v1", "a core object")?;
    top.expect_str("kind", "Secret", "a Secret")?;
    let mut meta = Fields::of("Secret.metadata", top.req("metadata", "its name")?)?;
    meta.req_str("name", "its name")?;
    meta.opt_str("namespace")?;
    // The cluster's and the backend's, not the guest's.
    meta.string_map("labels")?;
    meta.string_map("annotations")?;
    meta.end()?;
    if let Some(t) = top.opt_str("type")?
        && t != "Opaque"
    {
        return Err(ManifestError::Unsupported {
            path: "Secret.type".into(),
            found: format!("`{t}`"),
            expected: "`Opaque`".into(),
        });
    }
    let mut data = Fields::of("Secret.data", top.req("data", "the user-data")?)?;
    let (key, b64) = match (data.opt("userdata"), data.opt("userData")) {
        (Some(v), None) => ("userdata", v),
        (None, Some(v)) => ("userData", v),
        _ => {
            return Err(ManifestError::Missing {
                path: "Secret.data.userdata".into(),
                why: "KubeVirt reads the user-data from `userdata` or `userData`, one of them"
                    .into(),
            });
        }
    };
    let path = data.path(key);
    let bytes = b64
        .as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .ok_or_else(|| ManifestError::Unsupported {
            path,
            found: summary(b64),
            expected: "base64".into(),
        })?;
    data.end()?;
    top.end()?;
    Ok(bytes)
}
