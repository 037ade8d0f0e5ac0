//! A lab of several VMs under qemu, as an author proves it:
//! `labctl test examples/two-vm-lab --vm …` boots one Debian 12 guest per
//! VM (the runner's `VmSession`), each with its own payload, joined on the
//! session's private network, and runs the self-test on them as one. The
//! lab's third check fetches `http://server:8080/` from `client`, so it
//! passes after the solve only when `server` resolves and routes from
//! `client`: the network and the names are proven by the lab itself. Then
//! both guests are gone, and the session's run dir with them.
//!
//! Debian 12 only (two TCG guests at once take the machine's two slots:
//! one guest OS is what CI's time allows); ignored when
//! `LAB_AGENT_VM_GUESTS` leaves debian-12 out.

use crate::failing::{process_is_qemu, qemu_pid};
use crate::support::*;
use lab_agent_tests::local::labctl_bin;
use lab_agent_tests::vm::{GuestOs, VmLock};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[test]
#[cfg_attr(
    vm_guest_left_out = "debian-12",
    ignore = "LAB_AGENT_VM_GUESTS leaves out debian-12"
)]
fn two_vm_lab_holds_on_two_guests() {
    on_guest(GuestOs::Debian12, two_vm_lab_on_guests);
}

fn two_vm_lab_on_guests(guest: GuestOs) {
    let image = image(guest);
    let lab = repo_root().join("examples/two-vm-lab");
    let mut cmd = on_kernel_with(&labctl_bin(), "test", &lab, &image);
    // One vCPU and 1 GiB each: two TCG guests on a 2-core host, a core each.
    cmd.args(["--json", "--memory", "1024"]);

    let lock = VmLock::acquire_all("vm-session").expect("every VM slot");
    let mut tested = Running::spawn(cmd, "test");
    // Each guest says its qemu pid and console.
    let mut guests: Vec<(&str, u32, PathBuf)> = Vec::new();
    for vm in ["server", "client"] {
        let needle = format!("VM `{vm}`: booting ");
        let line = tested.wait_for_line(&needle, Duration::from_secs(120));
        let console = PathBuf::from(between(&line, "console `", "`"));
        guests.push((vm, qemu_pid(&line), console));
    }
    let tested = tested.finish();
    drop(lock);

    assert_eq!(tested.code, Some(0), "labctl test --kernel: {tested}");
    // `/tmp/labctl-try-vms-LAB-XXXXXX/VM/console.log`: one session dir.
    let session_dir = guests[0].2.parent().and_then(Path::parent).unwrap();
    for (vm, pid, console) in &guests {
        assert_eq!(console.parent().unwrap(), session_dir.join(vm), "{tested}");
        assert!(!process_is_qemu(*pid), "VM `{vm}`: qemu {pid} still runs");
    }
    assert!(!session_dir.exists(), "{} is left", session_dir.display());

    let report: Value = serde_json::from_str(&tested.stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {tested}"));
    assert_eq!(report["ok"], true, "{report:#}");
    let phase = |name: &str| -> Vec<(String, String)> {
        report["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .map(|c| {
                (
                    c[name]["vm"].as_str().unwrap_or("").to_owned(),
                    c[name]["status"].as_str().unwrap_or("-").to_owned(),
                )
            })
            .collect()
    };
    let on = |vm: &str, status: &str| (vm.to_owned(), status.to_owned());
    // Before the solve the service runs (the setup's own check), the
    // student's step is undone on `server`, so `client` cannot fetch.
    assert_eq!(
        phase("after_setup"),
        [
            on("server", "passed"),
            on("server", "failed"),
            on("client", "failed")
        ],
        "{report:#}"
    );
    for after in ["after_solve", "reversed"] {
        assert_eq!(
            phase(after),
            [
                on("server", "passed"),
                on("server", "passed"),
                on("client", "passed")
            ],
            "{after}: {report:#}"
        );
    }
    eprintln!(
        "labctl test two-vm-lab on two {guest} guests: exit 0 after {} (timings: {})",
        secs(tested.took),
        report["timings_ms"]
    );
}

/// A guest of the session whose qemu dies (here `kill -9` while both
/// boot) ends `labctl try` at once, named (exit 3); the other guest is
/// stopped and discarded, the dead one's console log alone is kept.
#[test]
#[cfg_attr(
    vm_guest_left_out = "debian-12",
    ignore = "LAB_AGENT_VM_GUESTS leaves out debian-12"
)]
fn a_guest_that_dies_ends_the_session_naming_it() {
    on_guest(GuestOs::Debian12, a_guest_dies);
}

fn a_guest_dies(guest: GuestOs) {
    let image = image(guest);
    let lab = repo_root().join("examples/two-vm-lab");
    let mut cmd = on_kernel_with(&labctl_bin(), "try", &lab, &image);
    cmd.args(["--memory", "1024"]);

    let lock = VmLock::acquire_all("vm-session-dies").expect("every VM slot");
    let mut tried = Running::spawn(cmd, "try");
    let mut pids = Vec::new();
    for vm in ["server", "client"] {
        let line = tried.wait_for_line(&format!("VM `{vm}`: booting "), Duration::from_secs(120));
        pids.push(qemu_pid(&line));
    }
    let killed = std::process::Command::new("kill")
        .args(["-9", &pids[1].to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let tried = tried.finish();
    drop(lock);

    assert_eq!(tried.code, Some(3), "{tried}");
    assert!(
        tried
            .stderr
            .contains("error: VM `client`: qemu exited (signal: 9 (SIGKILL))"),
        "{tried}"
    );
    assert!(
        tried.stderr.contains("VM `server`: stopped the VM"),
        "{tried}"
    );
    for pid in &pids {
        assert!(!process_is_qemu(*pid), "qemu {pid} still runs");
    }
    let kept = PathBuf::from(between(&tried.stderr, "console log kept: `", "`"));
    assert!(
        kept.ends_with("client/console.log"),
        "the dead VM's console: {}",
        kept.display()
    );
    let session_dir = kept.parent().and_then(Path::parent).unwrap().to_owned();
    let left: Vec<String> = std::fs::read_dir(&session_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["client"], "only the dead VM's logs stay");
    assert!(
        !tried.stderr.contains("VM `server`: console log kept"),
        "{tried}"
    );
    std::fs::remove_dir_all(&session_dir).unwrap();
}
