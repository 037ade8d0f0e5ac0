//! What a cluster would hold for a VM's volumes, on this host, and the
//! disks KubeVirt makes of them:
//! - a `containerDisk` image: its OCI archive (what `skopeo copy` pushes
//!   to a registry), unpacked as the image's filesystem (umoci); the disk
//!   is the one file under `/disk/`, or the volume's `path`
//!   (`pkg/container-disk/container-disk.go`, `GetImage`);
//! - a ConfigMap: the object as the API holds it, laid out as the kubelet
//!   mounts a ConfigMap volume (each key a link into `..data`, itself a
//!   link to a timestamped folder), then made an ISO by `xorrisofs` with
//!   KubeVirt's arguments and the volume's label (`pkg/config/config.go`,
//!   `defaultCreateIsoImage`, one graft point per entry of the folder as
//!   `getFilesLayout` lists it, hidden entries included);
//! - a PVC: the disk on it (a golden: an earlier VM's disk).

use super::{DiskPlan, ManifestError, MappedDisk, VolumePlan};
use crate::image_tools;
use base64::Engine as _;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The cluster the rendered VM would run in, as far as its volumes go.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// The root containerDisk image that stands for the harness's guest
    /// image (booted from its kernel, its root filesystem under an overlay).
    pub guest_image: String,
    /// containerDisk images: reference → its OCI archive.
    pub images: Vec<(String, PathBuf)>,
    /// ConfigMap objects, as `kubectl get -o json` prints them.
    pub config_maps: Vec<Value>,
    /// PVCs: claim name → the disk image on it.
    pub claims: Vec<(String, PathBuf)>,
}

impl Cluster {
    pub(super) fn check_guest_image(&self, image: &str) -> Result<(), ManifestError> {
        if image == self.guest_image {
            Ok(())
        } else {
            Err(ManifestError::NotFound {
                what: "the root containerDisk image",
                name: image.to_owned(),
                where_: format!(
                    "the guest image the harness boots (`{}`): render with \
                     `--root-image {}`",
                    self.guest_image, self.guest_image
                ),
            })
        }
    }

    pub(super) fn claim(&self, claim: &str) -> Result<PathBuf, ManifestError> {
        self.claims
            .iter()
            .find(|(n, _)| n == claim)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| ManifestError::NotFound {
                what: "PVC",
                name: claim.to_owned(),
                where_: "among the cluster's claims".into(),
            })
    }

    /// The disk of `plan`, made in `work` (created here).
    pub(super) fn disk(&self, plan: &DiskPlan, work: &Path) -> Result<MappedDisk, ManifestError> {
        std::fs::create_dir_all(work)
            .map_err(|e| ManifestError::io(format!("create `{}`", work.display()), e))?;
        let (path, label) = match &plan.source {
            VolumePlan::ContainerDisk { image, path } => {
                let archive = self
                    .images
                    .iter()
                    .find(|(r, _)| r == image)
                    .map(|(_, a)| a)
                    .ok_or_else(|| ManifestError::NotFound {
                        what: "containerDisk image",
                        name: image.clone(),
                        where_: "among the cluster's images".into(),
                    })?;
                (container_disk(archive, path.as_deref(), work)?, None)
            }
            VolumePlan::ConfigMap { name, label } => {
                let cm = self
                    .config_maps
                    .iter()
                    .find(|c| c["metadata"]["name"] == name.as_str())
                    .ok_or_else(|| ManifestError::NotFound {
                        what: "ConfigMap",
                        name: name.clone(),
                        where_: "among the cluster's ConfigMaps".into(),
                    })?;
                (config_map_iso(cm, label, work)?, Some(label.clone()))
            }
        };
        Ok(MappedDisk {
            name: plan.name.clone(),
            serial: plan.serial.clone(),
            label,
            path,
        })
    }
}

fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>, ManifestError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ManifestError::io(format!("run {what}"), e))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(ManifestError::Tool {
            what: what.to_owned(),
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
        })
    }
}

