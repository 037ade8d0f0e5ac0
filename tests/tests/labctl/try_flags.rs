//! `labctl try`'s VM flags through the command line: clap's combinations
//! and the runner's checks (`lab_runner::vm::VmRequest`, unit-tested
//! there) as exit 2 with the flag named. The flags are checked before the
//! lab is read or anything starts, so no lab and no root is needed.

use super::*;

/// `labctl try /nonexistent-lab ARGS…` with `LAB_AGENT_VM_ACCEL` set to
/// `accel` (or removed): its stderr, after asserting exit 2.
fn refused(args: &[&str], accel: Option<&str>) -> String {
    let mut cmd = Command::new(labctl_bin());
    cmd.args(["try", "/nonexistent-lab"]).args(args);
    match accel {
        Some(v) => cmd.env("LAB_AGENT_VM_ACCEL", v),
        None => cmd.env_remove("LAB_AGENT_VM_ACCEL"),
    };
    let out = cmd
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    stderr(&out)
}

#[test]
fn kernel_initrd_and_rootfs_come_together() {
    let err = refused(&["--kernel", "/k"], None);
    assert!(
        err.contains("--initrd") && err.contains("--rootfs"),
        "{err}"
    );
    let err = refused(&["--initrd", "/i"], None);
    assert!(err.contains("--kernel"), "{err}");
    let all = [
        "--vm", "/img", "--kernel", "/k", "--initrd", "/i", "--rootfs", "/r",
    ];
    let err = refused(&all, None);
    assert!(err.contains("cannot be used with"), "{err}");
    let err = refused(&["--arch", "riscv64"], None);
    assert!(err.contains("amd64") && err.contains("arm64"), "{err}");
}

#[test]
fn machine_flags_need_a_vm_and_a_vm_needs_its_files() {
    for (flag, value) in [
        ("--memory", "512"),
        ("--arch", "arm64"),
        ("--boot-silence", "9"),
    ] {
        let err = refused(&[flag, value], Some("hvf"));
        assert_eq!(
            err,
            format!("error: `{flag}` only applies to a VM: add `--vm IMAGE` or `--kernel …`\n")
        );
    }
    let err = refused(&["--vm", "/nonexistent/cloud.qcow2"], None);
    assert_eq!(
        err,
        "error: `--vm /nonexistent/cloud.qcow2` is not a file\n"
    );
}

/// `LAB_AGENT_VM_ACCEL` is read for a VM, and a bad value is named.
#[test]
fn the_accelerator_variable_is_checked() {
    let dir = TempDir::new("labctl-try-flags");
    let image = dir.write("disk.raw", "not a disk", 0o644);
    let image = image.to_str().unwrap();
    let err = refused(&["--vm", image], Some("hvf"));
    assert!(
        err.starts_with("error: LAB_AGENT_VM_ACCEL=hvf: unknown accelerator"),
        "{err}"
    );
    let err = refused(&["--vm", image, "--boot-silence", "0"], None);
    assert!(err.contains("at least 1 second"), "{err}");
}
