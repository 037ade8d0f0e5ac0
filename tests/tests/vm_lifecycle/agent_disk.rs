//! `--agent-from disk` on real guests: hello-lab's small payload (gzip'd
//! whole: cloud-init decompresses it before it splits it) with the agent
//! on a disk attached as KubeVirt attaches it.
//!
//! - [`from_disk`] (both guests): the raw image (`labctl agent-disk`'s
//!   `lab-agent.img`) on a virtio disk with serial `lab-agent`, as a
//!   containerDisk volume whose `disks:` entry says `serial: lab-agent`:
//!   ready, graded, the agent installed is the pinned one, the disk left
//!   unmounted; the student's reboot: ready and graded again.
//! - [`another_agent_on_the_disk`] (both guests): the disk holds another
//!   build of the agent: the installer names the mismatch on the serial
//!   console (and in cloud-init's output log), and no agent ever answers.
//! - [`configmap_disk`] (Debian 13, once): the agent disk as KubeVirt
//!   makes a ConfigMap volume's: the ConfigMap's keys as the kubelet
//!   mounts them (an atomic writer's `..data` link), written into an ISO
//!   by `xorrisofs` with KubeVirt's own arguments (kubevirt/kubevirt
//!   `pkg/config/config.go`, `defaultCreateIsoImage`) and the label
//!   `LAB-AGENT`, on a virtio disk without a serial: ready.
//!
//! The time to ready beside the embedded payload is the benchmark
//! `side_by_side` (`#[ignore]`d, not CI).

use crate::support::*;
use lab_agent_tests::image_tools;
use lab_agent_tests::local::{
    HELLO_LAB_BEFORE_THE_STEP, TempDir, check_outcomes, describe, labctl_bin,
};
use lab_agent_tests::vm::{BootOptions, GuestOs, Vm, VmImage};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// First boot of hello-lab under TCG on 2 shared cores: 2–5 min.
const BOOT: Duration = Duration::from_secs(600);

per_guest!(from_disk, another_agent_on_the_disk);

/// The payload with `--agent-from disk` for `guest`, pinning the static
/// agent of its architecture: the user-data (gzip'd) and the token.
fn render_from_disk(lab: &Path, dir: &TempDir, guest: GuestOs) -> Payload {
    render_payload_with(lab, dir, guest.arch(), &["--agent-from", "disk"])
}

/// `labctl agent-disk -o DIR --agent AGENT`: the raw image's path.
fn agent_disk(dir: &Path, agent: &Path) -> PathBuf {
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
    dir.join("lab-agent.img")
}

/// qemu's arguments for a read-only virtio disk, with the serial a
/// KubeVirt `disks:` entry gives it (`runner/src/qemu/argv.rs` makes the
/// same for `labctl try --vm --agent-from disk`).
fn disk_args(image: &Path, serial: Option<&str>) -> Vec<String> {
    // The last PCI slot: the guest names virtio disks in PCI order, and
    // the root disk must stay /dev/vda.
    let mut device = "virtio-blk-pci,drive=agentdisk,addr=0x1f".to_owned();
    if let Some(serial) = serial {
        device.push_str(&format!(",serial={serial}"));
    }
    vec![
        "-drive".into(),
        format!(
            "file={},if=none,id=agentdisk,format=raw,readonly=on",
            image.display()
        ),
        "-device".into(),
        device,
    ]
}

fn boot(image: &VmImage, name: &str, payload: &Payload, disk: Vec<String>) -> (Vm, Conn) {
    let opts = BootOptions {
        extra_qemu_args: disk,
        ..BootOptions::new(name, payload.user_data.clone())
    };
    let vm = Vm::boot(image, opts).expect("qemu starts");
    let conn = Conn {
        url: vm.agent_url(),
        token_file: payload.token_file.clone(),
    };
    (vm, conn)
}

