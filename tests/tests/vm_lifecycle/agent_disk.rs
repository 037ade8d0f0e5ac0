//! `--agent-from disk` on real guests: hello-lab's small payload (gzip'd
//! whole: cloud-init decompresses it before it splits it) with the agent
//! on a disk attached as KubeVirt attaches it.
//!
//! - [`from_disk`] (both guests): the VM `labctl render --agent-from disk
//!   --agent-disk containerdisk:IMAGE --channel both` describes, booted
//!   through the manifest's mapping (`lab_agent_tests::vm::manifest`,
//!   tests/vm/README.md "From the manifest to qemu"): its Secret's
//!   user-data and KubeVirt's meta-data in the seed, the agent's disk taken
//!   out of the containerDisk image (`labctl agent-disk`'s OCI archive) on
//!   a virtio disk with the serial its `disks:` entry names (`lab-agent`),
//!   the vsock device of `autoattachVSOCK`: ready and graded over TCP and
//!   over vsock, the agent installed is the pinned one, the disk left
//!   unmounted; the student's reboot: ready and graded again.
//! - [`another_agent_on_the_disk`] (both guests): the same VM (`--channel
//!   tcp`), its containerDisk image holding another build of the agent:
//!   the installer names the mismatch on the serial console (and in
//!   cloud-init's output log), and no agent ever answers.
//! - [`configmap_disk`] (Debian 13, once): the VM `labctl render
//!   --agent-disk configmap:NAME --channel tcp` describes, through the same
//!   mapping: the ConfigMap `labctl agent-disk` writes, made an ISO as
//!   KubeVirt makes a ConfigMap volume's, labelled as the volume says
//!   (`LAB-AGENT`), on a virtio disk without a serial; no vsock device:
//!   ready and graded over TCP.
//!
//! The time to ready beside the embedded payload is the benchmark
//! `side_by_side` (`#[ignore]`d, not CI), the one boot here put together
//! by hand (`labctl secret`'s payload, [`disk_args`]).

use crate::manifest;
use crate::support::*;
use lab_agent_tests::local::{HELLO_LAB_BEFORE_THE_STEP, TempDir, check_outcomes, describe};
use lab_agent_tests::vm::manifest::{self as vm_manifest, Cluster, MappedVm};
use lab_agent_tests::vm::{BootOptions, GuestOs, Vm, VmImage};
use serde_json::Value;
use std::path::{Path, PathBuf};
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
    manifest::agent_disk(dir, agent);
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

/// The VM `labctl render` describes for `guest` with the agent's disk of
/// `flags`, mapped onto this host (its disks made in `dir`) and booted.
fn boot_rendered(
    image: &VmImage,
    dir: &TempDir,
    cluster: &Cluster,
    name: &str,
    flags: &[&str],
) -> (MappedVm, Vm, Conn) {
    let lab = repo_root().join("examples/hello-lab");
    let rendered = manifest::render(
        &lab,
        &dir.path,
        image.os.arch(),
        &cluster.guest_image,
        name,
        flags,
    );
    let mapped = vm_manifest::map(&rendered.documents, name, cluster, &dir.join("volumes"))
        .unwrap_or_else(|e| panic!("{e}"));
    let opts = mapped.boot_options(image).unwrap_or_else(|e| panic!("{e}"));
    let vm = Vm::boot(image, opts).expect("qemu starts");
    let conn = Conn {
        url: vm.agent_url(),
        token_file: rendered.token_file,
    };
    (mapped, vm, conn)
}

