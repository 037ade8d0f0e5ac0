//! The objects around the Secret (`manifest`): snapshots of a VM and of a
//! session, and every pair of inputs that cannot work together refused,
//! naming both. The whole render (payloads included) is checked against
//! KubeVirt's rules and kubernetes-validate in `tests/tests/payload/`.

use crate::support::assert_snapshot;
use lab_agent_cloudinit::manifest::{
    self, AgentDiskVolume, Backend, Document, GOLDEN_IMAGE_ANNOTATION, LabShape, ManifestError,
    ManifestSpec, Plan, Reason, RootChoice,
};
use lab_agent_cloudinit::{AgentFrom, Arch, Channel};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const IMAGE: &str = "quay.io/containerdisks/debian:12";

fn spec() -> ManifestSpec {
    ManifestSpec {
        name: "lab-s-0123abcd".into(),
        namespace: Some("lab-vms".into()),
        labels: BTreeMap::from([("tt-lab.example/session-id".into(), "s-0123abcd".into())]),
        arch: Arch::Amd64,
        agent_from: AgentFrom::Disk,
        agent_disk: Some(AgentDiskVolume::ContainerDisk(
            "registry.example/lab-agent:0.1.0".into(),
        )),
        channel: Channel::Both,
        root_image: IMAGE.into(),
        golden_pvc: None,
        golden_observed: None,
        cpus: 2,
        memory: "4Gi".into(),
        backend: Backend {
            namespace: Some("tt-lab".into()),
            labels: BTreeMap::from([("app.kubernetes.io/name".into(), "tt-lab-backend".into())]),
        },
        cluster_domain: "cluster.local".into(),
    }
}

fn no_params() -> &'static BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    &EMPTY
}

fn one_vm() -> LabShape<'static> {
    LabShape {
        lab: "hello-lab",
        vms: vec![],
        only: None,
        min_root_bytes: None,
        params: no_params(),
    }
}

fn session() -> LabShape<'static> {
    LabShape {
        vms: vec!["server", "client"],
        lab: "two-vm-lab",
        ..one_vm()
    }
}

/// The plan's objects with a stand-in for each Secret (the payload's own
/// tests pin the real ones).
fn documents(plan: &Plan) -> Vec<Document> {
    let secrets = plan
        .vms
        .iter()
        .map(|vm| Document {
            kind: "Secret",
            name: vm.secret.name.clone(),
            vm: vm.vm.clone(),
            yaml: format!("# the Secret {}\n", vm.secret.name),
            json: json!({}),
        })
        .collect();
    plan.documents(secrets)
}

#[test]
fn one_vm_with_the_agents_disk() {
    let plan = manifest::plan(&spec(), &one_vm()).unwrap();
    let docs = documents(&plan);
    let kinds: Vec<&str> = docs.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, ["NetworkPolicy", "Secret", "VirtualMachine"]);
    assert_eq!(plan.vms[0].secret.name, "lab-s-0123abcd-userdata");
    assert!(plan.vms[0].params.is_empty());
    assert_snapshot("hello-lab.manifests.yaml", &manifest::join(&docs));
    // The JSON is the same tree.
    let vm = &docs[2].json;
    let spec = &vm["spec"]["template"]["spec"];
    assert_eq!(
        spec["volumes"][1]["cloudInitNoCloud"]["secretRef"]["name"],
        "lab-s-0123abcd-userdata"
    );
    assert_eq!(spec["domain"]["devices"]["disks"][2]["serial"], "lab-agent");
    assert_eq!(spec["domain"]["devices"]["autoattachVSOCK"], true);
    assert_eq!(
        vm["metadata"]["labels"],
        vm["spec"]["template"]["metadata"]["labels"]
    );
}

