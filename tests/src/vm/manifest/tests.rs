//! The mapping over hand-written objects shaped as `labctl render` writes
//! them (the VM tests feed it the real renderer's output).

use super::fields::mebibytes;
use super::*;
use crate::vm::Arch;
use serde_json::json;
use std::time::Duration;

/// A VM as `labctl render --agent-from disk --agent-disk containerdisk:…
/// --channel both` renders it.
fn vm() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "hello", "namespace": "labs", "labels": {"lab-agent/session": "hello"}},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"lab-agent/session": "hello"}},
                "spec": {
                    "architecture": "amd64",
                    "nodeSelector": {"kubernetes.io/arch": "amd64"},
                    "domain": {
                        "cpu": {"cores": 2},
                        "memory": {"guest": "1Gi"},
                        "devices": {
                            "autoattachSerialConsole": true,
                            "autoattachVSOCK": true,
                            "interfaces": [{"name": "default", "masquerade": {}}],
                            "disks": [
                                {"name": "rootdisk", "disk": {"bus": "virtio"}},
                                {"name": "cloudinit", "disk": {"bus": "virtio"}},
                                {"name": "lab-agent", "serial": "lab-agent", "disk": {"bus": "virtio"}}
                            ]
                        }
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "terminationGracePeriodSeconds": 30,
                    "volumes": [
                        {"name": "rootdisk", "containerDisk": {"image": "guest:12"}},
                        {"name": "cloudinit", "cloudInitNoCloud": {"secretRef": {"name": "hello-userdata"}}},
                        {"name": "lab-agent", "containerDisk": {"image": "agent:1"}}
                    ]
                }
            }
        }
    })
}

fn secret() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "hello-userdata", "namespace": "labs",
            "labels": {"lab-agent/session": "hello"},
            "annotations": {"lab-agent/ready-timeout-secs": "150"}
        },
        "type": "Opaque",
        "data": {"userdata": "I2Nsb3VkLWNvbmZpZwo="}
    })
}

