//! `labctl render` end to end (the real binary): its Secret is `labctl
//! secret`'s, byte for byte; flags that cannot work together are exit 2
//! naming both; an unusable golden PVC given as a file falls back to the
//! containerDisk with its reason on stderr and in `--json`; a session's
//! tokens, one file each. The objects' rules themselves are the
//! generator's tests (`cloud-init/tests/render/manifest.rs`).

use crate::kubernetes_validate::load_yaml_all;
use crate::support::{TempDir, mode, workspace};
use lab_agent_cloudinit::Arch;
use lab_agent_tests::local::{describe, labctl, static_agent_for, write_token};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;

const TOKEN: &str = "render-test-token-0123456789abcdefghijkl";

fn agent() -> PathBuf {
    static_agent_for(Arch::Amd64).to_owned()
}

fn lab(name: &str) -> PathBuf {
    workspace().join("examples").join(name)
}

/// `labctl render LAB --name NAME --namespace lab-vms --root-image … ARGS`
/// with the real agent, and the backend's namespace unless the agent is on
/// vsock alone (nothing would reach it over the network).
fn render(lab: &Path, name: &str, args: &[&str]) -> Output {
    let mut all: Vec<String> = vec![
        "render".into(),
        lab.display().to_string(),
        "--name".into(),
        name.into(),
        "--namespace".into(),
        "lab-vms".into(),
        "--root-image".into(),
        "quay.io/containerdisks/debian:12".into(),
        "--agent".into(),
        agent().display().to_string(),
    ];
    if !args.windows(2).any(|w| w == ["--channel", "vsock"]) {
        all.extend(["--backend-namespace".into(), "tt-lab".into()]);
    }
    all.extend(args.iter().map(|a| (*a).to_owned()));
    labctl(all)
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", describe(out));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Exit 2, and stderr naming each of `names`.
fn refused(out: &Output, names: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{}", describe(out));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in names {
        assert!(err.contains(name), "stderr does not name {name:?}:\n{err}");
    }
    assert!(out.stdout.is_empty(), "{}", describe(out));
}

fn token_file(dir: &TempDir) -> PathBuf {
    let path = dir.path().join("token");
    write_token(&path, &format!("{TOKEN}\n"));
    path
}

#[test]
fn its_secret_is_labctl_secrets_byte_for_byte() {
    let dir = TempDir::new("render-secret");
    let token = token_file(&dir);
    let token = token.to_str().unwrap();
    // Each agent source once, each channel once: the channel is the unit's
    // `--listen`, the source the installer's half of the payload.
    let disk = ["--agent-disk", "configmap:lab-agent-afb16660d5a4"];
    for (agent_from, channel, extra) in [
        ("embedded", "both", &[][..]),
        ("disk", "tcp", &disk[..]),
        ("disk", "vsock", &disk[..]),
    ] {
        {
            let mut args = vec![
                "--token-file",
                token,
                "--agent-from",
                agent_from,
                "--channel",
                channel,
            ];
            args.extend_from_slice(extra);
            let text = ok(&render(&lab("hello-lab"), "lab-s-1", &args));
            let docs = load_yaml_all(&text);
            let secret = docs.iter().find(|d| d["kind"] == "Secret").unwrap();
            let ud = dir.path().join(format!("{agent_from}-{channel}.ud"));
            let out = labctl([
                "secret".as_ref(),
                lab("hello-lab").as_os_str(),
                "--name".as_ref(),
                "lab-s-1-userdata".as_ref(),
                "--namespace".as_ref(),
                "lab-vms".as_ref(),
                "--label".as_ref(),
                "lab-agent/session=lab-s-1".as_ref(),
                "--token-file".as_ref(),
                token.as_ref(),
                "--agent".as_ref(),
                agent().as_os_str(),
                "--agent-from".as_ref(),
                agent_from.as_ref(),
                "--channel".as_ref(),
                channel.as_ref(),
                "--user-data-out".as_ref(),
                ud.as_os_str(),
            ]);
            let secret_text = ok(&out);
            let from_secret = &load_yaml_all(&secret_text)[0];
            assert_eq!(
                secret, from_secret,
                "--agent-from {agent_from} --channel {channel}"
            );
            // And the YAML's own bytes: the document render wrote is the
            // one `labctl secret` prints.
            assert!(
                text.split("---\n").any(|doc| doc == secret_text),
                "--agent-from {agent_from} --channel {channel}: render's Secret differs in \
                 text from labctl secret's"
            );
            let ud = std::fs::read(&ud).unwrap();
            assert!(!ud.is_empty());
        }
    }
}