#[test]
fn a_session_on_a_golden_with_the_configmap_over_vsock() {
    let mut s = spec();
    s.name = "lab-s-4567cdef".into();
    s.channel = Channel::Vsock;
    s.backend = Backend::default();
    s.agent_disk = Some(AgentDiskVolume::ConfigMap("lab-agent-afb16660d5a4".into()));
    s.golden_pvc = Some("golden-debian-12-10gi".into());
    s.memory = "2Gi".into();
    let plan = manifest::plan(&s, &session()).unwrap();
    assert_eq!(
        plan.root,
        RootChoice::Golden {
            claim: "golden-debian-12-10gi".into()
        }
    );
    let names: Vec<&str> = plan.vms.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["lab-s-4567cdef-server", "lab-s-4567cdef-client"]);
    assert_eq!(
        plan.vms[0].params["SESSION_DOMAIN"],
        "lab-s-4567cdef.lab-vms.svc.cluster.local"
    );
    let docs = documents(&plan);
    let kinds: Vec<&str> = docs.iter().map(|d| d.kind).collect();
    assert_eq!(
        kinds,
        [
            "NetworkPolicy",
            "Service",
            "Secret",
            "VirtualMachine",
            "Secret",
            "VirtualMachine"
        ]
    );
    assert_snapshot("two-vm-lab.manifests.yaml", &manifest::join(&docs));
    // No hole for 8899 from anywhere: the peers' rule alone.
    let ingress = docs[0].json["spec"]["ingress"].as_array().unwrap().clone();
    assert_eq!(ingress.len(), 1);
    let ports: Vec<(u64, u64)> = ingress[0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["protocol"] == "TCP")
        .map(|p| (p["port"].as_u64().unwrap(), p["endPort"].as_u64().unwrap()))
        .collect();
    assert_eq!(ports, [(1, 8898), (8900, 65535)]);

    // `--vm`: that VM, and the session's objects as before.
    let only = LabShape {
        only: Some("client"),
        ..session()
    };
    let plan = manifest::plan(&s, &only).unwrap();
    let docs = documents(&plan);
    let names: Vec<&str> = docs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "lab-s-4567cdef",
            "lab-s-4567cdef",
            "lab-s-4567cdef-client-userdata",
            "lab-s-4567cdef-client"
        ]
    );
}

/// One VM reached over vsock alone: a policy that lets nothing in.
#[test]
fn vsock_alone_opens_nothing() {
    let mut s = spec();
    s.channel = Channel::Vsock;
    s.backend = Backend::default();
    let docs = documents(&manifest::plan(&s, &one_vm()).unwrap());
    assert_eq!(docs[0].json["spec"]["ingress"], json!([]));
    assert!(
        docs[0]
            .yaml
            .contains("  # None: the agent listens on vsock alone"),
        "{}",
        docs[0].yaml
    );
    s.channel = Channel::Tcp;
    s.backend.labels.insert("app".into(), "backend".into());
    let docs = documents(&manifest::plan(&s, &one_vm()).unwrap());
    let devices = &docs[2].json["spec"]["template"]["spec"]["domain"]["devices"];
    assert!(devices.get("autoattachVSOCK").is_none(), "{devices}");
    assert_eq!(
        docs[0].json["spec"]["ingress"][0]["from"],
        json!([{"podSelector": {"matchLabels": {"app": "backend"}}}])
    );
}

