//! `examples/kubevirt/` is `labctl render`'s output: every `labctl render`
//! command of its README is run again (the real binary, from the
//! workspace, with the real static agent) and each file it names must be
//! what it writes, without the Secrets (they hold a token and the agent).
//! `UPDATE_EXAMPLES=1` rewrites the files instead; review `git diff`.
//!
//! Then what a cluster would otherwise find at run time, over every
//! render (Secrets included): the Secret, the NetworkPolicy and the
//! Service pass `kubernetes-validate --strict` (it has no KubeVirt
//! schemas); every disk of a VM has a volume and every volume a disk, every
//! interface a network; the `secretRef` names a Secret of the same render
//! and namespace; the VM's labels are its template's; the policy and the
//! Service select every VM of their render and none of another's; the
//! agent's disk is where the installer looks; a golden root is an
//! `ephemeral`, read-only PVC volume; `autoattachVSOCK` and the policy's
//! hole for 8899 follow `--channel`.

use crate::kubernetes_validate::{kubernetes_validate, load_yaml, load_yaml_all};
use crate::support::{TempDir, workspace};
use lab_agent_cloudinit::Arch;
use lab_agent_tests::local::{describe, labctl_bin, static_agent_for};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const README: &str = "examples/kubevirt/README.md";

/// The README's shell blocks, one command per line (continuations joined).
fn readme_blocks() -> Vec<String> {
    let text = std::fs::read_to_string(workspace().join(README)).unwrap();
    text.split("```sh")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .map(|b| {
            b.replace("\\\n", " ")
                .lines()
                .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

/// A command line's words: whitespace splits, single quotes group, a `#`
/// word starts a comment.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let (mut word, mut quoted, mut started) = (String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => (quoted, started) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            '#' if !quoted && !started => break,
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quote in README line: {line}");
    if started {
        words.push(word);
    }
    words
}

/// One `labctl render` of the README, run again.
struct Render {
    /// Its `-o` file, as the README names it.
    output: String,
    /// The arguments after `labctl render`.
    args: Vec<String>,
    /// The YAML it wrote, Secrets included, and each document as JSON.
    text: String,
    documents: Vec<Value>,
}

impl Render {
    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.documents.iter().filter(move |d| d["kind"] == kind)
    }

    fn flag(&self, name: &str) -> Option<&str> {
        let at = self.args.iter().position(|w| w == name)?;
        self.args.get(at + 1).map(String::as_str)
    }

    /// The file under `examples/kubevirt/`: the YAML without its Secrets.
    fn example(&self) -> String {
        self.text
            .split("---\n")
            .filter(|doc| !doc.lines().any(|l| l == "kind: Secret"))
            .collect::<Vec<_>>()
            .join("---\n")
    }
}

/// Every `labctl render` of the README, rendered once per test process.
fn renders() -> &'static [Render] {
    static RENDERS: OnceLock<Vec<Render>> = OnceLock::new();
    RENDERS.get_or_init(|| {
        let agent = static_agent_for(Arch::Amd64).to_owned();
        let dir = TempDir::new("kubevirt-examples");
        let mut renders = Vec::new();
        for block in readme_blocks() {
            for line in block.lines() {
                let words = words(line);
                if words.len() < 2 || words[0] != "labctl" || words[1] != "render" {
                    continue;
                }
                renders.push(render(&words[2..], &agent, &dir, renders.len()));
            }
        }
        assert!(
            renders.len() >= 5,
            "{README} lost its `labctl render` commands"
        );
        renders
    })
}

