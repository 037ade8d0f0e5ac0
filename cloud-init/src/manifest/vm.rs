//! The `VirtualMachine` (`kubevirt.io/v1`) of one lab VM: what its payload
//! needs from it, each field as kubevirt/kubevirt's Go types spell it
//! (`staging/src/kubevirt.io/api/core/v1/`):
//! - `cloudInitNoCloud.secretRef` (`CloudInitNoCloudSource.UserDataSecretRef`,
//!   `json:"secretRef"`): the user-data is far over the 2048 bytes KubeVirt
//!   allows inline;
//! - `devices.autoattachSerialConsole` (the web terminal's console, where the
//!   payload logs root in) and `autoattachVSOCK` when the agent listens on
//!   vsock (`Devices`, feature gate `VSOCK`);
//! - the agent's disk: `Disk.Serial` `lab-agent` on a containerDisk, or a
//!   `ConfigMapVolumeSource.VolumeLabel` `LAB-AGENT`, where the installer
//!   looks (`crate::agent_disk`);
//! - the root: a `containerDisk`, or the golden PVC as an `ephemeral`
//!   volume (`EphemeralVolumeSource`: a copy-on-write layer in the pod over
//!   the PVC mounted `readOnly`), never `dataVolumeTemplates` (the VM would
//!   own the golden, and deleting it would delete everyone's base);
//! - `architecture` (`VirtualMachineInstanceSpec.Architecture`) and the node
//!   selector `kubernetes.io/arch`: the payload's agent is built for one
//!   machine, and virt-controller adds an architecture selector only with
//!   cross-architecture virtualization on (`services/template.go`);
//! - `hostname` and `subdomain` for a session's VM; the labels on the VM
//!   and its template (the virt-launcher pod carries the template's, which
//!   the NetworkPolicy selects).

use super::{AgentDiskVolume, ManifestSpec, RootChoice, VmPlan};
use crate::agent_disk::{LABEL, SERIAL};
use crate::yaml::{Entry, Node, field, text};

pub(super) fn virtual_machine(
    spec: &ManifestSpec,
    vm: &VmPlan,
    root: &RootChoice,
    session: bool,
) -> Node {
    let labels = || Node::strings(&vm.labels);
    let mut metadata = vec![field("name", vm.name.as_str())];
    if let Some(ns) = &spec.namespace {
        metadata.push(field("namespace", ns.as_str()));
    }
    metadata.push(field("labels", labels()));

    let arch = spec.arch.name();
    let mut template = vec![
        field("architecture", arch),
        field(
            "nodeSelector",
            Node::map([text("kubernetes.io/arch", arch)]),
        )
        .comment("The payload's agent is built for this machine."),
    ];
    if let (true, Some(hostname)) = (session, &vm.vm) {
        template.push(field("hostname", hostname.as_str()));
        template.push(field("subdomain", spec.name.as_str()).comment(
            "The session's headless Service: this VM resolves as\n\
             HOSTNAME.SUBDOMAIN.NAMESPACE.svc.CLUSTER_DOMAIN.",
        ));
    }
    template.push(field("domain", domain(spec)));
    template.push(field(
        "networks",
        Node::list([Node::map([
            field("name", Node::Plain("default")),
            field("pod", Node::map([])),
        ])]),
    ));
    template.push(field("terminationGracePeriodSeconds", 30u32));
    template.push(field("volumes", Node::List(volumes(spec, vm, root))));

    Node::map([
        field("apiVersion", Node::Plain("kubevirt.io/v1")),
        field("kind", Node::Plain("VirtualMachine")),
        field("metadata", Node::Map(metadata)),
        field(
            "spec",
            Node::map([
                field("runStrategy", Node::Plain("Always")),
                field(
                    "template",
                    Node::map([
                        field("metadata", Node::map([field("labels", labels())])),
                        field("spec", Node::Map(template)),
                    ]),
                ),
            ]),
        ),
    ])
}

