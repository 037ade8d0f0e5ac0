//! The golden disk's rules, from inside the VM (three boots, one VM slot
//! held throughout):
//!
//! 1. a lab that asks for a 10 GiB root (`min_root_bytes`, `on_small_root`
//!    left at `warn`) boots the never-booted 3 GiB image, as the seeds'
//!    containerDisk fallback is: ready, `root.below_min` with the reason,
//!    `disk.booted_before: false`; the small-root banner greets an
//!    interactive login shell (`bash -l -i`) and is in no check's output,
//!    though checks run through login shells (`/etc/profile` reads
//!    `/etc/profile.d`) — with the user's profile or the system's alone;
//! 2. that VM is powered off, and its disk (its qcow2 layer on the image)
//!    becomes the base of two fresh VMs, as a golden booted once is: each
//!    reports `booted_before: true` with the evidence (the agent's record
//!    of the first VM's cloud-init instance, cloud-init's own dir of it),
//!    an instance id of its own — different from the first VM's and from
//!    each other's — and a write layer counted from its own first boot.

use crate::support::*;
use lab_agent_tests::local::{TempDir, describe};
use lab_agent_tests::vm::http;
use lab_agent_tests::vm::{BootOptions, GuestOs, PowerOff, Vm, VmLock};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the agent's banner says in the student's interactive shells.
const BANNER: &str = "smaller than usual (this lab expects 10.0 GiB)";

per_guest!(a_booted_golden_cannot_hide_a_reset);

fn a_booted_golden_cannot_hide_a_reset(guest: GuestOs) {
    let started = Instant::now();
    let image = image(guest);
    let dir = TempDir::new("vm-golden");
    let lab = dir.join("golden-lab");
    write_lab(&lab);
    let lab_arg = lab.to_str().unwrap();
    let payload = render_payload(&lab, &dir, guest.arch());
    let name = |vm: &str| format!("vm-golden-{vm}-{guest}");
    let lock = VmLock::acquire(&name("a")).expect("a VM slot");

    // ── 1. The never-booted image, a root under the lab's need ───────────
    let a = Vm::boot_with(
        &image,
        BootOptions::new(name("a"), payload.user_data.clone()),
        lock,
    )
    .expect("qemu starts");
    let conn = Conn {
        url: a.agent_url(),
        token_file: payload.token_file.clone(),
    };
    let ready = wait_ready(&a, &conn, &payload.token);
    assert_eq!(
        ready["disk"],
        serde_json::json!({"booted_before": false, "evidence": []}),
        "a never-booted image: {ready}"
    );
    let root = &ready["root"];
    assert_eq!(root["below_min"], true, "{ready}");
    assert_eq!(root["min_bytes"], 10u64 << 30, "{ready}");
    assert!(root["size_bytes"].as_u64().unwrap() < 10 << 30, "{ready}");
    assert_eq!(
        root["written_bytes_total"], root["written_bytes"],
        "the life's first boot: {ready}"
    );
    let reason = ready["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("ready, but the root filesystem is ")
            && reason.contains("under the 10.0 GiB (10737418240 bytes) this lab asks for"),
        "{ready}"
    );
    // The banner: an interactive login shell shows it (on stderr, with
    // `df -h /`); a check never does, with either profile.
    let shell = conn.exec(None, "bash -l -i -c 'echo shell'");
    assert_eq!(
        String::from_utf8_lossy(&shell.stdout),
        "shell\n",
        "{}",
        describe(&shell)
    );
    let banner = String::from_utf8_lossy(&shell.stderr);
    assert!(
        banner.contains(BANNER) && banner.contains("Filesystem"),
        "{}",
        describe(&shell)
    );
    let graded = conn.labctl("grade", &[lab_arg, "--json"]);
    assert_eq!(graded.status.code(), Some(0), "{}", describe(&graded));
    let report: Value = serde_json::from_slice(&graded.stdout).unwrap();
    for (check, out) in report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .zip(["login\n", "system\n"])
    {
        assert_eq!(
            (check["stdout"].as_str(), check["stderr"].as_str()),
            (Some(out), Some("")),
            "a check's output is its own: {check}"
        );
    }
    let golden_iid = conn
        .run("cat /run/cloud-init/.instance-id")
        .trim()
        .to_owned();
    let golden_id = ready["instance"]["id"].as_str().unwrap().to_owned();
    let first = started.elapsed();

    // ── 2. Its disk, booted once, as the base of two fresh VMs ───────────
    assert!(
        matches!(
            a.powerdown(Duration::from_secs(120)),
            Ok(PowerOff::Clean(_))
        ),
        "the golden's VM powers off cleanly"
    );
    let golden = dir.join("golden.qcow2");
    keep_disk(&a.paths().overlay, &golden);
    let mut lock = a.release();
    let mut ids = vec![golden_id.clone()];
    for vm in ["b", "c"] {
        let opts = BootOptions {
            root_base: Some(golden.clone()),
            ..BootOptions::new(name(vm), payload.user_data.clone())
        };
        let clone = Vm::boot_with(&image, opts, lock).expect("qemu starts on the golden");
        let conn = Conn {
            url: clone.agent_url(),
            token_file: payload.token_file.clone(),
        };
        let ready = wait_ready(&clone, &conn, &payload.token);
        let own_iid = conn
            .run("cat /run/cloud-init/.instance-id")
            .trim()
            .to_owned();
        assert_ne!(own_iid, golden_iid);
        let disk = &ready["disk"];
        assert_eq!(disk["booted_before"], true, "{vm}: {ready}");
        let evidence: Vec<&str> = disk["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        let record = format!(
            "the agent's record in /var/lib/lab-agent was made under cloud-init instance \
             `{golden_iid}`, not this VM's `{own_iid}`: it came with the disk"
        );
        assert_eq!(evidence.first(), Some(&record.as_str()), "{vm}: {ready}");
        assert!(
            evidence.iter().any(|e| e.starts_with(&format!(
                "cloud-init ran on this disk before as `{golden_iid}`"
            ))),
            "{vm}: {ready}"
        );
        let id = ready["instance"]["id"].as_str().unwrap().to_owned();
        assert!(
            !ids.contains(&id),
            "{vm} kept an earlier VM's id {id}: {ids:?}"
        );
        assert_eq!(ready["instance"]["boots"], 1, "{vm}: {ready}");
        assert_eq!(
            ready["root"]["written_bytes_total"], ready["root"]["written_bytes"],
            "{vm}: its own life's writes: {ready}"
        );
        let info = info(&clone, &payload.token);
        assert_eq!(
            (&info["instance"], &info["disk"]),
            (&ready["instance"], disk)
        );
        eprintln!("golden, {guest}: VM {vm}: {} evidence: {evidence:#?}", id);
        ids.push(id);
        lock = clone.release();
    }
    drop(lock);
    eprintln!(
        "golden, {guest}: 3 boots in {:.0} s (the never-booted one {:.0} s)",
        started.elapsed().as_secs_f64(),
        first.as_secs_f64()
    );
}