/// The disk a containerDisk image holds: the archive unpacked as an image
/// layout (`tar`), its one image unpacked as a filesystem (`umoci`), then
/// `path` in it or the one file under `/disk/`.
fn container_disk(
    archive: &Path,
    path: Option<&str>,
    work: &Path,
) -> Result<PathBuf, ManifestError> {
    let layout = work.join("layout");
    std::fs::create_dir_all(&layout)
        .map_err(|e| ManifestError::io(format!("create `{}`", layout.display()), e))?;
    run(
        Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(&layout),
        &format!("unpack `{}` (tar -x)", archive.display()),
    )?;
    let index: Value = std::fs::read(layout.join("index.json"))
        .map_err(|e| ManifestError::io("read the image layout's index.json", e))
        .and_then(|b| {
            serde_json::from_slice(&b).map_err(|e| ManifestError::Tool {
                what: "read the image layout's index.json".into(),
                detail: e.to_string(),
            })
        })?;
    let manifests = index["manifests"].as_array().map_or(&[][..], Vec::as_slice);
    let tag = match manifests {
        [one] => one["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .ok_or_else(|| ManifestError::Tool {
                what: format!("find the image in `{}`", archive.display()),
                detail: "its index names no `org.opencontainers.image.ref.name`".into(),
            })?,
        _ => {
            return Err(ManifestError::Tool {
                what: format!("find the image in `{}`", archive.display()),
                detail: format!("{} images in its index, not one", manifests.len()),
            });
        }
    };
    let bundle = work.join("bundle");
    run(
        image_tools::tool("umoci")
            .args(["unpack", "--image"])
            .arg(format!("{}:{tag}", layout.display()))
            .arg(&bundle),
        "unpack the containerDisk image (umoci unpack)",
    )?;
    let rootfs = bundle.join("rootfs");
    if let Some(p) = path {
        let disk = rootfs.join(p.trim_start_matches('/'));
        return if disk.is_file() {
            Ok(disk)
        } else {
            Err(ManifestError::NotFound {
                what: "the containerDisk's `path`",
                name: p.to_owned(),
                where_: format!("a file of the image `{}`", archive.display()),
            })
        };
    }
    let folder = rootfs.join("disk");
    let files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .map_err(|e| ManifestError::io("list the image's /disk/", e))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| ManifestError::io("list the image's /disk/", e))?;
    match files.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(ManifestError::Tool {
            what: format!("find the disk of `{}`", archive.display()),
            detail: format!(
                "{} files under /disk/; KubeVirt takes an image with one",
                files.len()
            ),
        }),
    }
}

/// The ISO KubeVirt makes of ConfigMap `cm` for a volume labelled `label`.
fn config_map_iso(cm: &Value, label: &str, work: &Path) -> Result<PathBuf, ManifestError> {
    let mount = work.join("volume");
    const STAMP: &str = "..2026_12_05_12_00_00.000000001";
    let stamp = mount.join(STAMP);
    std::fs::create_dir_all(&stamp)
        .map_err(|e| ManifestError::io(format!("create `{}`", stamp.display()), e))?;
    let link = |target: &str, at: &Path| {
        std::os::unix::fs::symlink(target, at)
            .map_err(|e| ManifestError::io(format!("link `{}`", at.display()), e))
    };
    link(STAMP, &mount.join("..data"))?;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(data) = cm["data"].as_object() {
        for (k, v) in data {
            files.push((
                k.clone(),
                v.as_str().unwrap_or_default().as_bytes().to_vec(),
            ));
        }
    }
    if let Some(data) = cm["binaryData"].as_object() {
        for (k, v) in data {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or_default())
                .map_err(|e| ManifestError::Tool {
                    what: format!("decode the ConfigMap's `binaryData.{k}`"),
                    detail: e.to_string(),
                })?;
            files.push((k.clone(), bytes));
        }
    }
    for (key, bytes) in &files {
        std::fs::write(stamp.join(key), bytes)
            .map_err(|e| ManifestError::io(format!("write the ConfigMap's `{key}`"), e))?;
        link(&format!("..data/{key}"), &mount.join(key))?;
    }
    let iso = work.join("volume.iso");
    let mut xorrisofs = image_tools::tool("xorrisofs");
    xorrisofs
        .arg("-output")
        .arg(&iso)
        .args(["-follow-links", "-volid", label, "-joliet", "-rock"])
        .args(["-graft-points", "-partition_cyl_align", "on"]);
    let entries = std::fs::read_dir(&mount)
        .map_err(|e| ManifestError::io(format!("list `{}`", mount.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ManifestError::io("list the volume", e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        xorrisofs.arg(format!("{name}={}", mount.join(&*name).display()));
    }
    run(&mut xorrisofs, "make the ConfigMap's ISO (xorrisofs)")?;
    Ok(iso)
}
