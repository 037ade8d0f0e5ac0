//! `labctl test examples/hello-lab --vm DISK`: the self-test an author
//! runs before publishing, on a real guest booted from its disk (GRUB,
//! cloud-init, the payload `labctl secret` renders), as the sandbox run in
//! `.ci/run` is on this machine. Each check must fail after the setup
//! (hello-lab's setup leaves the student's work undone), pass after the
//! lab's solve script and the checks' solves, and pass again in reverse
//! order; the VM is stopped and its run dir removed. Debian 12 only: the
//! phases are the runner's, the same on every guest, and a boot costs
//! minutes of CI (the guests' differences are the other scenarios').
//! With `--agent-from disk`: the payload pins the agent, and the runner
//! attaches the agent's disk as KubeVirt attaches a containerDisk with
//! `serial: lab-agent` (the embedded payload is every other scenario's),
//! beside the vsock device every `try --vm` guest gets.

use crate::support::*;
use lab_agent_tests::vm::{GuestOs, VmLock};
use serde_json::Value;
use std::time::Duration;

#[test]
#[cfg_attr(
    vm_guest_left_out = "debian-12",
    ignore = "LAB_AGENT_VM_GUESTS leaves out debian-12"
)]
fn hello_lab_passes_its_self_test_in_a_vm() {
    on_guest(GuestOs::Debian12, self_test_in_a_vm);
}

fn self_test_in_a_vm(guest: GuestOs) {
    let image = image(guest);
    let mut cmd = on_disk("test", &repo_root().join("examples/hello-lab"), &image);
    cmd.args(["--json", "--agent-from", "disk"]);

    let lock = VmLock::acquire(&format!("vm-selftest-{guest}")).expect("a VM slot");
    let mut tested = Running::spawn(cmd, "test");
    let line = tested.wait_for_line("qemu pid ", Duration::from_secs(120));
    // The agent's disk on the last PCI slot and the vsock device beside
    // it (where the backend is installed, as `tests/install-deps.sh` does).
    assert!(
        line.contains(" and vsock+unix://"),
        "no vsock device: {line}"
    );
    let pid = crate::failing::qemu_pid(&line);
    let console = between(&line, "console `", "`");
    let run_dir = std::path::Path::new(&console).parent().unwrap().to_owned();
    let tested = tested.finish();
    drop(lock);

    assert_eq!(tested.code, Some(0), "labctl test --vm: {tested}");
    assert!(
        tested.stderr.contains("agent from its disk"),
        "the payload is not the disk's: {tested}"
    );
    assert!(
        !crate::failing::process_is_qemu(pid),
        "qemu {pid} still runs"
    );
    assert!(!run_dir.exists(), "{} is left", run_dir.display());

    let report: Value = serde_json::from_str(&tested.stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {tested}"));
    assert_eq!(report["lab"], "hello-lab", "{report:#}");
    assert_eq!(report["ok"], true, "{report:#}");
    let checks = report["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 4, "{report:#}");
    for c in checks {
        let name = c["name"].as_str().unwrap();
        let status = |phase: &str| c[phase]["status"].as_str().unwrap_or("-").to_owned();
        let expected_first = if c["initially"] == "pass" {
            "passed"
        } else {
            "failed"
        };
        assert_eq!(status("after_setup"), expected_first, "`{name}`: {c:#}");
        assert_eq!(status("after_solve"), "passed", "`{name}`: {c:#}");
        assert_eq!(status("reversed"), "passed", "`{name}`: {c:#}");
        assert_eq!(c["problems"], serde_json::json!([]), "`{name}`: {c:#}");
    }
    // At least one check proves something: it failed before the solve.
    assert!(
        checks
            .iter()
            .any(|c| c["after_setup"]["status"] == "failed"),
        "{report:#}"
    );
    eprintln!(
        "labctl test --vm hello-lab on {guest}: exit 0 after {} (timings: {})",
        secs(tested.took),
        report["timings_ms"]
    );
}