/// A field's path, and the change that puts it there.
type Case = (&'static str, fn(&mut Value));

fn template(vm: &mut Value) -> &mut Value {
    &mut vm["spec"]["template"]["spec"]
}

#[test]
fn a_rendered_vm_becomes_its_plan() {
    let plan = parse_vm(&vm()).unwrap();
    assert_eq!(
        plan,
        VmPlan {
            name: "hello".into(),
            namespace: Some("labs".into()),
            arch: Arch::Amd64,
            cpus: 2,
            memory_mib: 1024,
            hostname: "hello".into(),
            vsock: true,
            grace: Duration::from_secs(30),
            root: RootPlan::ContainerDisk {
                image: "guest:12".into()
            },
            user_data_secret: "hello-userdata".into(),
            disks: vec![DiskPlan {
                name: "lab-agent".into(),
                serial: Some("lab-agent".into()),
                source: VolumePlan::ContainerDisk {
                    image: "agent:1".into(),
                    path: None
                },
            }],
        }
    );
    assert_eq!(secret_user_data(&secret()).unwrap(), b"#cloud-config\n");
}

#[test]
fn a_configmap_volume_is_an_iso_with_its_label_or_kubevirts_default() {
    let mut v = vm();
    template(&mut v)["domain"]["devices"]["disks"][2] =
        json!({"name": "lab-agent", "disk": {"bus": "virtio"}});
    template(&mut v)["volumes"][2] = json!({"name": "lab-agent",
        "configMap": {"name": "lab-agent-1234", "volumeLabel": "LAB-AGENT"}});
    template(&mut v)["domain"]["devices"]
        .as_object_mut()
        .unwrap()
        .remove("autoattachVSOCK");
    let plan = parse_vm(&v).unwrap();
    assert!(!plan.vsock);
    assert_eq!(
        plan.disks[0].source,
        VolumePlan::ConfigMap {
            name: "lab-agent-1234".into(),
            label: "LAB-AGENT".into()
        }
    );
    assert_eq!(plan.disks[0].serial, None);
    template(&mut v)["volumes"][2]["configMap"]
        .as_object_mut()
        .unwrap()
        .remove("volumeLabel");
    assert_eq!(
        parse_vm(&v).unwrap().disks[0].source,
        VolumePlan::ConfigMap {
            name: "lab-agent-1234".into(),
            label: "cfgdata".into()
        }
    );
}

#[test]
fn a_golden_root_is_an_ephemeral_read_only_claim() {
    let mut v = vm();
    template(&mut v)["volumes"][0] = json!({"name": "rootdisk",
        "ephemeral": {"persistentVolumeClaim": {"claimName": "golden-12", "readOnly": true}}});
    assert_eq!(
        parse_vm(&v).unwrap().root,
        RootPlan::Ephemeral {
            claim: "golden-12".into()
        }
    );
    template(&mut v)["volumes"][0]["ephemeral"]["persistentVolumeClaim"]["readOnly"] = json!(false);
    let e = parse_vm(&v).unwrap_err().to_string();
    assert!(
        e.contains("spec.template.spec.volumes[0].ephemeral.persistentVolumeClaim.readOnly"),
        "{e}"
    );
}

/// Every field the mapping does not know is named, wherever it is.
#[test]
fn an_unknown_field_is_an_error_naming_it() {
    let cases: [Case; 7] = [
        ("status", |v| v["status"] = json!({})),
        ("spec.dataVolumeTemplates", |v| {
            v["spec"]["dataVolumeTemplates"] = json!([])
        }),
        ("spec.template.spec.subdomain", |v| {
            template(v)["subdomain"] = json!("s")
        }),
        ("spec.template.spec.domain.cpu.sockets", |v| {
            template(v)["domain"]["cpu"]["sockets"] = json!(2)
        }),
        ("spec.template.spec.domain.devices.rng", |v| {
            template(v)["domain"]["devices"]["rng"] = json!({})
        }),
        (
            "spec.template.spec.domain.devices.disks[2].bootOrder",
            |v| template(v)["domain"]["devices"]["disks"][2]["bootOrder"] = json!(1),
        ),
        (
            "spec.template.spec.volumes[2].containerDisk.imagePullPolicy",
            |v| template(v)["volumes"][2]["containerDisk"]["imagePullPolicy"] = json!("Always"),
        ),
    ];
    for (path, change) in cases {
        let mut v = vm();
        change(&mut v);
        let e = parse_vm(&v).unwrap_err();
        assert!(
            matches!(&e, ManifestError::Unmapped { path: p, .. } if p == path),
            "{path}: {e}"
        );
        assert!(e.to_string().contains("tests/vm/README.md"), "{e}");
    }
    // A volume source it does not know.
    let mut v = vm();
    template(&mut v)["volumes"][2] = json!({"name": "lab-agent", "secret": {"secretName": "x"}});
    let e = parse_vm(&v).unwrap_err().to_string();
    assert!(e.contains("`spec.template.spec.volumes[2].secret`"), "{e}");
    // In the Secret too.
    let mut s = secret();
    s["data"]["networkdata"] = json!("");
    let e = secret_user_data(&s).unwrap_err().to_string();
    assert!(e.contains("`Secret.data.networkdata`"), "{e}");
}

#[test]
fn what_the_harness_cannot_mirror_is_refused() {
    let cases: [Case; 7] = [
        ("spec.runStrategy", |v| {
            v["spec"]["runStrategy"] = json!("Halted")
        }),
        ("spec.template.spec.nodeSelector.kubernetes.io/arch", |v| {
            template(v)["nodeSelector"]["kubernetes.io/arch"] = json!("arm64")
        }),
        ("spec.template.spec.architecture", |v| {
            template(v)["architecture"] = json!("s390x")
        }),
        (
            "spec.template.spec.domain.devices.autoattachSerialConsole",
            |v| template(v)["domain"]["devices"]["autoattachSerialConsole"] = json!(false),
        ),
        ("spec.template.spec.domain.devices.disks[2].disk.bus", |v| {
            template(v)["domain"]["devices"]["disks"][2]["disk"]["bus"] = json!("sata")
        }),
        ("spec.template.spec.domain.devices.disks[0]", |v| {
            // The seed before the root.
            template(v)["domain"]["devices"]["disks"]
                .as_array_mut()
                .unwrap()
                .swap(0, 1)
        }),
        ("spec.template.spec.domain.memory.guest", |v| {
            template(v)["domain"]["memory"]["guest"] = json!("1.5Gi")
        }),
    ];
    for (path, change) in cases {
        let mut v = vm();
        change(&mut v);
        let e = parse_vm(&v).unwrap_err();
        assert!(
            matches!(&e, ManifestError::Unsupported { path: p, .. } if p == path),
            "{path}: {e}"
        );
    }
    // A disk without its volume, a volume without its disk.
    let mut v = vm();
    template(&mut v)["volumes"].as_array_mut().unwrap().pop();
    let e = parse_vm(&v).unwrap_err().to_string();
    assert!(e.contains("a disk without its volume"), "{e}");
    let mut v = vm();
    template(&mut v)["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .pop();
    let e = parse_vm(&v).unwrap_err().to_string();
    assert!(e.contains("a volume without its disk"), "{e}");
}

#[test]
fn memory_is_whole_mebibytes() {
    let m = |q| mebibytes("m", q);
    assert_eq!(m("1Gi").unwrap(), 1024);
    assert_eq!(m("512Mi").unwrap(), 512);
    assert_eq!(m("4096Mi").unwrap(), 4096);
    assert_eq!(m("2097152Ki").unwrap(), 2048);
    assert_eq!(m("1048576").unwrap(), 1);
    assert_eq!(m("1048576000").unwrap(), 1000);
    for bad in ["1G", "1.5Gi", "Gi", "0", "1Pi", "-1Gi", "1 Gi"] {
        assert!(m(bad).is_err(), "{bad}");
    }
}

/// KubeVirt's `CalculateLegacyUUID`: the value Python's
/// `uuid.uuid5(UUID('6a1a24a1-4061-4607-8bf4-a3963d0c5895'), 'testvm')`
/// gives (the same SHA-1 name-based UUID as Go's `uuid.NewSHA1`).
#[test]
fn the_instance_id_is_kubevirts_firmware_uuid() {
    assert_eq!(
        firmware_uuid("testvm"),
        "5a9fc181-957e-5c32-9e5a-2de5e9673531"
    );
    assert_eq!(
        meta_data("testvm", "testvm"),
        r#"{"instance-id":"5a9fc181-957e-5c32-9e5a-2de5e9673531","local-hostname":"testvm"}"#
    );
    let mut v = vm();
    template(&mut v)["hostname"] = json!("web");
    assert_eq!(parse_vm(&v).unwrap().hostname, "web");
}

#[test]
fn the_secret_must_hold_the_user_data_where_kubevirt_reads_it() {
    let mut s = secret();
    s["data"] = json!({"userData": "I2Nsb3VkLWNvbmZpZwo="});
    assert_eq!(secret_user_data(&s).unwrap(), b"#cloud-config\n");
    s["data"] = json!({"user-data": "I2Nsb3VkLWNvbmZpZwo="});
    let e = secret_user_data(&s).unwrap_err().to_string();
    assert!(e.contains("`userdata` or `userData`"), "{e}");
    let mut s = secret();
    s["data"]["userdata"] = json!("not base64!");
    assert!(secret_user_data(&s).is_err());
}

#[test]
fn the_vm_and_its_secret_are_found_in_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster {
        guest_image: "guest:12".into(),
        ..Cluster::default()
    };
    let mut v = vm();
    template(&mut v)["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .pop();
    template(&mut v)["volumes"].as_array_mut().unwrap().pop();
    let mapped = map(&[secret(), v.clone()], "hello", &cluster, dir.path()).unwrap();
    assert_eq!(mapped.user_data, b"#cloud-config\n");
    assert!(mapped.disks.is_empty() && mapped.root_base.is_none());
    // Another VM's name, a Secret of another namespace, another root image.
    assert!(map(&[secret(), v.clone()], "other", &cluster, dir.path()).is_err());
    let mut elsewhere = secret();
    elsewhere["metadata"]["namespace"] = json!("other");
    let e = map(&[elsewhere, v.clone()], "hello", &cluster, dir.path()).unwrap_err();
    assert!(e.to_string().contains("VM's namespace (labs)"), "{e}");
    let cluster = Cluster {
        guest_image: "guest:13".into(),
        ..Cluster::default()
    };
    let e = map(&[secret(), v], "hello", &cluster, dir.path()).unwrap_err();
    assert!(e.to_string().contains("--root-image guest:13"), "{e}");
}