#[test]
fn flags_that_cannot_work_together_are_exit_2_naming_both() {
    let dir = TempDir::new("render-conflicts");
    let token = token_file(&dir);
    let token = token.to_str().unwrap();
    let hello = lab("hello-lab");
    refused(
        &render(
            &hello,
            "a",
            &["--token-file", token, "--agent-from", "disk"],
        ),
        &["--agent-from disk", "--agent-disk"],
    );
    refused(
        &render(
            &hello,
            "a",
            &["--token-file", token, "--agent-disk", "containerdisk:r/a:1"],
        ),
        &["--agent-disk containerdisk:r/a:1", "--agent-from embedded"],
    );
    refused(
        &render(
            &hello,
            "a",
            &["--token-file", token, "--label", "lab-agent/session=b"],
        ),
        &["--label lab-agent/session=b", "lab-agent/session=a"],
    );
    refused(
        &render(
            &hello,
            "a",
            &[
                "--token-file",
                token,
                "--channel",
                "vsock",
                "--backend-namespace",
                "tt-lab",
            ],
        ),
        &["--channel vsock", "--backend-namespace"],
    );
    let golden = dir.write("golden.json", golden_pvc().to_string());
    refused(
        &render(
            &hello,
            "a",
            &[
                "--token-file",
                token,
                "--golden-pvc",
                "golden-other",
                "--golden-pvc-json",
                golden.to_str().unwrap(),
            ],
        ),
        &["--golden-pvc golden-other", "golden-debian-12-10gi"],
    );
    // A session: one token per VM, so `--token-file` needs `--vm`, and
    // `--token-out` its `{vm}`.
    let two = lab("two-vm-lab");
    refused(
        &render(&two, "s", &["--token-file", token]),
        &["token", "server", "client"],
    );
    refused(
        &render(&two, "s", &["--token-out", "t"]),
        &["--token-out t", "{vm}"],
    );
    refused(
        &render(&two, "s", &["--json", "--param", "SESSION_DOMAIN=x"]),
        &["SESSION_DOMAIN"],
    );
    // Nothing written by a refused render.
    assert!(!workspace().join("tests/t").exists());
}

/// A golden too small for the lab's `min_root_bytes` is an error, not a
/// fallback: the containerDisk's root is smaller still.
#[test]
fn a_golden_too_small_for_the_lab_is_exit_2() {
    let dir = TempDir::new("render-small-golden");
    let lab_dir = dir.path().join("lab");
    std::fs::create_dir(&lab_dir).unwrap();
    std::fs::write(
        lab_dir.join("lab.toml"),
        "name = \"big\"\n[readiness]\nmin_root_bytes = 21474836480\n\
         [[checks]]\nname = \"c\"\nrun = \"true\"\n",
    )
    .unwrap();
    let pvc = dir.write("pvc.json", golden_pvc().to_string());
    let token = token_file(&dir);
    refused(
        &render(
            &lab_dir,
            "big",
            &[
                "--token-file",
                token.to_str().unwrap(),
                "--golden-pvc-json",
                pvc.to_str().unwrap(),
            ],
        ),
        &["golden-debian-12-10gi", "min_root_bytes"],
    );
}

fn golden_pvc() -> Value {
    let text = std::fs::read_to_string(workspace().join("examples/kubevirt/golden-pvc.json"));
    serde_json::from_str(&text.unwrap()).unwrap()
}

