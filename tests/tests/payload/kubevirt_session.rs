//! The KubeVirt recipe for a session (`examples/kubevirt/session/`,
//! `examples/two-vm-lab` as a backend creates it): the Service and the
//! NetworkPolicy against Kubernetes' schemas, each VM's Secret as the
//! README's `labctl secret` block renders it, and the VMs against the lab,
//! their Secrets, the Service and the policy (kubernetes-validate has no
//! KubeVirt schemas).

use crate::kubernetes_validate::{assert_valid, load_yaml};
use crate::support::{TempDir, workspace};
use lab_agent_proto::lab::Lab;
use labctl::secret::{Config, ManifestFormat, SecretArgs, execute};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::path::PathBuf;

const AGENT_PORT: u16 = 8899;

fn kubevirt() -> PathBuf {
    workspace().join("examples/kubevirt")
}

fn session_dir() -> PathBuf {
    kubevirt().join("session")
}

fn lab() -> Lab {
    Lab::load(workspace().join("examples/two-vm-lab")).unwrap()
}

/// The session's VMs by hostname, each from its `vm-NAME.yaml`; every
/// `vm-*.yaml` of the folder, so a stray one is seen.
fn vms() -> BTreeMap<String, Value> {
    let mut vms = BTreeMap::new();
    for entry in std::fs::read_dir(session_dir()).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(stem) = file
            .strip_prefix("vm-")
            .and_then(|f| f.strip_suffix(".yaml"))
        else {
            continue;
        };
        let vm = load_yaml(&path);
        let hostname = vm["spec"]["template"]["spec"]["hostname"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no spec.template.spec.hostname"))
            .to_owned();
        assert_eq!(stem, hostname, "{file} holds the VM of another hostname");
        vms.insert(hostname, vm);
    }
    vms
}