fn domain(spec: &ManifestSpec) -> Node {
    let mut devices = vec![field("autoattachSerialConsole", true).comment(
        "The web terminal's console (ttyS0, ttyAMA0 on arm64), where the payload logs\n\
         root in.",
    )];
    if spec.channel.vsock() {
        devices.push(
            field("autoattachVSOCK", true)
                .comment("The agent listens on vsock port 8899 (feature gate VSOCK)."),
        );
    }
    devices.push(field(
        "interfaces",
        Node::list([Node::map([
            field("name", Node::Plain("default")),
            field("masquerade", Node::map([])),
        ])]),
    ));
    let virtio = || Node::map([field("bus", Node::Plain("virtio"))]);
    let mut disks = vec![
        Node::map([
            field("name", Node::Plain("rootdisk")),
            field("disk", virtio()),
        ]),
        Node::map([
            field("name", Node::Plain("cloudinit")),
            field("disk", virtio()),
        ]),
    ];
    match &spec.agent_disk {
        Some(AgentDiskVolume::ContainerDisk(_)) => disks.push(Node::map([
            field("name", Node::Plain(SERIAL)),
            field("serial", Node::Plain(SERIAL)).comment(
                "/dev/disk/by-id/virtio-lab-agent: where the payload's installer looks for\n\
                 its agent.",
            ),
            field("disk", virtio()),
        ])),
        Some(AgentDiskVolume::ConfigMap(_)) => disks.push(Node::map([
            field("name", Node::Plain(SERIAL)),
            field("disk", virtio()),
        ])),
        None => {}
    }
    devices.push(field("disks", Node::List(disks)));
    Node::map([
        field("cpu", Node::map([field("cores", spec.cpus)])),
        field("memory", Node::map([field("guest", spec.memory.as_str())])),
        field("devices", Node::Map(devices)),
    ])
}

fn volumes(spec: &ManifestSpec, vm: &VmPlan, root: &RootChoice) -> Vec<Node> {
    let root = match root {
        RootChoice::Golden { claim } => field(
            "ephemeral",
            Node::map([field(
                "persistentVolumeClaim",
                Node::map([field("claimName", claim.as_str()), field("readOnly", true)]),
            )]),
        )
        .comment(
            "The golden PVC, never written: each VM writes to its own layer in its pod,\n\
             gone with it. Never `dataVolumeTemplates`: the VM must not own the golden.",
        ),
        RootChoice::ContainerDisk { image, .. } => {
            field("containerDisk", Node::map([field("image", image.as_str())]))
        }
    };
    let mut volumes = vec![
        Node::map([field("name", Node::Plain("rootdisk")), root]),
        Node::map([
            field("name", Node::Plain("cloudinit")),
            field(
                "cloudInitNoCloud",
                Node::map([field(
                    "secretRef",
                    Node::map([field("name", vm.secret.name.as_str())]),
                )
                .comment(
                    "KubeVirt's UserDataSecretRef: the user-data is over the 2048 bytes it\n\
                     takes inline.",
                )]),
            ),
        ]),
    ];
    let agent: Option<Entry> = match &spec.agent_disk {
        Some(AgentDiskVolume::ContainerDisk(image)) => Some(field(
            "containerDisk",
            Node::map([field("image", image.as_str())]),
        )),
        Some(AgentDiskVolume::ConfigMap(name)) => Some(
            field(
                "configMap",
                Node::map([
                    field("name", name.as_str()),
                    field("volumeLabel", Node::Plain(LABEL)),
                ]),
            )
            .comment(
                "KubeVirt writes the ConfigMap's keys into an ISO labelled so:\n\
                 /dev/disk/by-label/LAB-AGENT, where the installer looks.",
            ),
        ),
        None => None,
    };
    if let Some(agent) = agent {
        volumes.push(Node::map([field("name", Node::Plain(SERIAL)), agent]));
    }
    volumes
}
