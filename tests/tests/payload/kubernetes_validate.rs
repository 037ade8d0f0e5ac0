//! The manifests against Kubernetes' own schemas (`kubernetes-validate
//! --strict`, cluster version 1.34), and the KubeVirt example against the
//! Secret and NetworkPolicy it relies on.

use crate::support::{TempDir, fixture_lab, labs, run, secret, spec_for, user_data, workspace};
use lab_agent_cloudinit::Format;
use lab_agent_tests::pydeps;
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// `kubernetes-validate --strict -k 1.34.0 FILE` (the platform's cluster
/// version), from the test virtualenv (`tests/pydeps.sh`).
pub(crate) fn kubernetes_validate(file: &Path) -> Output {
    run(
        pydeps::venv_tool("kubernetes-validate")
            .args(["--strict", "-k", "1.34.0"])
            .arg(file),
        pydeps::HINT,
    )
}

pub(crate) fn assert_valid(file: &Path) {
    let out = kubernetes_validate(file);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.contains("passed"),
        "`{}`: kubernetes-validate said:\n{said}",
        file.display()
    );
}

#[test]
fn secrets_pass_strict_validation() {
    for lab in labs() {
        let ud = user_data(&spec_for(&lab));
        for (format, name) in [(Format::Yaml, "secret.yaml"), (Format::Json, "secret.json")] {
            let dir = TempDir::new("k8s");
            assert_valid(&dir.write(name, secret(&ud, format)));
        }
    }
}

