//! `labctl render`'s objects as the VM tests boot them: [`render`] runs the
//! real renderer for a guest, and the manifest's mapping
//! (`lab_agent_tests::vm::manifest`) reads what it printed. The boots are
//! `agent_disk::from_disk` (containerDisk, vsock) and
//! `agent_disk::configmap_disk` (ConfigMap ISO); here, without a boot:
//!
//! - [`every_rendered_vm_maps_or_names_what_it_cannot`]: each kind of VM
//!   the renderer writes maps (the agent's disk out of its containerDisk
//!   image byte for byte, the ConfigMap's ISO with its label, the golden
//!   as the root's base, vsock as the channel says), and a session's VM,
//!   whose `subdomain` is cluster DNS that qemu cannot mirror, fails
//!   naming that field.

use crate::support::*;
use lab_agent_tests::local::{TempDir, describe, labctl_bin};
use lab_agent_tests::vm::manifest::{self, Cluster, ManifestError, RootPlan};
use lab_agent_tests::vm::{Arch, GuestOs};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The containerDisk image the agent's disk is pushed as (a name only: the
/// [`Cluster`] holds its OCI archive).
pub const AGENT_IMAGE: &str = "localhost/lab-agent-disk:test";

/// The root containerDisk image that stands for `guest`'s test image.
pub fn guest_image_ref(guest: GuestOs) -> String {
    format!("localhost/lab-agent-tests/{guest}:vm")
}

/// What `labctl render` wrote for one lab.
#[derive(Debug)]
pub struct Rendered {
    /// Every object, as JSON (PyYAML's reading).
    pub documents: Vec<Value>,
    /// The VM's token (one VM), or `{vm}`'s for a session.
    pub token_file: PathBuf,
}

/// `labctl render LAB --name NAME` for `arch`'s static agent and the root
/// image of `root` (a guest's), with `flags` (the agent's disk, the
/// channel, …): 2 cores and 1 GiB as the harness boots its guests, the
/// TCP port opened to a backend by label (unless `--channel vsock`: no
/// port), everything in `labs`.
pub fn render(
    lab: &Path,
    dir: &Path,
    arch: Arch,
    root: &str,
    name: &str,
    flags: &[&str],
) -> Rendered {
    let yaml = dir.join(format!("{name}.yaml"));
    let token_file = dir.join(format!("{name}.token"));
    let vsock_alone = flags.windows(2).any(|w| w == ["--channel", "vsock"]);
    let backend: &[&str] = if vsock_alone {
        &[]
    } else {
        &["--backend-label", "app.kubernetes.io/name=lab-backend"]
    };
    let out = Command::new(labctl_bin())
        .arg("render")
        .arg(lab)
        .args(["--name", name, "--namespace", "labs", "--arch", arch.name()])
        .arg("--agent")
        .arg(static_agent_for(arch))
        .args(["--root-image", root, "--cpus", "2", "--memory", "1Gi"])
        .args(backend)
        .args(flags)
        .arg("--token-out")
        .arg(&token_file)
        .arg("-o")
        .arg(&yaml)
        .stdin(Stdio::null())
        .output()
        .expect("run labctl render");
    assert!(out.status.success(), "labctl render: {}", describe(&out));
    Rendered {
        documents: manifest::load_yaml(&yaml).unwrap_or_else(|e| panic!("{e}")),
        token_file,
    }
}

/// `labctl agent-disk -o DIR --agent AGENT`: the raw image, the
/// containerDisk's OCI archive and the ConfigMap in `dir`.
pub fn agent_disk(dir: &Path, agent: &Path) {
    let out = Command::new(labctl_bin())
        .arg("agent-disk")
        .arg("-o")
        .arg(dir)
        .arg("--agent")
        .arg(agent)
        .stdin(Stdio::null())
        .output()
        .expect("run labctl agent-disk");
    assert!(
        out.status.success(),
        "labctl agent-disk: {}",
        describe(&out)
    );
}

/// The cluster of a guest's VM: its root image, the agent's disk as a
/// containerDisk image and as a ConfigMap (from `labctl agent-disk`'s
/// folder `disk`).
pub fn cluster(guest: GuestOs, disk: &Path) -> Cluster {
    Cluster {
        guest_image: guest_image_ref(guest),
        images: vec![(
            AGENT_IMAGE.to_owned(),
            disk.join("lab-agent.containerdisk.tar"),
        )],
        config_maps: manifest::load_yaml(&disk.join("lab-agent.configmap.yaml"))
            .unwrap_or_else(|e| panic!("{e}")),
        claims: Vec::new(),
    }
}

/// The ConfigMap's name in `cluster` (`labctl agent-disk` names it by the
/// agents' hash).
pub fn config_map_name(cluster: &Cluster) -> String {
    cluster.config_maps[0]["metadata"]["name"]
        .as_str()
        .expect("the ConfigMap's name")
        .to_owned()
}

/// An ISO9660 image's volume identifier (the primary volume descriptor, in
/// sector 16, holds it at byte 40, 32 bytes padded with spaces).
fn iso_volume_id(iso: &Path) -> String {
    let bytes = std::fs::read(iso).unwrap();
    String::from_utf8_lossy(&bytes[0x8000 + 40..0x8000 + 72])
        .trim_end()
        .to_owned()
}

