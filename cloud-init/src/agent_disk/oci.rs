//! The agent's disk as a KubeVirt containerDisk: an OCI image archive (the
//! `oci-archive` transport of `skopeo` and `podman load`: an OCI image
//! layout in a tar) of one image, `FROM scratch` with the disk under
//! `/disk/`, owned by 107:107 (the `qemu` user of virt-launcher) and mode
//! 0440, as KubeVirt's own instructions build one
//! (kubevirt/kubevirt `docs/container-register-disks.md`: `ADD
//! --chown=107:107 … /disk/`; `pkg/container-disk/container-disk.go`
//! serves the one file it finds in `/disk`).
//!
//! Made here, byte for byte the same for the same disk (no dates, gzip
//! without a name or time), so no Docker daemon or image builder is
//! needed and the image's digest names its content.

use super::tar;
use crate::pin::sha256_hex;
use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::json;
use std::io::Write as _;

/// The file name of the disk inside the image.
pub const DISK_PATH: &str = "disk/lab-agent.img";
/// The tag the archive's index names the image by (`oci-archive:FILE:latest`).
pub const REF_NAME: &str = "latest";

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// The archive of an image holding `disk` at [`DISK_PATH`]. `arches` (as
/// Kubernetes names them, first one first) go into the image's
/// description; its config names the first as its architecture, which the
/// OCI config requires. The disk is data for every architecture it holds
/// an agent for: the image is one manifest, not a per-platform index, so
/// `skopeo copy` pushes it whole without `--all`.
pub fn archive(disk: &[u8], arches: &[&str]) -> Vec<u8> {
    let layer_tar = tar::archive(&[
        tar::Entry {
            path: "disk/",
            mode: 0o555,
            uid: 107,
            gid: 107,
            data: None,
        },
        tar::Entry {
            path: DISK_PATH,
            mode: 0o440,
            uid: 107,
            gid: 107,
            data: Some(disk),
        },
    ]);
    let layer = gzip(&layer_tar);
    let description = format!("lab-agent disk ({})", arches.join(", "));
    let config = json!({
        "architecture": arches.first().copied().unwrap_or("amd64"),
        "os": "linux",
        "config": {
            "Labels": {"org.opencontainers.image.description": description},
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(&layer_tar)]},
        "history": [{"created_by": "labctl agent-disk", "comment": description}],
    });
    let config = serde_json::to_vec(&config).expect("JSON serializes");
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": descriptor(CONFIG_TYPE, &config),
        "layers": [descriptor(LAYER_TYPE, &layer)],
        "annotations": {"org.opencontainers.image.description": description},
    });
    let manifest = serde_json::to_vec(&manifest).expect("JSON serializes");
    let mut entry = descriptor(MANIFEST_TYPE, &manifest);
    entry["annotations"] = json!({"org.opencontainers.image.ref.name": REF_NAME});
    let index = json!({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [entry],
    });
    let index = serde_json::to_vec(&index).expect("JSON serializes");

    let blob = |bytes: &[u8]| format!("blobs/sha256/{}", sha256_hex(bytes));
    let (config_path, layer_path, manifest_path) = (blob(&config), blob(&layer), blob(&manifest));
    let file = |path, data| tar::Entry {
        path,
        mode: 0o644,
        uid: 0,
        gid: 0,
        data: Some(data),
    };
    let dir = |path| tar::Entry {
        path,
        mode: 0o755,
        uid: 0,
        gid: 0,
        data: None,
    };
    tar::archive(&[
        file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#),
        file("index.json", &index),
        dir("blobs/"),
        dir("blobs/sha256/"),
        file(&config_path, &config),
        file(&layer_path, &layer),
        file(&manifest_path, &manifest),
    ])
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

fn descriptor(media_type: &str, bytes: &[u8]) -> serde_json::Value {
    json!({"mediaType": media_type, "digest": digest(bytes), "size": bytes.len()})
}

/// gzip with no file name and mtime 0, so the layer's digest depends on its
/// content only.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::best());
    gz.write_all(bytes).expect("gzip into memory");
    gz.finish().expect("gzip into memory")
}