/// Each pair that cannot work together: an error naming both sides.
#[test]
fn inputs_that_cannot_work_together_are_refused_naming_both() {
    type Change = fn(&mut ManifestSpec, &mut LabShape<'static>);
    let cases: Vec<(&str, Change, &str, &str)> = vec![
        (
            "disk without its volume",
            |s, _| s.agent_disk = None,
            "`--agent-from disk`",
            "no `--agent-disk`",
        ),
        (
            "a volume for an embedded agent",
            |s, _| s.agent_from = AgentFrom::Embedded,
            "`--agent-disk containerdisk:registry.example/lab-agent:0.1.0`",
            "`--agent-from embedded`",
        ),
        (
            "our own label",
            |s, _| {
                s.labels.insert("lab-agent/session".into(), "x".into());
            },
            "`--label lab-agent/session=x`",
            "the label `lab-agent/session=lab-s-0123abcd` render sets",
        ),
        (
            "a backend selector the VMs match",
            |s, _| {
                s.backend.namespace = None;
                s.backend.labels = s.labels.clone();
            },
            "`--backend-label tt-lab.example/session-id=s-0123abcd`",
            "`--label tt-lab.example/session-id=s-0123abcd`",
        ),
        (
            "tcp without a backend",
            |s, _| s.backend = Backend::default(),
            "`--channel both`",
            "no `--backend-namespace` or `--backend-label`",
        ),
        (
            "vsock with a backend",
            |s, _| s.channel = Channel::Vsock,
            "`--channel vsock`",
            "`--backend-namespace`/`--backend-label`",
        ),
        (
            "a session without a namespace",
            |s, l| {
                s.namespace = None;
                *l = session();
            },
            "a session (lab `two-vm-lab` has VMs server, client)",
            "no `--namespace`",
        ),
        (
            "two golden names",
            |s, _| {
                s.golden_pvc = Some("a".into());
                s.golden_observed = Some(golden_pvc("b", "10Gi"));
            },
            "`--golden-pvc a`",
            "`--golden-pvc-json`'s PVC `b`",
        ),
        (
            "a golden too small",
            |s, l| {
                s.golden_observed = Some(golden_pvc("golden", "8Gi"));
                l.min_root_bytes = Some(9 << 30);
            },
            "golden PVC `golden` of 8Gi",
            "lab `hello-lab`'s `min_root_bytes = 9663676416`",
        ),
    ];
    for (what, change, first, second) in cases {
        let (mut s, mut shape) = (spec(), one_vm());
        change(&mut s, &mut shape);
        match manifest::plan(&s, &shape) {
            Err(ManifestError::Conflict {
                first: f,
                second: sec,
                why,
            }) => {
                assert_eq!((f.as_str(), sec.as_str()), (first, second), "{what}: {why}");
                assert!(!why.is_empty());
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    // A session's domain is the render's to give.
    let params = BTreeMap::from([("SESSION_DOMAIN".to_owned(), "x".to_owned())]);
    let shape = LabShape {
        params: Box::leak(Box::new(params)),
        ..session()
    };
    let err = manifest::plan(&spec(), &shape).unwrap_err().to_string();
    assert!(err.starts_with("`--param SESSION_DOMAIN=x` and the session's domain `lab-s-0123abcd.lab-vms.svc.cluster.local`"), "{err}");
}

#[test]
fn names_and_quantities_are_checked() {
    type Case = (fn(&mut ManifestSpec), &'static str);
    let cases: Vec<Case> = vec![
        (|s| s.name = "Lab".into(), "invalid name `Lab`"),
        (|s| s.name = "a".repeat(64), "invalid name"),
        (
            |s| s.memory = "4GB".into(),
            "invalid memory `4GB`: has the unknown unit `GB`",
        ),
        (|s| s.memory = "0".into(), "invalid memory `0`: is zero"),
        (|s| s.cpus = 0, "invalid CPU count"),
        (
            |s| s.agent_disk = Some(AgentDiskVolume::ConfigMap("Bad_Name".into())),
            "invalid ConfigMap name",
        ),
        (|s| s.root_image = String::new(), "invalid root image"),
    ];
    for (change, want) in cases {
        let mut s = spec();
        change(&mut s);
        let err = manifest::plan(&s, &one_vm()).unwrap_err().to_string();
        assert!(err.starts_with(want), "{err}");
    }
    // A session's VM names `NAME-VM` are VM names too, and its Service's
    // name starts with a letter.
    let mut s = spec();
    s.name = "a".repeat(57);
    let err = manifest::plan(&s, &session()).unwrap_err().to_string();
    assert!(err.contains("makes VM `aaaa"), "{err}");
    s.name = "0-session".into();
    let err = manifest::plan(&s, &session()).unwrap_err().to_string();
    assert!(err.contains("must start with a letter"), "{err}");
    for bad in ["disk:x", "containerdisk:", "configmap"] {
        assert!(bad.parse::<AgentDiskVolume>().is_err(), "{bad}");
    }
}

fn golden_pvc(name: &str, size: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "annotations": {GOLDEN_IMAGE_ANNOTATION: IMAGE}},
        "spec": {"accessModes": ["ReadWriteMany"]},
        "status": {"phase": "Bound", "capacity": {"storage": size}},
    })
}

/// `--golden-pvc-json`: a usable golden is the root; an unusable one
/// leaves the containerDisk, with the reason; a missing one too.
#[test]
fn the_golden_is_judged_and_falls_back_with_its_reason() {
    let mut s = spec();
    s.golden_observed = Some(golden_pvc("golden-debian-12-10gi", "10Gi"));
    let shape = LabShape {
        min_root_bytes: Some(9 << 30),
        ..one_vm()
    };
    let plan = manifest::plan(&s, &shape).unwrap();
    assert_eq!(
        plan.root,
        RootChoice::Golden {
            claim: "golden-debian-12-10gi".into()
        }
    );
    let vm = documents(&plan).pop().unwrap().json;
    assert_eq!(
        vm["spec"]["template"]["spec"]["volumes"][0],
        json!({"name": "rootdisk", "ephemeral": {"persistentVolumeClaim": {"claimName": "golden-debian-12-10gi", "readOnly": true}}})
    );
    let mut terminating = golden_pvc("golden-debian-12-10gi", "10Gi");
    terminating["metadata"]["deletionTimestamp"] = json!("2026-10-16T00:00:00Z");
    for (observed, reason) in [
        (terminating, Reason::Terminating),
        (Value::Null, Reason::Missing),
    ] {
        s.golden_observed = Some(observed);
        let plan = manifest::plan(&s, &shape).unwrap();
        let RootChoice::ContainerDisk {
            image,
            fallback: Some(why),
        } = &plan.root
        else {
            panic!("{:?}", plan.root);
        };
        assert_eq!((image.as_str(), &why.reason), (IMAGE, &reason));
        let vm = documents(&plan).pop().unwrap().json;
        assert_eq!(
            vm["spec"]["template"]["spec"]["volumes"][0]["containerDisk"]["image"],
            IMAGE
        );
        assert!(!vm.to_string().contains("ephemeral"));
    }
}