/// Runs `labctl render ARGS` from the workspace, its files in `dir`.
fn render(args: &[String], agent: &PathBuf, dir: &TempDir, n: usize) -> Render {
    let mut run = Vec::new();
    let mut output = None;
    let mut it = args.iter();
    while let Some(word) = it.next() {
        match word.as_str() {
            "-o" | "--output" => output = it.next().cloned(),
            "--token-out" => {
                let template = it.next().expect("--token-out takes a file");
                run.push(word.clone());
                run.push(
                    dir.path()
                        .join(format!("{n}-{template}"))
                        .display()
                        .to_string(),
                );
            }
            "--agent" => panic!("README's commands take the agent labctl finds"),
            _ => run.push(word.clone()),
        }
    }
    let output = output.expect("each README render writes a file (`-o FILE`)");
    let file = dir.path().join(format!("{n}-{output}"));
    let out = Command::new(labctl_bin())
        .arg("render")
        .args(&run)
        .arg("--agent")
        .arg(agent)
        .arg("-o")
        .arg(&file)
        .current_dir(workspace())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run labctl");
    assert!(
        out.status.success(),
        "labctl render {}\n{}",
        args.join(" "),
        describe(&out)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let documents = load_yaml_all(&text);
    Render {
        output,
        args: args.to_vec(),
        text,
        documents,
    }
}

#[test]
fn every_example_is_what_its_readme_command_renders() {
    let dir = workspace().join("examples/kubevirt");
    let update = std::env::var_os("UPDATE_EXAMPLES").is_some_and(|v| v == "1");
    let mut expected = Vec::new();
    for r in renders() {
        let path = dir.join(&r.output);
        expected.push(r.output.clone());
        if update {
            std::fs::write(&path, r.example()).unwrap();
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "`{}`: {e}\nhint: run with UPDATE_EXAMPLES=1 to write it",
                path.display()
            )
        });
        assert!(
            have == r.example(),
            "`{}` is not what `labctl render {}` writes (without its Secrets)\nhint: if the \
             change is intended, run with UPDATE_EXAMPLES=1 and review `git diff`",
            path.display(),
            r.args.join(" ")
        );
    }
    // No stale example: every YAML file here comes from a command, or is
    // the vsock RBAC, which render does not make.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".yaml") {
            assert!(
                expected.contains(&name),
                "`examples/kubevirt/{name}` is no README command's output"
            );
        }
    }
}

/// The Secret, the NetworkPolicy and the Service of every render against
/// Kubernetes' schemas.
#[test]
fn every_render_passes_strict_validation() {
    let dir = TempDir::new("kubevirt-validate");
    for (n, r) in renders().iter().enumerate() {
        let file = dir.write(&format!("{n}.yaml"), &r.text);
        let out = kubernetes_validate(&file);
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let checked = r
            .documents
            .iter()
            .filter(|d| d["apiVersion"] != "kubevirt.io/v1")
            .count();
        assert!(
            out.status.success() && said.matches(" passed for resource ").count() == checked,
            "`{}`: kubernetes-validate said:\n{said}",
            r.output
        );
    }
}

/// What ties a VM to the other objects of its render, for every VM of
/// every render.
#[test]
fn every_vm_matches_its_render() {
    for r in renders() {
        let vms: Vec<&Value> = r.of_kind("VirtualMachine").collect();
        assert!(!vms.is_empty(), "{}", r.output);
        let channel = r.flag("--channel").unwrap_or("both");
        for vm in &vms {
            vm_is_whole(vm, r);
            let devices = &vm["spec"]["template"]["spec"]["domain"]["devices"];
            assert_eq!(
                devices.get("autoattachVSOCK").is_some_and(|v| v == true),
                channel != "tcp",
                "{}: autoattachVSOCK with --channel {channel}",
                r.output
            );
            agent_disk_is_where_the_installer_looks(vm, r);
            root_is_as_asked(vm, r);
        }
        let policy: Vec<&Value> = r.of_kind("NetworkPolicy").collect();
        assert_eq!(policy.len(), 1, "{}: one policy", r.output);
        policy_selects_its_vms_only(policy[0], r, channel);
        let services: Vec<&Value> = r.of_kind("Service").collect();
        assert_eq!(services.len(), usize::from(vms.len() > 1), "{}", r.output);
        for service in services {
            assert_eq!(service["spec"]["clusterIP"], "None", "headless");
            selects_its_vms_only(&service["spec"]["selector"], r);
            for vm in &vms {
                let spec = &vm["spec"]["template"]["spec"];
                assert_eq!(spec["subdomain"], service["metadata"]["name"]);
                assert!(spec["hostname"].is_string(), "{vm}");
            }
        }
    }
}

