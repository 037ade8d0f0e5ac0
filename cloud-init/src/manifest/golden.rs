//! Whether a golden PVC can be a lab VM's root right now
//! ([`golden_unusable_reason`]): a pure judgement of the PVC object as the
//! API returns it (`kubectl get pvc NAME -o json`), so a backend asks it
//! before every VM and the renderer asks it for `--golden-pvc-json`.
//!
//! The rules are the platform's (its notes on the golden disk): a VM whose
//! root names a PVC that cannot be mounted never starts (KubeVirt's
//! virt-controller fails to make its pod, `rendervolumes.go`), so anything
//! short of a bound, fully imported, never-booted copy of the VM's own
//! image, attachable on many nodes at once, falls back to the containerDisk:
//! golden is an optimisation, never a prerequisite. One exception is not a
//! fallback but the author's error: a golden too small for the lab's
//! `min_root_bytes` ([`Reason::TooSmall`]), since the containerDisk's root is
//! smaller still.

use super::quantity::Quantity;
use serde_json::Value;
use std::fmt;

/// The annotation that names the image a golden PVC was imported from
/// (the operator sets it; the image must be the VM's containerDisk).
pub const GOLDEN_IMAGE_ANNOTATION: &str = "lab-agent/golden-image";
/// CDI's record of where it imported a PVC from (`docker://IMAGE` for a
/// registry): read when our annotation is absent.
pub const CDI_ENDPOINT_ANNOTATION: &str = "cdi.kubevirt.io/storage.import.endpoint";
/// CDI's importer pod's phase on the PVC: `Succeeded` once the import is whole.
pub const CDI_POD_PHASE_ANNOTATION: &str = "cdi.kubevirt.io/storage.pod.phase";

/// Why a golden PVC cannot be a VM's root now, in one sentence
/// (`Display`), naming the PVC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// `metadata.name`, when the object has one.
    pub claim: Option<String>,
    pub reason: Reason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// No object (not found, or the backend may not read it).
    Missing,
    /// An object of another kind, or without a name.
    NotAClaim,
    /// `metadata.deletionTimestamp`: being replaced.
    Terminating,
    /// `status.phase` other than `Bound`.
    NotBound { phase: String },
    /// CDI's importer has not succeeded yet.
    Importing { phase: String },
    /// Neither annotation names the image it holds.
    NoImage,
    /// It holds another image than the VM's containerDisk.
    OtherImage { found: String, want: String },
    /// No access mode that many nodes can mount at once.
    SingleNode { modes: Vec<String> },
    /// A `volumeMode` KubeVirt cannot lay a layer over.
    VolumeMode { mode: String },
    /// No size recorded, or not a quantity.
    NoSize { found: Option<String> },
    /// Smaller than the lab's root needs.
    TooSmall {
        capacity: String,
        bytes: u128,
        min_bytes: u64,
    },
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.claim {
            Some(name) => write!(f, "golden PVC `{name}` ")?,
            None => f.write_str("the golden PVC ")?,
        }
        match &self.reason {
            Reason::Missing => f.write_str(
                "does not exist, or the backend may not read it (`get` on persistentvolumeclaims)",
            ),
            Reason::NotAClaim => f.write_str(
                "is not a PersistentVolumeClaim object with a name, as `kubectl get pvc NAME -o \
                 json` prints one",
            ),
            Reason::Terminating => f.write_str(
                "is being deleted (Terminating): it is being replaced, and VMs on it would hold \
                 the old one",
            ),
            Reason::NotBound { phase } => {
                write!(f, "is {phase}, not Bound: it has no volume to read yet")
            }
            Reason::Importing { phase } => write!(
                f,
                "is still being imported (CDI's importer is {phase}): a VM would boot a partial \
                 disk"
            ),
            Reason::NoImage => write!(
                f,
                "names no image it was imported from (annotation `{GOLDEN_IMAGE_ANNOTATION}` or \
                 CDI's `{CDI_ENDPOINT_ANNOTATION}`): it may be a disk that was booted, whose \
                 machine-id and host keys every VM would share"
            ),
            Reason::OtherImage { found, want } => write!(
                f,
                "holds `{found}`, not the VM's image `{want}`: the lab would run on another \
                 system than the one it was tested on"
            ),
            Reason::SingleNode { modes } => write!(
                f,
                "is {}: it attaches to one node at a time, and lab VMs run on many (make it \
                 ReadWriteMany or ReadOnlyMany)",
                if modes.is_empty() {
                    "without access modes".to_owned()
                } else {
                    modes.join(", ")
                }
            ),
            Reason::VolumeMode { mode } => write!(
                f,
                "has volumeMode `{mode}`: KubeVirt lays a VM's layer over a Filesystem or Block \
                 volume"
            ),
            Reason::NoSize { found: None } => {
                f.write_str("records no size (`status.capacity.storage`)")
            }
            Reason::NoSize { found: Some(s) } => write!(
                f,
                "records a size `{}` that is not a quantity",
                s.escape_debug()
            ),
            Reason::TooSmall {
                capacity,
                bytes,
                min_bytes,
            } => write!(
                f,
                "holds {capacity} ({bytes} bytes), less than the {min_bytes} bytes the lab's \
                 `min_root_bytes` needs for its root file system"
            ),
        }
    }
}

