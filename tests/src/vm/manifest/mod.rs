//! A lab VM as `labctl render` describes it, booted as far as qemu can:
//! the rendered `VirtualMachine` (and the Secret it names) read field by
//! field into the harness's [`BootOptions`], each field turned into what
//! KubeVirt makes of it in the guest (tests/vm/README.md, "From the
//! manifest to qemu", cites KubeVirt's source for each).
//!
//! Every field of the VM and of its Secret is either mapped or an error
//! naming it ([`ManifestError::Unmapped`]): a renderer change that the
//! harness cannot mirror fails the VM test that boots its output, rather
//! than being left out of the boot unseen.
//!
//! # Layout
//! - `fields`: the objects read strictly, into a [`VmPlan`] (pure).
//! - `cluster`: what the cluster would hold for the volumes ([`Cluster`]:
//!   containerDisk images as OCI archives, ConfigMaps, PVCs' disks) and
//!   the disks made of them as KubeVirt makes them.
//! - this file: [`map`], the two put together, and [`MappedVm`]'s boot
//!   options.

mod cluster;
mod fields;

pub use cluster::Cluster;
pub use fields::{DiskPlan, RootPlan, VmPlan, VolumePlan, parse_vm, secret_user_data};

use super::{BootOptions, VmImage};
use crate::pydeps;
use lab_runner::qemu::argv::ExtraDisk;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Why a rendered VM cannot be booted by the harness. Each says which
/// field, what it holds, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A field the mapping does not know.
    #[error(
        "`{path}` ({found}) is not mapped to qemu: say what it becomes in the guest in \
         tests/src/vm/manifest/ and in tests/vm/README.md's table, or render without it"
    )]
    Unmapped { path: String, found: String },
    /// A known field with a value the harness cannot mirror.
    #[error("`{path}` is {found}; the harness mirrors {expected}")]
    Unsupported {
        path: String,
        found: String,
        expected: String,
    },
    #[error("`{path}` is missing: {why}")]
    Missing { path: String, why: String },
    /// An object the VM names is not in the stream or the [`Cluster`].
    #[error("{what} `{name}` is not {where_}")]
    NotFound {
        what: &'static str,
        name: String,
        where_: String,
    },
    /// A tool that makes a volume's disk failed.
    #[error("failed to {what}: {detail}")]
    Tool { what: String, detail: String },
    #[error("failed to {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl ManifestError {
    fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ManifestError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A rendered VM made bootable: its plan, its payload, and its disks on
/// this host.
#[derive(Debug, Clone)]
pub struct MappedVm {
    pub plan: VmPlan,
    /// The Secret's user-data, as KubeVirt writes it into the seed.
    pub user_data: Vec<u8>,
    /// The seed's `meta-data`, as KubeVirt writes it.
    pub meta_data: String,
    /// The root's base: the claim's disk of an `ephemeral` root; `None`:
    /// the guest image's own root filesystem.
    pub root_base: Option<PathBuf>,
    /// The disks after the root and the seed, in `disks:` order.
    pub disks: Vec<MappedDisk>,
}

/// One disk after the root and the seed, made on this host.
#[derive(Debug, Clone)]
pub struct MappedDisk {
    pub name: String,
    pub serial: Option<String>,
    /// A ConfigMap's ISO's volume label (the guest's
    /// `/dev/disk/by-label/LABEL`).
    pub label: Option<String>,
    /// The raw image qemu attaches.
    pub path: PathBuf,
}