/// So that a pass means something: an unknown field fails under `--strict`.
#[test]
fn a_secret_with_an_unknown_field_fails() {
    let ud = user_data(&spec_for(&fixture_lab()));
    let text = secret(&ud, Format::Yaml).replace("type: Opaque", "type: Opaque\nstringdata: {}");
    let dir = TempDir::new("k8s-bad");
    let out = kubernetes_validate(&dir.write("secret.yaml", text));
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn example_network_policy_passes_strict_validation() {
    for file in [
        "networkpolicy.yaml",
        "vsock/networkpolicy.yaml",
        "vsock/role.yaml",
        "vsock/rolebinding.yaml",
    ] {
        assert_valid(&workspace().join("examples/kubevirt").join(file));
    }
}

/// kubernetes-validate has no KubeVirt schemas, so check what the VM must
/// agree on with the other objects: the one-VM example and its two
/// variants with the agent's disk (the policy opens 8899 to the backend),
/// and the one on vsock (its policy opens nothing).
#[test]
fn example_vms_match_their_secret_and_policy() {
    let dir = workspace().join("examples/kubevirt");
    let to_the_agent = serde_json::json!([{"protocol": "TCP", "port": 8899}]);
    for file in [
        "virtualmachine.yaml",
        "agent-disk/virtualmachine-containerdisk.yaml",
        "agent-disk/virtualmachine-configmap.yaml",
    ] {
        let vm = vm_matches_its_secret_and_policy(
            &dir.join(file),
            &dir.join("networkpolicy.yaml"),
            Some(&to_the_agent),
        );
        let devices = &vm["spec"]["template"]["spec"]["domain"]["devices"];
        assert!(devices.get("autoattachVSOCK").is_none(), "{file}");
    }
    let vm = vm_matches_its_secret_and_policy(
        &dir.join("vsock/virtualmachine.yaml"),
        &dir.join("vsock/networkpolicy.yaml"),
        None,
    );
    let devices = &vm["spec"]["template"]["spec"]["domain"]["devices"];
    assert_eq!(devices["autoattachVSOCK"], true, "{vm}");
}

/// The vsock example's RBAC grants what `kubevirt://NAMESPACE/VMI` asks
/// the API server for (`GET …/namespaces/NS/virtualmachineinstances/NAME/vsock`
/// in `subresources.kubevirt.io`), in the VMs' namespace, and no more.
#[test]
fn example_vsock_rbac_grants_the_subresource_only() {
    let dir = workspace().join("examples/kubevirt/vsock");
    let role = load_yaml(&dir.join("role.yaml"));
    let binding = load_yaml(&dir.join("rolebinding.yaml"));
    let vm = load_yaml(&dir.join("virtualmachine.yaml"));
    assert_eq!(role["kind"], "Role");
    assert_eq!(role["metadata"]["namespace"], vm["metadata"]["namespace"]);
    assert_eq!(
        role["rules"],
        serde_json::json!([{
            "apiGroups": ["subresources.kubevirt.io"],
            "resources": ["virtualmachineinstances/vsock"],
            "verbs": ["get"],
        }])
    );
    assert_eq!(
        binding["metadata"]["namespace"],
        role["metadata"]["namespace"]
    );
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = binding["subjects"].as_array().unwrap();
    assert_eq!(subjects.len(), 1, "{binding}");
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
}

/// The agent's disk as the installer looks for it: the containerDisk's
/// disk with `serial: lab-agent`, or the ConfigMap volume labelled
/// `LAB-AGENT` (a name `labctl agent-disk` gives it).
#[test]
fn example_agent_disks_are_where_the_installer_looks() {
    use lab_agent_cloudinit::agent_disk::{LABEL, SERIAL};
    let dir = workspace().join("examples/kubevirt/agent-disk");
    let agent_disk = |file: &str| {
        let vm = load_yaml(&dir.join(file));
        let spec = &vm["spec"]["template"]["spec"];
        let disk = spec["domain"]["devices"]["disks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == "lab-agent")
            .cloned()
            .expect("a lab-agent disk");
        let volume = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "lab-agent")
            .cloned()
            .expect("a lab-agent volume");
        (disk, volume)
    };
    let (disk, volume) = agent_disk("virtualmachine-containerdisk.yaml");
    assert_eq!(disk["serial"], SERIAL);
    assert_eq!(disk["disk"]["bus"], "virtio");
    assert!(volume["containerDisk"]["image"].is_string(), "{volume}");
    let (disk, volume) = agent_disk("virtualmachine-configmap.yaml");
    assert_eq!(volume["configMap"]["volumeLabel"], LABEL);
    let name = volume["configMap"]["name"].as_str().unwrap();
    assert!(name.starts_with("lab-agent-") && name.len() == "lab-agent-".len() + 12);
    assert_eq!(disk["disk"]["bus"], "virtio");
}

/// `file`'s VM against its Secret's name rules and `policy`, whose one
/// ingress rule opens `ports` (`None`: no ingress rule at all). The VM.
/// The README's vsock walk-through: its `labctl secret --channel vsock`
/// names the Secret the vsock VM's `secretRef` names, in its namespace; it
/// applies `vsock/`, and every call reaches the VM by `kubevirt://` (none
/// over TCP).
#[test]
fn example_vsock_walk_through_matches_its_manifests() {
    let dir = workspace().join("examples/kubevirt");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let block = readme
        .split("```sh")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("--channel vsock"))
        .expect("README.md has a block with `labctl secret --channel vsock`");
    // One command per line: continuations joined, runs of spaces one.
    let block = block
        .replace("\\\n", " ")
        .split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let vm = load_yaml(&dir.join("vsock/virtualmachine.yaml"));
    let (name, ns) = (&vm["metadata"]["name"], &vm["metadata"]["namespace"]);
    let (name, ns) = (name.as_str().unwrap(), ns.as_str().unwrap());
    let secret_ref = vm["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| v["cloudInitNoCloud"]["secretRef"]["name"].as_str())
        .unwrap();
    assert!(
        block.contains(&format!("--name {secret_ref} --namespace {ns}")),
        "{block}"
    );
    assert!(block.contains("-f examples/kubevirt/vsock/"), "{block}");
    let url = format!("--url kubevirt://{ns}/{name} ");
    let calls = block.matches("labctl wait").count() + block.matches("labctl grade").count();
    assert!(
        calls >= 2 && block.matches(&url).count() == calls,
        "{block}"
    );
    assert!(!block.contains("http://"), "{block}");
}

fn vm_matches_its_secret_and_policy(file: &Path, policy: &Path, ports: Option<&Value>) -> Value {
    let vm = load_yaml(file);
    let policy = load_yaml(policy);
    assert_eq!(vm["apiVersion"], "kubevirt.io/v1");
    assert_eq!(vm["kind"], "VirtualMachine");
    let template = &vm["spec"]["template"];
    let volumes = template["spec"]["volumes"].as_array().unwrap();
    let cloud_init = volumes
        .iter()
        .find_map(|v| v.get("cloudInitNoCloud"))
        .expect("a cloudInitNoCloud volume");
    // `secretRef` is the JSON name of KubeVirt's UserDataSecretRef.
    assert_eq!(
        cloud_init.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["secretRef"]
    );
    let secret_name = cloud_init["secretRef"]["name"].as_str().unwrap();
    lab_agent_cloudinit::SecretMeta::new(secret_name)
        .validate()
        .unwrap();
    let disks = template["spec"]["domain"]["devices"]["disks"]
        .as_array()
        .unwrap();
    for v in volumes {
        assert!(
            disks.iter().any(|d| d["name"] == v["name"]),
            "volume {} has no disk",
            v["name"]
        );
    }
    // The labels a backend sets, on the VM and on the pod template.
    for key in [
        "tt-lab.example/lab-session",
        "tt-lab.example/session-id",
        "tt-lab.example/environment",
    ] {
        assert!(
            vm["metadata"]["labels"].get(key).is_some(),
            "VM lacks {key}"
        );
        assert_eq!(
            vm["metadata"]["labels"][key], template["metadata"]["labels"][key],
            "{key} differs between the VM and its template"
        );
    }
    // The policy selects the template's pods and opens 8899 only, or
    // nothing.
    assert_eq!(vm["metadata"]["namespace"], policy["metadata"]["namespace"]);
    let selector = policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap();
    for (k, v) in selector {
        assert_eq!(&template["metadata"]["labels"][k], v, "selector {k}");
    }
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress"])
    );
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    let Some(ports) = ports else {
        assert!(ingress.is_empty(), "{policy}");
        return vm;
    };
    assert_eq!(ingress.len(), 1);
    assert_eq!(&ingress[0]["ports"], ports);
    assert!(
        !ingress[0]["from"].as_array().unwrap().is_empty(),
        "ingress must name its sources"
    );
    vm
}

/// One YAML document as JSON, read by PyYAML (unpacked with cloud-init).
pub(crate) fn load_yaml(path: &Path) -> Value {
    let out = run(
        pydeps::cloud_init_python()
            .args([
                "-c",
                "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
            ])
            .arg(path),
        pydeps::HINT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