fn template_labels(vm: &Value) -> &Map<String, Value> {
    vm["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .expect("the template has labels")
}

/// Whether `selector` (matchLabels) selects a pod with `labels`.
fn selects(selector: &Value, labels: &Map<String, Value>) -> bool {
    let selector = selector.as_object().expect("a selector is a map");
    assert!(!selector.is_empty(), "an empty selector selects everything");
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn session_service_and_policy_pass_strict_validation() {
    for file in ["service.yaml", "networkpolicy.yaml"] {
        assert_valid(&session_dir().join(file));
    }
}

/// One VM per `[[vms]]` entry, named as its hostname; one subdomain, the
/// headless Service's name, whose selector picks every VM of the session
/// and not the single-VM example's (another session in the namespace).
#[test]
fn session_vms_are_the_labs_and_resolve_through_the_service() {
    let lab = lab();
    let vms = vms();
    let names: BTreeSet<&str> = lab.vms.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        vms.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        names,
        "one vm-NAME.yaml per [[vms]] entry, its hostname the VM's name"
    );
    let service = load_yaml(&session_dir().join("service.yaml"));
    assert_eq!(service["kind"], "Service");
    // Headless: DNS answers with each pod's address, per hostname.
    assert_eq!(service["spec"]["clusterIP"], "None");
    let subdomain = service["metadata"]["name"].as_str().unwrap();
    let namespace = &service["metadata"]["namespace"];
    let mut secret_refs = BTreeSet::new();
    for (hostname, vm) in &vms {
        assert_eq!(vm["apiVersion"], "kubevirt.io/v1");
        assert_eq!(vm["kind"], "VirtualMachine");
        assert_eq!(&vm["metadata"]["namespace"], namespace, "{hostname}");
        let spec = &vm["spec"]["template"]["spec"];
        assert_eq!(spec["subdomain"], subdomain, "{hostname}: subdomain");
        let labels = template_labels(vm);
        assert!(
            selects(&service["spec"]["selector"], labels),
            "{hostname}: the Service does not select its pod"
        );
        assert_eq!(labels["tt-lab.example/vm"], hostname.as_str());
        // The backend's labels, on the VM and on its pod template alike.
        for key in [
            "tt-lab.example/lab-session",
            "tt-lab.example/session-id",
            "tt-lab.example/environment",
            "tt-lab.example/lab",
            "tt-lab.example/vm",
        ] {
            assert!(
                vm["metadata"]["labels"].get(key).is_some(),
                "{hostname} lacks {key}"
            );
            assert_eq!(
                vm["metadata"]["labels"][key], labels[key],
                "{hostname}: {key} differs between the VM and its template"
            );
        }
        assert_eq!(labels["tt-lab.example/lab"], lab.name.as_str());
        let volumes = spec["volumes"].as_array().unwrap();
        let disks = spec["domain"]["devices"]["disks"].as_array().unwrap();
        for v in volumes {
            assert!(
                disks.iter().any(|d| d["name"] == v["name"]),
                "{hostname}: volume {} has no disk",
                v["name"]
            );
        }
        let networks = spec["networks"].as_array().unwrap();
        for i in spec["domain"]["devices"]["interfaces"].as_array().unwrap() {
            assert!(
                networks.iter().any(|n| n["name"] == i["name"]),
                "{hostname}: interface {} has no network",
                i["name"]
            );
        }
        let cloud_init = volumes
            .iter()
            .find_map(|v| v.get("cloudInitNoCloud"))
            .expect("a cloudInitNoCloud volume");
        assert_eq!(
            cloud_init.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["secretRef"],
            "{hostname}"
        );
        secret_refs.insert(cloud_init["secretRef"]["name"].as_str().unwrap());
    }
    assert_eq!(secret_refs.len(), vms.len(), "each VM has its own Secret");
    // Another session in the namespace: the one-VM example.
    let other = load_yaml(&kubevirt().join("virtualmachine.yaml"));
    assert!(!selects(
        &service["spec"]["selector"],
        template_labels(&other)
    ));
}

/// The peers reach each other on every TCP port but the agent's and on
/// every UDP port; only the backend reaches the agent; the policy selects
/// the session's VMs and no other.
#[test]
fn session_policy_opens_the_agent_to_the_backend_alone() {
    let policy = load_yaml(&session_dir().join("networkpolicy.yaml"));
    let vms = vms();
    let selector = &policy["spec"]["podSelector"]["matchLabels"];
    for (hostname, vm) in &vms {
        assert!(
            selects(selector, template_labels(vm)),
            "the policy does not select {hostname}"
        );
        assert_eq!(vm["metadata"]["namespace"], policy["metadata"]["namespace"]);
    }
    let other = load_yaml(&kubevirt().join("virtualmachine.yaml"));
    assert!(!selects(selector, template_labels(&other)));
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));

    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    let (mut backend, mut peers) = (0, 0);
    for rule in ingress {
        let ports = rule["ports"]
            .as_array()
            .expect("a rule without ports opens every port, 8899 included");
        let from = rule["from"].as_array().expect("a rule names its sources");
        let from_peers = from == &[json!({"podSelector": {"matchLabels": selector}})];
        let tcp = covered(ports, "TCP");
        if from_peers {
            peers += 1;
            let all_but_agent = [1..=AGENT_PORT - 1, AGENT_PORT + 1..=u16::MAX];
            assert_eq!(tcp, all_but_agent, "the peers' TCP ports");
            assert_eq!(covered(ports, "UDP"), [1..=u16::MAX], "the peers' UDP");
        } else {
            backend += 1;
            assert_eq!(
                rule["ports"],
                json!([{"protocol": "TCP", "port": AGENT_PORT}])
            );
            // The backend's pods, in the backend's namespace: not the VMs.
            for source in from {
                assert!(source.get("namespaceSelector").is_some(), "{source}");
                assert!(
                    !selects(
                        &source["podSelector"]["matchLabels"],
                        template_labels(&vms["server"])
                    ),
                    "{source} selects the session's VMs"
                );
            }
        }
    }
    assert_eq!((backend, peers), (1, 1), "{ingress:?}");
}

/// The ports of `protocol` a rule's `ports` opens, as sorted, merged ranges.
fn covered(ports: &[Value], protocol: &str) -> Vec<RangeInclusive<u16>> {
    let mut ranges: Vec<RangeInclusive<u16>> = ports
        .iter()
        .filter(|p| p["protocol"] == protocol)
        .map(|p| {
            let port = u16::try_from(p["port"].as_u64().expect("a numeric port")).unwrap();
            let end = p
                .get("endPort")
                .map_or(port, |e| u16::try_from(e.as_u64().unwrap()).unwrap());
            port..=end
        })
        .collect();
    ranges.sort_by_key(|r| *r.start());
    let mut merged: Vec<RangeInclusive<u16>> = Vec::new();
    for r in ranges {
        match merged.last_mut() {
            Some(last) if u32::from(*r.start()) <= u32::from(*last.end()) + 1 => {
                *last = *last.start()..=(*last.end()).max(*r.end());
            }
            _ => merged.push(r),
        }
    }
    merged
}

/// The README's `labctl secret` block, per VM of its `for vm in …` loop:
/// the words of the command with `$vm` replaced.
fn readme_secret_commands() -> BTreeMap<String, Vec<String>> {
    let readme = std::fs::read_to_string(kubevirt().join("README.md")).unwrap();
    let joined = readme.replace("\\\n", " ");
    let lines: Vec<&str> = joined.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("for vm in "))
        .expect("README.md has the `for vm in …` block of `labctl secret`");
    let vms = lines[at]
        .trim_start_matches("for vm in ")
        .split(';')
        .next()
        .unwrap()
        .split_whitespace();
    let command = lines[at + 1];
    assert!(
        command.starts_with("labctl secret examples/two-vm-lab "),
        "{command}"
    );
    vms.map(|vm| {
        let words = command
            .split_whitespace()
            .map(|w| w.replace('"', "").replace("$vm", vm))
            .collect();
        (vm.to_owned(), words)
    })
    .collect()
}