/// Each unusable golden boots the containerDisk, and says why: on stderr,
/// in `--json`'s `root`, never a failure.
#[test]
fn an_unusable_golden_falls_back_and_says_why() {
    let dir = TempDir::new("render-golden");
    let token = token_file(&dir);
    let token = token.to_str().unwrap();
    let mut pending = golden_pvc();
    pending["status"]["phase"] = json!("Pending");
    let mut other = golden_pvc();
    other["metadata"]["annotations"]["lab-agent/golden-image"] =
        json!("quay.io/containerdisks/debian:13");
    let mut rwo = golden_pvc();
    rwo["status"]["accessModes"] = json!(["ReadWriteOnce"]);
    rwo["spec"]["accessModes"] = json!(["ReadWriteOnce"]);
    let cases = [
        ("missing", String::new(), "does not exist"),
        (
            "null",
            "null".into(),
            "`golden-debian-12-10gi` does not exist",
        ),
        ("pending", pending.to_string(), "Pending"),
        ("other", other.to_string(), "debian:13"),
        ("rwo", rwo.to_string(), "ReadWriteOnce"),
        ("usable", golden_pvc().to_string(), ""),
    ];
    for (case, pvc, says) in cases {
        let file = dir.write(&format!("{case}.json"), pvc);
        let out = render(
            &lab("hello-lab"),
            "g",
            &[
                "--token-file",
                token,
                "--golden-pvc",
                "golden-debian-12-10gi",
                "--golden-pvc-json",
                file.to_str().unwrap(),
                "--json",
            ],
        );
        let report: Value = serde_json::from_str(&ok(&out)).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let docs = load_yaml_all(report["manifests"].as_str().unwrap());
        let vm = docs.iter().find(|d| d["kind"] == "VirtualMachine").unwrap();
        let root = vm["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "rootdisk")
            .unwrap();
        if case == "usable" {
            assert_eq!(report["root"]["disk"], "golden", "{report}");
            assert_eq!(root["ephemeral"]["persistentVolumeClaim"]["readOnly"], true);
            assert!(!err.contains("note:"), "{err}");
            continue;
        }
        assert_eq!(report["root"]["disk"], "containerdisk", "{case}: {report}");
        assert_eq!(
            root["containerDisk"]["image"],
            "quay.io/containerdisks/debian:12"
        );
        let reason = report["root"]["fallback_reason"].as_str().unwrap();
        assert!(reason.contains(says), "{case}: {reason}");
        assert!(
            err.contains(reason),
            "{case}: stderr lacks the reason:\n{err}"
        );
    }
    // A file that is not JSON is the author's error, named.
    let bad = dir.write("bad.json", "{ not json");
    refused(
        &render(
            &lab("hello-lab"),
            "g",
            &[
                "--token-file",
                token,
                "--golden-pvc-json",
                bad.to_str().unwrap(),
            ],
        ),
        &["bad.json", "kubectl get pvc"],
    );
}

/// A session renders a Secret and a VM per `[[vms]]` entry, each with its
/// own token in its own file (0600), the Service and the policy; `--vm`
/// renders one VM and the same session objects.
#[test]
fn a_session_gets_a_token_per_vm_and_its_service() {
    let dir = TempDir::new("render-session");
    let template = dir.path().join("{vm}.token");
    let out = render(
        &lab("two-vm-lab"),
        "lab-s-2",
        &["--token-out", template.to_str().unwrap(), "--json"],
    );
    let report: Value = serde_json::from_str(&ok(&out)).unwrap();
    let text = report["manifests"].as_str().unwrap();
    let docs = load_yaml_all(text);
    let kinds: Vec<String> = docs
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(report["objects"], json!(kinds));
    for want in [
        "NetworkPolicy/lab-s-2",
        "Service/lab-s-2",
        "Secret/lab-s-2-server-userdata",
        "VirtualMachine/lab-s-2-server",
        "Secret/lab-s-2-client-userdata",
        "VirtualMachine/lab-s-2-client",
    ] {
        assert!(
            kinds.contains(&want.to_owned()),
            "{want} missing: {kinds:?}"
        );
    }
    let mut tokens = Vec::new();
    for vm in ["server", "client"] {
        let file = dir.path().join(format!("{vm}.token"));
        assert_eq!(mode(&file), 0o600, "{}", file.display());
        let token = std::fs::read_to_string(&file).unwrap().trim().to_owned();
        let entry = report["vms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["vm"] == vm)
            .unwrap();
        assert_eq!(entry["token"], token.as_str());
        tokens.push(token);
    }
    assert_ne!(tokens[0], tokens[1], "each VM has its own token");

    let one = render(
        &lab("two-vm-lab"),
        "lab-s-2",
        &[
            "--vm",
            "client",
            "--token-file",
            token_file(&dir).to_str().unwrap(),
        ],
    );
    let one = load_yaml_all(&ok(&one));
    let names: Vec<&str> = one
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "lab-s-2",
            "lab-s-2",
            "lab-s-2-client-userdata",
            "lab-s-2-client"
        ],
        "the session's policy and Service, then client's Secret and VM"
    );
    // The same session objects as the whole render's.
    for kind in ["NetworkPolicy", "Service"] {
        let a = docs.iter().find(|d| d["kind"] == kind).unwrap();
        let b = one.iter().find(|d| d["kind"] == kind).unwrap();
        assert_eq!(a, b, "{kind}");
    }
}