/// `None` when `pvc` (the PVC object as the API returns it; `None` when it
/// was not found) can be `image`'s golden root for a lab that needs
/// `min_bytes` of root (0: any size); else why not.
pub fn golden_unusable_reason(
    pvc: Option<&Value>,
    image: &str,
    min_bytes: u64,
) -> Option<Unusable> {
    let unusable = |claim: Option<&str>, reason| {
        Some(Unusable {
            claim: claim.map(str::to_owned),
            reason,
        })
    };
    let Some(pvc) = pvc.filter(|v| !v.is_null()) else {
        return unusable(None, Reason::Missing);
    };
    let meta = &pvc["metadata"];
    let name = meta["name"].as_str().filter(|n| !n.is_empty());
    let Some(name) = name.filter(|_| pvc["kind"] == "PersistentVolumeClaim") else {
        return unusable(name, Reason::NotAClaim);
    };
    let claim = Some(name);
    if !meta["deletionTimestamp"].is_null() {
        return unusable(claim, Reason::Terminating);
    }
    let phase = pvc["status"]["phase"].as_str().unwrap_or("Pending");
    if phase != "Bound" {
        return unusable(
            claim,
            Reason::NotBound {
                phase: phase.into(),
            },
        );
    }
    let annotation = |key: &str| meta["annotations"][key].as_str();
    if let Some(phase) = annotation(CDI_POD_PHASE_ANNOTATION).filter(|p| *p != "Succeeded") {
        return unusable(
            claim,
            Reason::Importing {
                phase: phase.into(),
            },
        );
    }
    let found = annotation(GOLDEN_IMAGE_ANNOTATION).or_else(|| {
        annotation(CDI_ENDPOINT_ANNOTATION).map(|e| e.strip_prefix("docker://").unwrap_or(e))
    });
    match found {
        None => return unusable(claim, Reason::NoImage),
        Some(found) if found != image => {
            return unusable(
                claim,
                Reason::OtherImage {
                    found: found.into(),
                    want: image.into(),
                },
            );
        }
        Some(_) => {}
    }
    // What was bound, else what was asked for.
    let modes = match &pvc["status"]["accessModes"] {
        Value::Array(m) if !m.is_empty() => m,
        _ => pvc["spec"]["accessModes"].as_array().map_or(&[][..], |m| m),
    };
    let modes: Vec<String> = modes
        .iter()
        .filter_map(|m| m.as_str().map(str::to_owned))
        .collect();
    if !modes
        .iter()
        .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany")
    {
        return unusable(claim, Reason::SingleNode { modes });
    }
    let mode = pvc["spec"]["volumeMode"].as_str().unwrap_or("Filesystem");
    if mode != "Filesystem" && mode != "Block" {
        return unusable(claim, Reason::VolumeMode { mode: mode.into() });
    }
    let Some(capacity) = pvc["status"]["capacity"]["storage"].as_str() else {
        return unusable(claim, Reason::NoSize { found: None });
    };
    let Ok(size) = Quantity::parse(capacity) else {
        return unusable(
            claim,
            Reason::NoSize {
                found: Some(capacity.into()),
            },
        );
    };
    // The guest's root file system is smaller than its disk, and a
    // Filesystem volume's disk image smaller than the volume (CDI leaves
    // room for the file system): under `min_bytes` of capacity no root can
    // reach it. Above, the guest's own check (`lab-agent setup
    // --min-root-bytes`) has the last word.
    if size.floor() < u128::from(min_bytes) {
        return unusable(
            claim,
            Reason::TooSmall {
                capacity: capacity.into(),
                bytes: size.floor(),
                min_bytes,
            },
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const IMAGE: &str = "quay.io/containerdisks/debian:12";

    fn good() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "golden-debian-12-10gi",
                "namespace": "lab-vms",
                "annotations": {
                    GOLDEN_IMAGE_ANNOTATION: IMAGE,
                    CDI_POD_PHASE_ANNOTATION: "Succeeded",
                },
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "volumeMode": "Filesystem",
                "resources": {"requests": {"storage": "10Gi"}},
            },
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteMany"],
                "capacity": {"storage": "10Gi"},
            },
        })
    }

    fn reason(pvc: &Value, min: u64) -> Option<Reason> {
        golden_unusable_reason(Some(pvc), IMAGE, min).map(|u| u.reason)
    }

    /// One change to a usable golden per reason, each found, each a
    /// sentence that names the PVC.
    #[test]
    fn each_reason_is_found_and_said() {
        assert_eq!(reason(&good(), 9 << 30), None);
        assert_eq!(reason(&good(), 10 << 30), None);
        type Case = (&'static str, fn(&mut Value), fn(&Reason) -> bool);
        let cases: Vec<Case> = vec![
            (
                "terminating",
                |p| p["metadata"]["deletionTimestamp"] = json!("2026-10-16T00:00:00Z"),
                |r| *r == Reason::Terminating,
            ),
            (
                "pending",
                |p| p["status"]["phase"] = json!("Pending"),
                |r| matches!(r, Reason::NotBound { phase } if phase == "Pending"),
            ),
            (
                "no status",
                |p| p["status"] = Value::Null,
                |r| matches!(r, Reason::NotBound { .. }),
            ),
            (
                "importing",
                |p| p["metadata"]["annotations"][CDI_POD_PHASE_ANNOTATION] = json!("Running"),
                |r| matches!(r, Reason::Importing { .. }),
            ),
            (
                "no image",
                |p| p["metadata"]["annotations"] = json!({}),
                |r| *r == Reason::NoImage,
            ),
            (
                "other image",
                |p| {
                    p["metadata"]["annotations"][GOLDEN_IMAGE_ANNOTATION] =
                        json!("quay.io/containerdisks/ubuntu:24.04")
                },
                |r| matches!(r, Reason::OtherImage { .. }),
            ),
            (
                "rwo",
                |p| p["status"]["accessModes"] = json!(["ReadWriteOnce"]),
                |r| matches!(r, Reason::SingleNode { modes } if modes == &["ReadWriteOnce"]),
            ),
            (
                "volume mode",
                |p| p["spec"]["volumeMode"] = json!("Other"),
                |r| matches!(r, Reason::VolumeMode { .. }),
            ),
            (
                "no size",
                |p| p["status"]["capacity"] = json!({}),
                |r| matches!(r, Reason::NoSize { found: None }),
            ),
            (
                "bad size",
                |p| p["status"]["capacity"]["storage"] = json!("ten"),
                |r| matches!(r, Reason::NoSize { found: Some(_) }),
            ),
            (
                "small",
                |p| p["status"]["capacity"]["storage"] = json!("8Gi"),
                |r| matches!(r, Reason::TooSmall { bytes, .. } if *bytes == 8 << 30),
            ),
            (
                "a pod",
                |p| p["kind"] = json!("Pod"),
                |r| *r == Reason::NotAClaim,
            ),
        ];
        for (what, change, expected) in cases {
            let mut pvc = good();
            change(&mut pvc);
            let u = golden_unusable_reason(Some(&pvc), IMAGE, 9 << 30)
                .unwrap_or_else(|| panic!("{what}: usable"));
            assert!(expected(&u.reason), "{what}: {:?}", u.reason);
            let said = u.to_string();
            assert!(
                said.starts_with("golden PVC `golden-debian-12-10gi` "),
                "{said}"
            );
            assert!(!said.contains('\n') && !said.ends_with('.'), "{said}");
        }
        assert_eq!(
            golden_unusable_reason(None, IMAGE, 0).map(|u| u.reason),
            Some(Reason::Missing)
        );
        assert_eq!(reason(&Value::Null, 0), Some(Reason::Missing));
    }

    /// CDI's own record of the import stands in for our annotation; the
    /// claim asked for stands in for what was bound; a disk of any size
    /// does for a lab that asks none.
    #[test]
    fn cdi_records_and_defaults_are_read() {
        let mut pvc = good();
        pvc["metadata"]["annotations"] =
            json!({CDI_ENDPOINT_ANNOTATION: format!("docker://{IMAGE}")});
        pvc["status"]["accessModes"] = Value::Null;
        pvc["spec"]["accessModes"] = json!(["ReadOnlyMany"]);
        pvc["spec"]["volumeMode"] = Value::Null;
        pvc["status"]["capacity"]["storage"] = json!("1Gi");
        assert_eq!(reason(&pvc, 0), None);
        assert!(matches!(
            reason(&pvc, 2 << 30),
            Some(Reason::TooSmall { .. })
        ));
    }
}