/// Each VM's Secret as the README renders it (`--vm`, `--name`, namespace,
/// labels, the session's domain): valid under `--strict`, named as that
/// VM's `secretRef`, for that VM, with the session's labels; the README's
/// loop covers the lab's VMs, and `SESSION_DOMAIN` is the VMs' DNS domain.
#[test]
fn each_vms_secret_renders_with_its_vm_as_its_secret_ref_names_it() {
    let commands = readme_secret_commands();
    let lab = lab();
    assert_eq!(
        commands.keys().collect::<BTreeSet<_>>(),
        lab.vms.iter().map(|v| &v.name).collect::<BTreeSet<_>>(),
        "the README renders a Secret for each VM of the lab"
    );
    let vms = vms();
    let service = load_yaml(&session_dir().join("service.yaml"));
    let dir = TempDir::new("kubevirt-session");
    let agent = dir.write("lab-agent", crate::support::agent());
    for (vm_name, words) in &commands {
        let args = secret_args(&words[2..], agent.clone());
        assert_eq!(args.vm.as_deref(), Some(vm_name.as_str()));
        let vm = &vms[vm_name];
        let mut out = Vec::new();
        let report = Config::from_args(&args)
            .and_then(|config| execute(&config, &mut out, &mut Vec::new()))
            .unwrap_or_else(|e| panic!("labctl secret --vm {vm_name}: {e:?}"));
        assert_eq!(report.vm.as_deref(), Some(vm_name.as_str()));
        let text = report.secret.as_deref().unwrap();
        let file = dir.write(&format!("{vm_name}-secret.yaml"), text);
        assert_valid(&file);
        let secret = load_yaml(&file);
        let volumes = vm["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap();
        let secret_ref = volumes
            .iter()
            .find_map(|v| v.get("cloudInitNoCloud"))
            .map(|c| &c["secretRef"]["name"])
            .unwrap();
        assert_eq!(&secret["metadata"]["name"], secret_ref, "{vm_name}");
        assert_eq!(
            secret["metadata"]["namespace"], vm["metadata"]["namespace"],
            "{vm_name}"
        );
        for key in [
            "tt-lab.example/lab-session",
            "tt-lab.example/session-id",
            "tt-lab.example/environment",
            "tt-lab.example/lab",
        ] {
            assert_eq!(
                secret["metadata"]["labels"][key], vm["metadata"]["labels"][key],
                "{vm_name}: the Secret's {key}"
            );
        }
        let domain = format!(
            "{}.{}.svc.cluster.local",
            vm["spec"]["template"]["spec"]["subdomain"]
                .as_str()
                .unwrap(),
            vm["metadata"]["namespace"].as_str().unwrap()
        );
        assert_eq!(
            service["metadata"]["name"],
            vm["spec"]["template"]["spec"]["subdomain"]
        );
        assert!(
            args.params.contains(&format!("SESSION_DOMAIN={domain}")),
            "{vm_name}: {:?}",
            args.params
        );
    }
}

/// The README's flags as `labctl secret`'s arguments; a flag this does not
/// know fails the test, so the block stays one the test reads whole. The
/// outputs (`-o`, `--token-out`) are left out: the report carries both.
fn secret_args(words: &[String], agent: PathBuf) -> SecretArgs {
    let mut args = SecretArgs {
        lab_dir: workspace().join(&words[0]),
        name: String::new(),
        namespace: None,
        labels: Vec::new(),
        token_file: None,
        arch: None,
        agent: Some(agent),
        format: ManifestFormat::Yaml,
        output: None,
        user_data_out: None,
        token_out: None,
        no_autologin: false,
        agent_from: labctl::secret::AgentFromArg::Embedded,
        channel: Default::default(),
        json: true,
        vm: None,
        params: Vec::new(),
    };
    let mut rest = words[1..].iter();
    while let Some(flag) = rest.next() {
        let value = rest
            .next()
            .unwrap_or_else(|| panic!("{flag} has no value"))
            .clone();
        match flag.as_str() {
            "--vm" => args.vm = Some(value),
            "--name" => args.name = value,
            "--namespace" => args.namespace = Some(value),
            "--label" => args.labels.push(value),
            "--param" => args.params.push(value),
            // The static agent given is amd64's.
            "--arch" => assert_eq!(value, "amd64"),
            "--token-out" | "-o" => {}
            other => {
                panic!("the README's `labctl secret` has {other}, which this test does not read")
            }
        }
    }
    args
}