/// Maps the VM `name` of a rendered stream (`documents`: every object
/// `labctl render` printed, as JSON values) onto this host: the VM read
/// strictly, its Secret found in the stream, its volumes made from
/// `cluster` in `work` (a folder of the caller's, kept while the VM runs).
pub fn map(
    documents: &[Value],
    name: &str,
    cluster: &Cluster,
    work: &Path,
) -> Result<MappedVm, ManifestError> {
    let named = |kind: &str, n: &str| {
        documents
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == n)
    };
    let vm = named("VirtualMachine", name).ok_or_else(|| ManifestError::NotFound {
        what: "VirtualMachine",
        name: name.to_owned(),
        where_: "in the rendered objects".into(),
    })?;
    let plan = parse_vm(vm)?;
    let secret = named("Secret", &plan.user_data_secret)
        .filter(|s| s["metadata"]["namespace"].as_str() == plan.namespace.as_deref())
        .ok_or_else(|| ManifestError::NotFound {
            what: "Secret",
            name: plan.user_data_secret.clone(),
            where_: format!(
                "in the rendered objects, in the VM's namespace ({})",
                plan.namespace.as_deref().unwrap_or("none")
            ),
        })?;
    let user_data = secret_user_data(secret)?;
    let root_base = match &plan.root {
        RootPlan::ContainerDisk { image } => {
            cluster.check_guest_image(image)?;
            None
        }
        RootPlan::Ephemeral { claim } => Some(cluster.claim(claim)?),
    };
    let disks = plan
        .disks
        .iter()
        .enumerate()
        .map(|(i, d)| cluster.disk(d, &work.join(format!("disk{i}-{}", d.name))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(MappedVm {
        meta_data: meta_data(&plan.name, &plan.hostname),
        plan,
        user_data,
        root_base,
        disks,
    })
}

impl MappedVm {
    /// The harness's boot options for this VM on `image` (which must be of
    /// the VM's architecture): cores, memory, the seed's user-data and
    /// meta-data, the vsock device, the disks with their serials.
    pub fn boot_options(&self, image: &VmImage) -> Result<BootOptions, ManifestError> {
        if image.os.arch() != self.plan.arch {
            return Err(ManifestError::Unsupported {
                path: "spec.template.spec.architecture".into(),
                found: format!("`{}`", self.plan.arch.name()),
                expected: format!(
                    "the guest image's, `{}` ({})",
                    image.os.arch().name(),
                    image.os
                ),
            });
        }
        Ok(BootOptions {
            meta_data: Some(self.meta_data.clone()),
            memory_mib: self.plan.memory_mib,
            cpus: self.plan.cpus,
            vsock: self.plan.vsock,
            root_base: self.root_base.clone(),
            disks: self
                .disks
                .iter()
                .map(|d| ExtraDisk {
                    path: d.path.clone(),
                    serial: d.serial.clone(),
                })
                .collect(),
            ..BootOptions::new(&self.plan.name, self.user_data.clone())
        })
    }
}

/// KubeVirt's NoCloud `meta-data` (`pkg/cloud-init/cloud-init.go`,
/// `NoCloudMetadata` as `encoding/json` writes it): the instance id is the
/// VM's firmware UUID, which virt-controller derives from the VM's name
/// when the VM sets none (`pkg/virt-controller/watch/vm/firmware.go`,
/// `CalculateLegacyUUID`: a version-5 UUID in its own namespace), the
/// hostname is [`VmPlan::hostname`].
pub fn meta_data(vm_name: &str, hostname: &str) -> String {
    serde_json::json!({
        "instance-id": firmware_uuid(vm_name),
        "local-hostname": hostname,
    })
    .to_string()
}

/// `uuid.NewSHA1(6a1a24a1-4061-4607-8bf4-a3963d0c5895, name)`.
pub fn firmware_uuid(name: &str) -> String {
    const NAMESPACE: [u8; 16] = [
        0x6a, 0x1a, 0x24, 0xa1, 0x40, 0x61, 0x46, 0x07, 0x8b, 0xf4, 0xa3, 0x96, 0x3d, 0x0c, 0x58,
        0x95,
    ];
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(&NAMESPACE);
    ctx.update(name.as_bytes());
    let digest = ctx.finish();
    let mut u = [0u8; 16];
    u.copy_from_slice(&digest.as_ref()[..16]);
    u[6] = (u[6] & 0x0f) | 0x50;
    u[8] = (u[8] & 0x3f) | 0x80;
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Every YAML document of `path` as JSON, read by Debian's PyYAML (the
/// cloud-init cache's, `safe_load_all`): a parser that is not the
/// renderer's writer.
pub fn load_yaml(path: &Path) -> Result<Vec<Value>, ManifestError> {
    let out = pydeps::cloud_init_python()
        .args([
            "-c",
            "import json, sys, yaml\n\
             print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))",
        ])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ManifestError::io("run Debian's python3 (PyYAML)", e))?;
    if !out.status.success() {
        return Err(ManifestError::Tool {
            what: format!("read `{}` as YAML", path.display()),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    serde_json::from_slice(&out.stdout).map_err(|e| ManifestError::Tool {
        what: format!("read PyYAML's JSON of `{}`", path.display()),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