/// Disks and volumes pair up, interfaces and networks too, the user-data's
/// Secret is in the render, the VM's labels are its template's.
fn vm_is_whole(vm: &Value, r: &Render) {
    assert_eq!(vm["apiVersion"], "kubevirt.io/v1");
    assert!(vm["spec"].get("dataVolumeTemplates").is_none(), "{vm}");
    let template = &vm["spec"]["template"];
    let spec = &template["spec"];
    let names = |list: &Value| -> Vec<String> {
        let mut names: Vec<String> = list
            .as_array()
            .unwrap_or_else(|| panic!("{}: not a list: {list}", r.output))
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(&spec["domain"]["devices"]["disks"]),
        names(&spec["volumes"]),
        "{}: every disk has a volume and every volume a disk",
        r.output
    );
    assert_eq!(
        names(&spec["domain"]["devices"]["interfaces"]),
        names(&spec["networks"]),
        "{}: every interface has a network",
        r.output
    );
    let secret_ref = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| v["cloudInitNoCloud"]["secretRef"]["name"].as_str())
        .expect("the user-data comes from a Secret");
    let secret = r
        .of_kind("Secret")
        .find(|s| s["metadata"]["name"] == secret_ref)
        .unwrap_or_else(|| panic!("{}: no Secret `{secret_ref}` in the render", r.output));
    assert_eq!(secret["metadata"]["namespace"], vm["metadata"]["namespace"]);
    assert_eq!(vm["metadata"]["labels"], template["metadata"]["labels"]);
    assert_eq!(secret["metadata"]["labels"], vm["metadata"]["labels"]);
    let arch = r.flag("--arch").unwrap_or("amd64");
    assert_eq!(spec["architecture"], arch);
    assert_eq!(spec["nodeSelector"]["kubernetes.io/arch"], arch);
}

fn volume<'a>(vm: &'a Value, name: &str) -> &'a Value {
    vm["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume `{name}`: {vm}"))
}

fn disk<'a>(vm: &'a Value, name: &str) -> &'a Value {
    vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no disk `{name}`: {vm}"))
}