fn wait_ready(conn: &Conn, what: &str) -> Duration {
    let started = Instant::now();
    let waited = conn.labctl("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]);
    assert_eq!(
        waited.status.code(),
        Some(0),
        "{what}: {}",
        describe(&waited)
    );
    started.elapsed()
}

/// hello-lab graded before the student's step: three pass, one fails.
fn grade_before_the_step(conn: &Conn, lab: &Path) {
    let graded = conn.labctl("grade", &[lab.to_str().unwrap(), "--json"]);
    assert_eq!(graded.status.code(), Some(1), "{}", describe(&graded));
    let report: Value = serde_json::from_slice(&graded.stdout).unwrap();
    assert_eq!(
        check_outcomes(&report),
        HELLO_LAB_BEFORE_THE_STEP,
        "{report}"
    );
}

fn from_disk(guest: GuestOs) {
    let image = image(guest);
    let dir = TempDir::new("vm-agent-disk");
    let lab = repo_root().join("examples/hello-lab");
    let agent = static_agent_for(guest.arch());
    let payload = render_from_disk(&lab, &dir, guest);
    assert!(
        payload.user_data.len() <= 7000,
        "{}",
        payload.user_data.len()
    );
    assert_eq!(&payload.user_data[..2], b"\x1f\x8b", "gzip'd whole");
    let disk = agent_disk(&dir.join("disk"), agent);
    let (vm, conn) = boot(
        &image,
        &format!("vm-disk-{guest}"),
        &payload,
        disk_args(&disk, Some("lab-agent")),
    );
    let t_ready = wait_ready(&conn, "first boot");
    grade_before_the_step(&conn, &lab);

    // The agent that runs is the one pinned, taken from the disk; the disk
    // is left as found (not mounted, no temp dir or copy left).
    let sha = lab_agent_cloudinit::pin::sha256_hex(&std::fs::read(agent).unwrap());
    let seen = conn.run(
        "sha256sum /usr/local/bin/lab-agent | cut -c1-64; \
         ls -l /dev/disk/by-id/virtio-lab-agent | sed 's/.*-> //'; \
         grep -c iso9660 /proc/mounts || true; \
         ls /usr/local/bin; \
         grep 'lab-agent payload' /var/log/cloud-init-output.log",
    );
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines[0], sha, "{seen}");
    assert!(lines[1].ends_with("vdc"), "the third virtio disk: {seen}");
    assert_eq!(lines[2], "0", "the agent disk is still mounted: {seen}");
    assert_eq!(lines[3], "lab-agent", "a temp file is left: {seen}");
    assert!(
        seen.contains("lab-agent payload: installed the agent from its disk, "),
        "{seen}"
    );

    // The student's reboot: the agent comes back from the root disk (the
    // installer does not run again), ready and graded.
    let mark = vm.console_mark();
    conn.run("systemd-run --no-block --on-active=1 --unit=lab-test-reboot systemctl reboot");
    vm.wait_for_console_since(mark, "reboot: Restarting system", Duration::from_secs(180))
        .expect("the guest reboots");
    let t_ready2 = wait_ready(&conn, "after the reboot");
    grade_before_the_step(&conn, &lab);
    eprintln!(
        "agent disk, {guest}: user-data {} bytes; `labctl wait` ready {:.1} s after qemu \
         started, {:.1} s after the reboot",
        payload.user_data.len(),
        t_ready.as_secs_f64(),
        t_ready2.as_secs_f64()
    );
    let _ = vm.powerdown(Duration::from_secs(30));
}

