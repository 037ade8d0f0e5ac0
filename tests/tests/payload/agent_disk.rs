//! `--agent-from disk`: the agent's disk (`labctl agent-disk`) read back by
//! the tools an operator uses (isoinfo, blkid, skopeo, umoci,
//! kubernetes-validate), and the payload that pins it, small, gzip'd, split
//! by Debian's real cloud-init; its installer, with no disk attached, fails
//! loudly and installs nothing. (Finding and mounting a real disk is the
//! VM tests' part: this machine's kernel has no ISO 9660.)

use crate::kubernetes_validate::assert_valid;
use crate::support::{TempDir, agent, arm64_agent, deliver};
use flate2::read::GzDecoder;
use lab_agent_cloudinit::pin::sha256_hex;
use lab_agent_proto::guest::{AGENT_PATH, INSTALL_ERROR_PATH, TOKEN_PATH, UNIT_PATH};
use lab_agent_tests::image_tools;
use lab_agent_tests::local::{describe, labctl_bin};
use lab_agent_tests::pydeps;
use serde_json::Value;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::Command;

fn gunzip(gz: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    GzDecoder::new(gz)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("valid base64")
}

fn stdout(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what}: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Both static agents, written where `--agent` can take them.
fn agents(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    (
        dir.write("lab-agent-amd64", agent()),
        dir.write("lab-agent-arm64", arm64_agent()),
    )
}

#[test]
fn the_disk_and_its_container_image_and_configmap_read_back_with_real_tools() {
    let dir = TempDir::new("agent-disk");
    let (amd64, arm64) = agents(&dir);
    let out_dir = dir.path().join("out");
    let report: Value = serde_json::from_str(&stdout(
        Command::new(labctl_bin())
            .args(["agent-disk", "--json", "--namespace", "labs", "-o"])
            .arg(&out_dir)
            .arg("--agent")
            .arg(&arm64)
            .arg("--agent")
            .arg(&amd64),
        "labctl agent-disk",
    ))
    .unwrap();
    let pins: Vec<(&str, String)> = vec![
        ("amd64", sha256_hex(&agent())),
        ("arm64", sha256_hex(&arm64_agent())),
    ];
    for (i, (arch, sha)) in pins.iter().enumerate() {
        assert_eq!(report["agents"][i]["arch"], *arch, "{report}");
        assert_eq!(report["agents"][i]["sha256"], *sha, "{report}");
    }
    // Every artefact is what SHA256SUMS says, by `sha256sum -c` itself.
    stdout(
        Command::new("sha256sum")
            .args(["-c", "SHA256SUMS"])
            .current_dir(&out_dir),
        "sha256sum -c SHA256SUMS",
    );

    // The raw image: ISO 9660 labelled LAB-AGENT, as blkid (udev's
    // by-label) and isoinfo read it, each agent gzip'd under its name.
    let img = out_dir.join("lab-agent.img");
    let probe = stdout(Command::new("blkid").arg("-p").arg(&img), "blkid -p");
    assert!(
        probe.contains(r#"LABEL="LAB-AGENT""#) && probe.contains(r#"TYPE="iso9660""#),
        "{probe}"
    );
    let info = stdout(
        Command::new("isoinfo").arg("-d").arg("-i").arg(&img),
        "isoinfo -d",
    );
    assert!(info.contains("Volume id: LAB-AGENT"), "{info}");
    for (name, bytes) in [("/AMD64.GZ;1", agent()), ("/ARM64.GZ;1", arm64_agent())] {
        let out = Command::new("isoinfo")
            .arg("-i")
            .arg(&img)
            .args(["-x", name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "isoinfo -x {name}: {}",
            describe(&out)
        );
        assert!(
            gunzip(&out.stdout) == bytes,
            "{name} is not the agent gzip'd"
        );
    }

    // The containerDisk, as skopeo and umoci read an OCI archive: one image,
    // one layer, the disk alone under /disk/, 107:107, 0440.
    let archive = out_dir.join("lab-agent.containerdisk.tar");
    let reference = format!("oci-archive:{}", archive.display());
    let inspect: Value = serde_json::from_str(&stdout(
        image_tools::tool("skopeo").args(["inspect", &reference]),
        "skopeo inspect",
    ))
    .unwrap();
    assert_eq!(inspect["Os"], "linux", "{inspect}");
    assert_eq!(
        inspect["Layers"].as_array().map(Vec::len),
        Some(1),
        "{inspect}"
    );
    stdout(
        image_tools::tool("skopeo")
            .args(["copy", "--insecure-policy", &reference])
            .arg(format!("dir:{}", dir.path().join("pushed").display())),
        "skopeo copy (what an operator pushes to a registry)",
    );
    let layout = dir.path().join("layout");
    stdout(
        Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg({
            std::fs::create_dir(&layout).unwrap();
            &layout
        }),
        "tar -x",
    );
    let bundle = dir.path().join("bundle");
    stdout(
        image_tools::tool("umoci")
            .args(["unpack", "--image"])
            .arg(format!("{}:latest", layout.display()))
            .arg(&bundle),
        "umoci unpack",
    );
    let rootfs = bundle.join("rootfs");
    let names: Vec<String> = std::fs::read_dir(&rootfs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["disk"], "FROM scratch: the disk's folder alone");
    let disk = rootfs.join("disk/lab-agent.img");
    let meta = std::fs::metadata(&disk).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (107, 107, 0o440)
    );
    assert!(std::fs::read(&disk).unwrap() == std::fs::read(&img).unwrap());

    // The ConfigMap: valid for Kubernetes 1.34, immutable, within 1 MiB,
    // the same files as the disk (Debian's PyYAML reads it back).
    let configmap = out_dir.join("lab-agent.configmap.yaml");
    assert_valid(&configmap);
    let parsed: Value = serde_json::from_str(&stdout(
        pydeps::cloud_init_python()
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
            ])
            .arg(&configmap),
        "yaml.safe_load",
    ))
    .unwrap();
    assert_eq!(parsed["kind"], "ConfigMap");
    assert_eq!(parsed["immutable"], true);
    assert_eq!(parsed["metadata"]["namespace"], "labs");
    assert_eq!(parsed["metadata"]["name"], report["configmap_name"]);
    let mut total = 0;
    for ((arch, sha), bytes) in pins.iter().zip([agent(), arm64_agent()]) {
        let b64 = parsed["binaryData"][format!("{arch}.gz")].as_str().unwrap();
        let gz = base64_decode(b64);
        total += gz.len();
        assert!(gunzip(&gz) == bytes, "{arch}.gz");
        assert_eq!(
            parsed["metadata"]["annotations"][format!("lab-agent/sha256-{arch}")],
            *sha
        );
    }
    assert!(total <= 1 << 20, "{total} bytes of ConfigMap data");
}