#[test]
fn every_rendered_vm_maps_or_names_what_it_cannot() {
    let guest = GuestOs::Debian12;
    let dir = TempDir::new("manifest-map");
    let lab = repo_root().join("examples/hello-lab");
    let disk = dir.join("disk");
    agent_disk(&disk, static_agent_for(guest.arch()));
    let golden = dir.write("golden.qcow2", "", 0o600);
    let cluster = Cluster {
        claims: vec![("golden-12".into(), golden.clone())],
        ..cluster(guest, &disk)
    };
    let root = guest_image_ref(guest);
    let render = |name: &str, flags: &[&str]| {
        render(&lab, &dir.path, guest.arch(), &root, name, flags).documents
    };
    let map = |docs: &[Value], name: &str| {
        let work = dir.join(format!("work-{name}"));
        manifest::map(docs, name, &cluster, &work)
    };
    let agent_containerdisk = format!("containerdisk:{AGENT_IMAGE}");

    // The agent's disk as a containerDisk, both channels.
    let docs = render(
        "cd",
        &[
            "--agent-from",
            "disk",
            "--agent-disk",
            &agent_containerdisk,
            "--channel",
            "both",
        ],
    );
    let vm = map(&docs, "cd").unwrap_or_else(|e| panic!("{e}"));
    assert!(vm.plan.vsock);
    assert_eq!((vm.plan.cpus, vm.plan.memory_mib), (2, 1024));
    assert_eq!(
        vm.plan.root,
        RootPlan::ContainerDisk {
            image: root.clone()
        }
    );
    assert_eq!(vm.disks.len(), 1, "{vm:?}");
    assert_eq!(vm.disks[0].serial.as_deref(), Some("lab-agent"));
    assert!(
        std::fs::read(&vm.disks[0].path).unwrap()
            == std::fs::read(disk.join("lab-agent.img")).unwrap(),
        "the disk out of the containerDisk image is `labctl agent-disk`'s raw image"
    );
    assert_eq!(
        &vm.user_data[..2],
        b"\x1f\x8b",
        "the Secret's gzip'd user-data"
    );
    assert_eq!(
        vm.meta_data,
        manifest::meta_data("cd", "cd"),
        "KubeVirt's meta-data"
    );

    // The agent's disk as a ConfigMap, vsock alone.
    let cm = config_map_name(&cluster);
    let docs = render(
        "cm",
        &[
            "--agent-from",
            "disk",
            "--agent-disk",
            &format!("configmap:{cm}"),
            "--channel",
            "vsock",
        ],
    );
    let vm = map(&docs, "cm").unwrap_or_else(|e| panic!("{e}"));
    assert!(vm.plan.vsock);
    assert_eq!(vm.disks.len(), 1, "{vm:?}");
    assert_eq!(vm.disks[0].serial, None);
    assert_eq!(vm.disks[0].label.as_deref(), Some("LAB-AGENT"));
    assert_eq!(iso_volume_id(&vm.disks[0].path), "LAB-AGENT");

    // The embedded agent over TCP: no disk after the seed, no vsock.
    let vm = map(&render("tcp", &["--channel", "tcp"]), "tcp").unwrap_or_else(|e| panic!("{e}"));
    assert!(!vm.plan.vsock && vm.disks.is_empty(), "{vm:?}");
    assert_eq!(vm.root_base, None);

    // A golden root: the claim's disk is the root's base.
    let vm = map(&render("golden", &["--golden-pvc", "golden-12"]), "golden")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        vm.plan.root,
        RootPlan::Ephemeral {
            claim: "golden-12".into()
        }
    );
    assert_eq!(vm.root_base.as_deref(), Some(golden.as_path()));

    // A session's VM: its `subdomain` is the cluster's DNS (the headless
    // Service), which the harness's NIC cannot mirror: named, not skipped.
    let two = repo_root().join("examples/two-vm-lab");
    let docs = render_session(&two, &dir.path, guest.arch(), &root);
    let vm_name = docs
        .iter()
        .find(|d| d["kind"] == "VirtualMachine")
        .and_then(|d| d["metadata"]["name"].as_str())
        .expect("a VirtualMachine")
        .to_owned();
    let e = map(&docs, &vm_name).unwrap_err();
    assert!(
        matches!(&e, ManifestError::Unmapped { path, .. } if path == "spec.template.spec.subdomain"),
        "{e}"
    );
}

fn render_session(lab: &Path, dir: &Path, arch: Arch, root: &str) -> Vec<Value> {
    let tokens = dir.join("session-{vm}.token");
    let yaml = dir.join("session.yaml");
    let out = Command::new(labctl_bin())
        .arg("render")
        .arg(lab)
        .args([
            "--name",
            "two",
            "--namespace",
            "labs",
            "--arch",
            arch.name(),
        ])
        .arg("--agent")
        .arg(static_agent_for(arch))
        .args(["--root-image", root, "--memory", "1Gi"])
        .args(["--backend-label", "app.kubernetes.io/name=lab-backend"])
        .arg("--token-out")
        .arg(&tokens)
        .arg("-o")
        .arg(&yaml)
        .stdin(Stdio::null())
        .output()
        .expect("run labctl render");
    assert!(out.status.success(), "labctl render: {}", describe(&out));
    manifest::load_yaml(&yaml).unwrap_or_else(|e| panic!("{e}"))
}