/// A lab that needs a 10 GiB root (more than the images' 3 GiB), with two
/// checks that print one line each: through the user's login profile and
/// through the system's.
fn write_lab(lab: &Path) {
    std::fs::create_dir_all(lab).unwrap();
    std::fs::write(
        lab.join("lab.toml"),
        r#"name = "golden"
[setup]
script = "setup.sh"
[readiness]
min_root_bytes = 10737418240
[[checks]]
name = "through the login profile"
run = "echo login"
[[checks]]
name = "through the system profile"
run = "echo system"
profile = "system"
"#,
    )
    .unwrap();
    let setup = lab.join("setup.sh");
    std::fs::write(&setup, "#!/bin/bash\necho set up\n").unwrap();
    std::fs::set_permissions(&setup, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `labctl wait`, then the agent's `/v1/ready` answer.
fn wait_ready(vm: &Vm, conn: &Conn, token: &str) -> Value {
    let waited = conn.labctl("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let answer = http::get(vm.addr(), "/v1/ready", Some(token)).expect("/v1/ready");
    assert_eq!(answer.status, 200, "{}", answer.raw);
    serde_json::from_str(answer.body()).unwrap()
}

fn info(vm: &Vm, token: &str) -> Value {
    let answer = http::get(vm.addr(), "/v1/info", Some(token)).expect("/v1/info");
    serde_json::from_str(answer.body()).unwrap()
}

/// Keeps a powered-off VM's disk (its qcow2 layer on the image) beyond the
/// VM's run dir, read-only: every VM made from it writes to its own layer.
fn keep_disk(overlay: &Path, to: &Path) {
    if std::fs::rename(overlay, to).is_err() {
        std::fs::copy(overlay, to).expect("copy the golden's disk");
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o444)).unwrap();
}