fn from_disk(guest: GuestOs) {
    let image = image(guest);
    let dir = TempDir::new("vm-agent-disk");
    let lab = repo_root().join("examples/hello-lab");
    let agent = static_agent_for(guest.arch());
    let disk = dir.join("disk");
    manifest::agent_disk(&disk, agent);
    let cluster = manifest::cluster(guest, &disk);
    let (mapped, vm, conn) = boot_rendered(
        &image,
        &dir,
        &cluster,
        &format!("disk-{guest}"),
        &[
            "--agent-from",
            "disk",
            "--agent-disk",
            &format!("containerdisk:{}", manifest::AGENT_IMAGE),
            "--channel",
            "both",
        ],
    );
    assert!(mapped.user_data.len() <= 7000, "{}", mapped.user_data.len());
    assert_eq!(&mapped.user_data[..2], b"\x1f\x8b", "gzip'd whole");
    assert_eq!(mapped.disks[0].serial.as_deref(), Some("lab-agent"));
    let t_ready = wait_ready(&conn, "first boot");
    grade_before_the_step(&conn, &lab);
    // `autoattachVSOCK`: the same agent over the guest's vsock.
    let vsock = Conn {
        url: vm.vsock_url().expect("autoattachVSOCK: a vsock device"),
        token_file: conn.token_file.clone(),
    };
    wait_ready(&vsock, "over vsock");
    grade_before_the_step(&vsock, &lab);

    // The agent that runs is the one pinned, taken from the disk the VM
    // names (its serial); the disk is left as found (not mounted, no temp
    // dir or copy left); the guest is named as KubeVirt's meta-data names
    // it, and its unit listens on both channels.
    let sha = lab_agent_cloudinit::pin::sha256_hex(&std::fs::read(agent).unwrap());
    let seen = conn.run(
        "sha256sum /usr/local/bin/lab-agent | cut -c1-64; \
         ls -l /dev/disk/by-id/virtio-lab-agent | sed 's/.*-> //'; \
         grep -c iso9660 /proc/mounts || true; \
         ls /usr/local/bin; \
         hostname; cat /var/lib/cloud/data/instance-id; \
         journalctl -u lab-agent.service --no-pager -o cat | grep -c 'listening addr=0.0.0.0:8899,vsock:8899 '; \
         grep 'lab-agent payload' /var/log/cloud-init-output.log",
    );
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines[0], sha, "{seen}");
    assert!(lines[1].ends_with("vdc"), "the third virtio disk: {seen}");
    assert_eq!(lines[2], "0", "the agent disk is still mounted: {seen}");
    assert_eq!(lines[3], "lab-agent", "a temp file is left: {seen}");
    assert_eq!(lines[4], mapped.plan.hostname, "{seen}");
    assert_eq!(
        lines[5],
        vm_manifest::firmware_uuid(&mapped.plan.name),
        "{seen}"
    );
    assert_eq!(lines[6], "1", "the unit listens on TCP and vsock: {seen}");
    assert!(
        seen.contains("lab-agent payload: installed the agent from its disk, "),
        "{seen}"
    );

    // The student's reboot: the agent comes back from the root disk (the
    // installer does not run again), ready and graded. Over TCP: the
    // harness's vsock device model wedges on a connection during the
    // guest's reset (tests/vm/README.md), which `vsock` walks around.
    let mark = vm.console_mark();
    conn.run("systemd-run --no-block --on-active=1 --unit=lab-test-reboot systemctl reboot");
    vm.wait_for_console_since(mark, "reboot: Restarting system", Duration::from_secs(180))
        .expect("the guest reboots");
    let t_ready2 = wait_ready(&conn, "after the reboot");
    grade_before_the_step(&conn, &lab);
    eprintln!(
        "agent disk, {guest}: user-data {} bytes; `labctl wait` ready {:.1} s after qemu \
         started, {:.1} s after the reboot",
        mapped.user_data.len(),
        t_ready.as_secs_f64(),
        t_ready2.as_secs_f64()
    );
    let _ = vm.powerdown(mapped.plan.grace);
}

fn another_agent_on_the_disk(guest: GuestOs) {
    let image = image(guest);
    let dir = TempDir::new("vm-agent-disk-other");
    let agent = static_agent_for(guest.arch());
    // Another build: the same program with one byte more (a different
    // SHA-256, and it would run), in the image the VM names; the payload
    // pins the real one.
    let mut other = std::fs::read(agent).unwrap();
    other.push(0);
    let other_path = dir.join("other-lab-agent");
    std::fs::write(&other_path, &other).unwrap();
    let disk = dir.join("disk");
    manifest::agent_disk(&disk, &other_path);
    let (_, vm, conn) = boot_rendered(
        &image,
        &dir,
        &manifest::cluster(guest, &disk),
        &format!("disk-other-{guest}"),
        &[
            "--agent-from",
            "disk",
            "--agent-disk",
            &format!("containerdisk:{}", manifest::AGENT_IMAGE),
            "--channel",
            "tcp",
        ],
    );
    let token = std::fs::read_to_string(&conn.token_file).unwrap();
    let token = token.trim_end();
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
            vm.http_get("/v1/ready", Some(token)).is_err(),
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
    let disk = dir.join("disk");
    manifest::agent_disk(&disk, static_agent_for(guest.arch()));
    let cluster = manifest::cluster(guest, &disk);
    let (mapped, vm, conn) = boot_rendered(
        &image,
        &dir,
        &cluster,
        &format!("configmap-{guest}"),
        &[
            "--agent-from",
            "disk",
            "--agent-disk",
            &format!("configmap:{}", manifest::config_map_name(&cluster)),
            "--channel",
            "tcp",
        ],
    );
    assert!(!mapped.plan.vsock, "--channel tcp: no vsock device");
    let label = mapped.disks[0].label.clone().expect("a ConfigMap's ISO");
    assert_eq!(label, "LAB-AGENT");
    wait_ready(&conn, "ConfigMap disk");
    grade_before_the_step(&conn, &lab);
    let seen = conn.run("ls /dev/disk/by-label/; ls /dev/disk/by-id/ | grep -c lab-agent || true");
    assert!(seen.contains(&label), "{seen}");
    assert!(seen.trim_end().ends_with('0'), "no serial: {seen}");
    let _ = vm.powerdown(mapped.plan.grace);
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