fn another_agent_on_the_disk(guest: GuestOs) {
    let image = image(guest);
    let dir = TempDir::new("vm-agent-disk-other");
    let lab = repo_root().join("examples/hello-lab");
    let agent = static_agent_for(guest.arch());
    let payload = render_from_disk(&lab, &dir, guest);
    // Another build: the same program with one byte more (a different
    // SHA-256, and it would run).
    let mut other = std::fs::read(agent).unwrap();
    other.push(0);
    let other_path = dir.join("other-lab-agent");
    std::fs::write(&other_path, &other).unwrap();
    let disk = agent_disk(&dir.join("disk"), &other_path);
    let (vm, conn) = boot(
        &image,
        &format!("vm-disk-other-{guest}"),
        &payload,
        disk_args(&disk, Some("lab-agent")),
    );
    let pinned = lab_agent_cloudinit::pin::sha256_hex(&std::fs::read(agent).unwrap());
    let found = lab_agent_cloudinit::pin::sha256_hex(&other);
    // One line on the serial console names both.
    let line = format!(
        "lab-agent payload: the agent disk /dev/vdc holds another lab-agent (sha256 {found}) \
         than this VM's payload pins (sha256 {pinned})"
    );
    vm.wait_for_console(&line, BOOT)
        .unwrap_or_else(|e| panic!("{e}: the console does not name the mismatch"));
    // cloud-init goes on to its end; the agent never answers.
    vm.wait_for_console(" finished at ", Duration::from_secs(300))
        .expect("cloud-init's final message");
    let quiet_until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < quiet_until {
        assert!(
            vm.http_get("/v1/ready", Some(&payload.token)).is_err(),
            "an agent answered"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let out = conn.labctl("wait", &["--timeout", "5"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let _ = vm.powerdown(Duration::from_secs(30));
}

/// Once, on Debian 13: the installer reads it as it reads the raw image,
/// which both guests prove; only the way to the disk (udev's by-label)
/// differs.
mod configmap_disk {
    use lab_agent_tests::vm::GuestOs;
    #[test]
    #[cfg_attr(
        vm_guest_left_out = "debian-13",
        ignore = "LAB_AGENT_VM_GUESTS leaves out debian-13"
    )]
    fn debian_13() {
        crate::support::on_guest(GuestOs::Debian13, super::configmap_disk)
    }
}

fn configmap_disk(guest: GuestOs) {
    let image = image(guest);
    let dir = TempDir::new("vm-agent-configmap");
    let lab = repo_root().join("examples/hello-lab");
    let agent = static_agent_for(guest.arch());
    let payload = render_from_disk(&lab, &dir, guest);
    let iso = configmap_iso(&dir, agent);
    let (vm, conn) = boot(
        &image,
        &format!("vm-configmap-{guest}"),
        &payload,
        disk_args(&iso, None),
    );
    wait_ready(&conn, "ConfigMap disk");
    grade_before_the_step(&conn, &lab);
    let seen = conn.run("ls /dev/disk/by-label/; ls /dev/disk/by-id/ | grep -c lab-agent || true");
    assert!(seen.contains("LAB-AGENT"), "{seen}");
    assert!(seen.trim_end().ends_with('0'), "no serial: {seen}");
    let _ = vm.powerdown(Duration::from_secs(30));
}

/// The ISO KubeVirt makes of the ConfigMap `labctl agent-disk` writes:
/// its keys as the kubelet lays out a ConfigMap volume (each key a link
/// into `..data`, itself a link to a timestamped folder), then
/// `xorrisofs` with `defaultCreateIsoImage`'s arguments, one graft point
/// per entry of the folder (`getFilesLayout`, hidden entries included).
fn configmap_iso(dir: &TempDir, agent: &Path) -> PathBuf {
    let out = dir.join("cm");
    let yaml = {
        let disk_dir = dir.join("cm-disk");
        agent_disk(&disk_dir, agent);
        disk_dir.join("lab-agent.configmap.yaml")
    };
    let parsed: Value = serde_json::from_str(&{
        let out = lab_agent_tests::pydeps::cloud_init_python()
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
            ])
            .arg(&yaml)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    })
    .unwrap();
    let mount = out.join("volume");
    let stamp = mount.join("..2026_12_05_12_00_00.000000001");
    std::fs::create_dir_all(&stamp).unwrap();
    std::os::unix::fs::symlink("..2026_12_05_12_00_00.000000001", mount.join("..data")).unwrap();
    for (key, b64) in parsed["binaryData"].as_object().unwrap() {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        std::fs::write(stamp.join(key), bytes).unwrap();
        std::os::unix::fs::symlink(format!("..data/{key}"), mount.join(key)).unwrap();
    }
    let iso = out.join("volume.iso");
    let mut xorrisofs = image_tools::tool("xorrisofs");
    xorrisofs
        .arg("-output")
        .arg(&iso)
        .args(["-follow-links", "-volid", "LAB-AGENT", "-joliet", "-rock"])
        .args(["-graft-points", "-partition_cyl_align", "on"]);
    for entry in std::fs::read_dir(&mount).unwrap() {
        let name = entry.unwrap().file_name();
        let name = name.to_str().unwrap();
        xorrisofs.arg(format!("{name}={}", mount.join(name).display()));
    }
    let made = xorrisofs.output().expect("run xorrisofs");
    assert!(made.status.success(), "xorrisofs: {}", describe(&made));
    iso
}

/// Time to ready with the agent on its disk beside the embedded payload,
/// each booted `ROUNDS` times alternately on one guest.
#[test]
#[ignore = "benchmark: ~15 min; `cargo test -p lab-agent-tests --test vm_lifecycle \
            agent_disk::side_by_side -- --ignored --nocapture`"]
fn side_by_side() {
    const ROUNDS: usize = 3;
    let guest = GuestOs::Debian12;
    let image = image(guest);
    let dir = TempDir::new("vm-agent-disk-bench");
    let lab = repo_root().join("examples/hello-lab");
    let agent = static_agent_for(guest.arch());
    let disk_payload = render_from_disk(&lab, &dir, guest);
    let embedded_dir = TempDir::new("vm-agent-embedded-bench");
    let embedded = render_payload(&lab, &embedded_dir, guest.arch());
    let disk = agent_disk(&dir.join("disk"), agent);
    let (mut t_embedded, mut t_disk) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for from_disk in [round % 2 == 0, round % 2 != 0] {
            let (payload, args) = if from_disk {
                (&disk_payload, disk_args(&disk, Some("lab-agent")))
            } else {
                (&embedded, Vec::new())
            };
            let (vm, conn) = boot(
                &image,
                &format!("vm-bench-{round}-{from_disk}"),
                payload,
                args,
            );
            let started = vm.started_at();
            wait_ready(&conn, "bench");
            let t = started.elapsed().as_secs_f64();
            if from_disk {
                &mut t_disk
            } else {
                &mut t_embedded
            }
            .push(t);
            let _ = vm.powerdown(Duration::from_secs(30));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (e, d) = (median(&mut t_embedded), median(&mut t_disk));
    eprintln!(
        "time to ready, {guest}, {ROUNDS} boots each (qemu start → `labctl wait` ready):\n  \
         embedded ({} bytes of user-data): {t_embedded:?}, median {e:.1} s\n  \
         agent disk ({} bytes): {t_disk:?}, median {d:.1} s\n  ratio disk/embedded {:.3}",
        embedded.user_data.len(),
        disk_payload.user_data.len(),
        d / e
    );
}