#[test]
fn agent_disk_refuses_what_it_cannot_make() {
    let dir = TempDir::new("agent-disk-bad");
    let (amd64, _) = agents(&dir);
    let labctl = |args: &[&str]| {
        Command::new(labctl_bin())
            .args(["agent-disk", "-o"])
            .arg(dir.path().join("out"))
            .args(args)
            .output()
            .unwrap()
    };
    let amd64 = amd64.to_str().unwrap();
    let out = labctl(&["--agent", amd64, "--agent", amd64]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        describe(&out).contains("two `--agent`s for amd64"),
        "{}",
        describe(&out)
    );
    let out = labctl(&["--agent", amd64, "--arch", "arm64"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        describe(&out).contains("`--arch` leaves out"),
        "{}",
        describe(&out)
    );
    let not_elf = dir.write("script", b"#!/bin/sh\n");
    let out = labctl(&["--agent", not_elf.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        !dir.path().join("out").exists(),
        "nothing written on refusal"
    );
}

/// `labctl secret --agent-from disk`: hello-lab's user-data within 7,000
/// bytes, gzip'd, pinning the agent and carrying none of it; Debian's
/// cloud-init takes it apart as the two parts of the embedded payload; the
/// installer, with no agent disk attached, fails naming the cause, and
/// nothing runs unverified.
#[test]
fn a_payload_from_disk_is_small_pinned_and_refuses_to_run_without_its_disk() {
    let dir = TempDir::new("from-disk");
    let (amd64, _) = agents(&dir);
    let user_data = dir.path().join("user-data");
    let secret = dir.path().join("secret.yaml");
    let out = Command::new(labctl_bin())
        .arg("secret")
        .arg(crate::support::workspace().join("examples/hello-lab"))
        .args([
            "--name",
            "hello-vm",
            "--agent-from",
            "disk",
            "--json",
            "--agent",
        ])
        .arg(&amd64)
        .arg("--user-data-out")
        .arg(&user_data)
        .arg("-o")
        .arg(&secret)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let sha = sha256_hex(&agent());
    assert_eq!(report["agent_from"], "disk");
    assert_eq!(report["agent_sha256"], sha);
    // The exact volume the VM needs, for whoever renders it.
    assert!(stderr.contains("serial: lab-agent"), "{stderr}");
    assert!(stderr.contains("volumeLabel: LAB-AGENT"), "{stderr}");
    assert!(stderr.contains("agent from its disk"), "{stderr}");

    let bytes = std::fs::read(&user_data).unwrap();
    assert_eq!(report["budget"]["secret_bytes"], bytes.len());
    assert!(
        bytes.len() <= 7000,
        "hello-lab's user-data is {} bytes",
        bytes.len()
    );
    assert_eq!(&bytes[..2], b"\x1f\x8b", "gzip'd whole");
    let text = String::from_utf8(gunzip(&bytes)).unwrap();
    assert!(text.contains(&format!(" z run {sha} ")), "the pin");
    assert!(
        !text.contains("\x7fELF") && text.len() < 20_000,
        "the agent rides along"
    );

    // Through Debian's cloud-init as a guest's first boot: the same two
    // parts, and the installer stops at the agent, loud and clean.
    let d = deliver(&std::fs::read_to_string(&secret).unwrap());
    let parts: Vec<&str> = d.report["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["content_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        parts,
        ["text/cloud-config", "text/x-shellscript-per-instance"],
        "{}",
        d.report
    );
    assert_eq!(d.report["user_data_len"], bytes.len());
    assert!(
        d.report["per_instance_failed"]
            .as_str()
            .is_some_and(|s| s.contains("lab-agent-install")),
        "cloud-init must see the installer fail: {}",
        d.report
    );
    let (why, _) = d.read(INSTALL_ERROR_PATH);
    let why = String::from_utf8(why).unwrap();
    assert!(
        why.starts_with("no agent disk: this VM's payload takes the agent from a disk with serial lab-agent or a volume labelled LAB-AGENT"),
        "{why}"
    );
    let mut expected: Vec<String> = [
        INSTALL_ERROR_PATH,
        TOKEN_PATH,
        UNIT_PATH,
        &lab_agent_proto::guest::autologin_dropin_path("ttyS0"),
    ]
    .map(String::from)
    .to_vec();
    expected.sort();
    assert_eq!(d.written(), expected, "no agent, no lab file, no temp file");
    assert!(!d.file(AGENT_PATH).exists());
}

/// `--agent` of the wrong machine for `--arch` is refused with
/// `--agent-from disk` too: the pin would name an agent the VM cannot run.
#[test]
fn an_arm64_payload_pins_the_arm64_agent() {
    let dir = TempDir::new("from-disk-arm64");
    let (amd64, arm64) = agents(&dir);
    let render = |agent: &Path| {
        Command::new(labctl_bin())
            .arg("secret")
            .arg(crate::support::fixture_lab())
            .args([
                "--name",
                "vm",
                "--arch",
                "arm64",
                "--agent-from",
                "disk",
                "--json",
            ])
            .arg("--agent")
            .arg(agent)
            .output()
            .unwrap()
    };
    let out = render(&arm64);
    assert!(out.status.success(), "{}", describe(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["agent_sha256"], sha256_hex(&arm64_agent()));
    assert_eq!(report["arch"], "arm64");
    let out = render(&amd64);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

/// A VM given the payload of the other architecture: the installer says so
/// before it looks for any disk, and installs nothing.
#[test]
fn a_payload_for_another_machine_says_so_before_looking_for_the_disk() {
    let dir = TempDir::new("from-disk-wrong-arch");
    let (_, arm64) = agents(&dir);
    let secret = dir.path().join("secret.yaml");
    let out = Command::new(labctl_bin())
        .arg("secret")
        .arg(crate::support::fixture_lab())
        .args([
            "--name",
            "vm",
            "--arch",
            "arm64",
            "--agent-from",
            "disk",
            "--agent",
        ])
        .arg(&arm64)
        .arg("--token-out")
        .arg(dir.path().join("token"))
        .arg("-o")
        .arg(&secret)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    // Delivered on this x86_64 machine, as an amd64 node would run it.
    let d = deliver(&std::fs::read_to_string(&secret).unwrap());
    let (why, _) = d.read(INSTALL_ERROR_PATH);
    assert_eq!(
        String::from_utf8(why).unwrap(),
        "this VM's payload is for aarch64 (--arch arm64), and this machine is x86_64 \
         (--arch amd64): render this VM's payload for its architecture\n"
    );
    // (Had it looked for the disk first, the reason would be "no agent disk".)
    assert!(!d.file(AGENT_PATH).exists());
}