/// `--agent-disk containerdisk:IMAGE`: a containerDisk volume whose disk
/// has serial `lab-agent` (`/dev/disk/by-id/virtio-lab-agent`);
/// `configmap:NAME`: a configMap volume labelled `LAB-AGENT`; none without
/// `--agent-from disk`.
fn agent_disk_is_where_the_installer_looks(vm: &Value, r: &Render) {
    let volumes = vm["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let agent_volumes = volumes.iter().filter(|v| v["name"] == "lab-agent").count();
    match r.flag("--agent-disk").and_then(|d| d.split_once(':')) {
        None => assert_eq!(agent_volumes, 0, "{}", r.output),
        Some(("containerdisk", image)) => {
            assert_eq!(volume(vm, "lab-agent")["containerDisk"]["image"], image);
            let disk = disk(vm, "lab-agent");
            assert_eq!(disk["serial"], "lab-agent");
            assert_eq!(disk["disk"]["bus"], "virtio");
        }
        Some(("configmap", name)) => {
            let v = volume(vm, "lab-agent");
            assert_eq!(v["configMap"]["name"], name);
            assert_eq!(v["configMap"]["volumeLabel"], "LAB-AGENT");
        }
        Some(other) => panic!("{}: unexpected --agent-disk {other:?}", r.output),
    }
}

/// The root: the golden PVC as an `ephemeral` read-only volume when it is
/// usable, else the `--root-image` containerDisk.
fn root_is_as_asked(vm: &Value, r: &Render) {
    let root = volume(vm, "rootdisk");
    let golden = r.flag("--golden-pvc").map(str::to_owned).or_else(|| {
        let file = r.flag("--golden-pvc-json")?;
        let pvc = std::fs::read_to_string(workspace().join(file)).unwrap();
        let pvc: Value = serde_json::from_str(&pvc).unwrap();
        Some(pvc["metadata"]["name"].as_str().unwrap().to_owned())
    });
    match golden {
        Some(claim) => {
            assert_eq!(
                root["ephemeral"]["persistentVolumeClaim"],
                json!({"claimName": claim, "readOnly": true}),
                "{}",
                r.output
            );
            assert!(root.get("persistentVolumeClaim").is_none(), "{root}");
        }
        None => assert_eq!(
            root["containerDisk"]["image"],
            r.flag("--root-image").unwrap(),
            "{}",
            r.output
        ),
    }
}

/// A selector picks every VM pod of its render and none of the other
/// renders' (they share the namespace).
fn selects_its_vms_only(selector: &Value, r: &Render) {
    let selector = selector.as_object().expect("matchLabels");
    assert!(!selector.is_empty(), "{}: an empty selector", r.output);
    let pod_labels = |vm: &Value| -> BTreeMap<String, Value> {
        vm["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let matches =
        |labels: &BTreeMap<String, Value>| selector.iter().all(|(k, v)| labels.get(k) == Some(v));
    for other in renders() {
        for vm in other.of_kind("VirtualMachine") {
            let same = std::ptr::eq(other, r)
                || other.flag("--name") == r.flag("--name")
                    && other.flag("--namespace") == r.flag("--namespace");
            assert_eq!(
                matches(&pod_labels(vm)),
                same,
                "{}'s selector {selector:?} and {}'s VM `{}`",
                r.output,
                other.output,
                vm["metadata"]["name"]
            );
        }
    }
}

/// The policy selects its render's VMs; its one ingress rule from the
/// backend opens 8899 only (none with `--channel vsock`); a session's VMs
/// reach each other on every other port.
fn policy_selects_its_vms_only(policy: &Value, r: &Render, channel: &str) {
    selects_its_vms_only(&policy["spec"]["podSelector"]["matchLabels"], r);
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    let from_backend: Vec<&Value> = ingress
        .iter()
        .filter(|rule| {
            rule["ports"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["port"] == 8899))
        })
        .collect();
    if channel == "vsock" {
        assert!(from_backend.is_empty(), "{}: {policy}", r.output);
        return;
    }
    assert_eq!(from_backend.len(), 1, "{}: {policy}", r.output);
    let rule = from_backend[0];
    assert_eq!(rule["ports"], json!([{"protocol": "TCP", "port": 8899}]));
    let from = rule["from"].as_array().unwrap();
    assert!(!from.is_empty(), "ingress must name its sources");
    let backend = &from[0];
    if let Some(ns) = r.flag("--backend-namespace") {
        assert_eq!(
            backend["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            ns
        );
    }
}

/// The vsock walk-through: `kubectl apply` takes its render and `vsock/`,
/// the RBAC's namespace is the VM's, and every call reaches the VM by
/// `kubevirt://NS/NAME` (none over TCP).
#[test]
fn the_vsock_walk_through_matches_its_render_and_rbac() {
    let block = readme_blocks()
        .into_iter()
        .find(|b| b.contains("--channel vsock"))
        .expect("README.md has a block with `labctl render … --channel vsock`");
    let r = renders()
        .iter()
        .find(|r| r.flag("--channel") == Some("vsock"))
        .unwrap();
    let (name, ns) = (r.flag("--name").unwrap(), r.flag("--namespace").unwrap());
    assert!(
        block.contains(&format!(
            "kubectl apply -f {} -f examples/kubevirt/vsock/",
            r.output
        )),
        "{block}"
    );
    let url = format!("--url kubevirt://{ns}/{name} ");
    let calls = block.matches("labctl wait").count() + block.matches("labctl grade").count();
    assert!(
        calls >= 2 && block.matches(&url).count() == calls,
        "{block}"
    );
    assert!(!block.contains("http://"), "{block}");

    let dir = workspace().join("examples/kubevirt/vsock");
    let role = load_yaml(&dir.join("role.yaml"));
    let binding = load_yaml(&dir.join("rolebinding.yaml"));
    assert_eq!(role["kind"], "Role");
    assert_eq!(role["metadata"]["namespace"], ns);
    // What `kubevirt://NAMESPACE/VMI` asks the API server for (`GET
    // …/namespaces/NS/virtualmachineinstances/NAME/vsock` in
    // `subresources.kubevirt.io`), and no more.
    assert_eq!(
        role["rules"],
        json!([{
            "apiGroups": ["subresources.kubevirt.io"],
            "resources": ["virtualmachineinstances/vsock"],
            "verbs": ["get"],
        }])
    );
    assert_eq!(binding["metadata"]["namespace"], ns);
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = binding["subjects"].as_array().unwrap();
    assert_eq!(subjects.len(), 1, "{binding}");
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
    for file in ["role.yaml", "rolebinding.yaml"] {
        crate::kubernetes_validate::assert_valid(&dir.join(file));
    }
}
