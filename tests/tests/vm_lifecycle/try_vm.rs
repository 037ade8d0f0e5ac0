//! `labctl try` in a VM (`--kernel … --keep` on hello-lab is in
//! `boot_cost`):
//! - `--vm IMAGE` on a disk image whose "bootloader" is a boot sector that
//!   prints a line (no cloud image can be downloaded here): the BIOS boots
//!   the overlay, the image is untouched, a VM that never answers times
//!   out with its console shown and kept, and qemu is stopped;
//! - a boot sector printing a kernel's RCU stall before the system starts: the
//!   machine is reset once, then the silence ends the wait;
//! - argument errors, before anything starts.

use crate::failing::{kept_console, process_is_qemu, qemu_pid};
use crate::support::*;
use lab_agent_tests::local::{TempDir, describe, labctl};
use lab_agent_tests::vm::{GuestOs, VmLock};
use std::process::Command;

/// A disk image that "boots" only a boot sector printing a line on the
/// serial port and halting: enough to show that `--vm IMAGE` boots the
/// image's own bootloader from an overlay, and what `try` does with a VM
/// whose agent never answers.
#[test]
fn try_vm_image_boots_its_bootloader_and_a_silent_vm_times_out() {
    // Not booted, but it installs qemu, or fails saying why it cannot.
    image(GuestOs::Debian12);
    let dir = TempDir::new("vm-disk-image");
    let image = boot_sector_image(&dir, "LABCTL-DISK-BOOTED");
    let before = std::fs::read(&image).unwrap();
    static_agent();

    let out = try_image("vm-disk-image", &image, &["--timeout", "10"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    for needle in [
        "accelerator: TCG (as asked)",
        "was not ready after",
        "console (last lines):",
        "LABCTL-DISK-BOOTED",
        "stopped the VM",
    ] {
        assert!(err.contains(needle), "{needle:?} not in:\n{err}");
    }
    let pid = qemu_pid(&err);
    assert!(!process_is_qemu(pid), "qemu {pid} still runs");
    let console = kept_console(&err);
    assert!(
        std::fs::read_to_string(&console)
            .unwrap()
            .contains("LABCTL-DISK-BOOTED"),
        "the BIOS booted the image's boot sector"
    );
    std::fs::remove_dir_all(console.parent().unwrap()).unwrap();
    assert_eq!(
        std::fs::read(&image).unwrap(),
        before,
        "the image was written"
    );
}

/// `labctl try examples/hello-lab --vm IMAGE` under TCG in 256 MiB, with
/// `args`, holding a VM slot as `who` while it runs.
fn try_image(who: &str, image: &std::path::Path, args: &[&str]) -> std::process::Output {
    let lock = VmLock::acquire(who).expect("the VM lock");
    let hello = repo_root().join("examples/hello-lab");
    let agent = static_agent();
    let mut argv = vec![
        "try",
        hello.to_str().unwrap(),
        "--agent",
        agent.to_str().unwrap(),
        "--vm",
        image.to_str().unwrap(),
        "--accel",
        "tcg",
        "--memory",
        "256",
    ];
    argv.extend(args);
    let out = labctl(&argv);
    drop(lock);
    out
}

/// A 1 MiB qcow2 disk (what cloud images come as: the overlay must name
/// that format) whose only code is a boot sector printing `msg`.
fn boot_sector_image(dir: &TempDir, msg: &str) -> std::path::PathBuf {
    let raw = dir.join("disk.raw");
    std::fs::write(&raw, printing_boot_sector(msg)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&raw)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let image = dir.join("disk.qcow2");
    let out = Command::new("qemu-img")
        .args(["convert", "-q", "-O", "qcow2"])
        .arg(&raw)
        .arg(&image)
        .output()
        .expect("qemu-img");
    assert!(out.status.success(), "{}", describe(&out));
    image
}

/// A guest whose kernel stalls before its system starts (here a boot sector that
/// prints what a Debian 12 kernel printed when it hung under TCG in CI:
/// its banner, then an RCU stall report) is reset once, saying why, and
/// boots again; the second stall is left to the other watches (here the
/// silence). Every boot's lines stay in the one console log.
#[test]
fn a_kernel_that_stalls_before_the_system_starts_is_reset_once() {
    image(GuestOs::Debian12);
    let dir = TempDir::new("vm-stalled-kernel");
    let image = boot_sector_image(
        &dir,
        "[    0.000000] Linux version 6.1.0-stall (LABCTL-STALL)\r\n\
         [   21.120431] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
    );
    let out = try_image(
        "vm-stalled-kernel",
        &image,
        &["--boot-silence", "3", "--timeout", "120"],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let resets: Vec<&str> = err.lines().filter(|l| l.contains("reset the VM")).collect();
    assert_eq!(
        resets,
        [
            "the guest's kernel stalled before its system started ([   21.120431] rcu: INFO: \
          rcu_preempt detected stalls on CPUs/tasks:): reset the VM, once"
        ],
        "{err}"
    );
    assert!(
        err.contains("printed nothing on its serial console for 3s"),
        "{err}"
    );
    let pid = qemu_pid(&err);
    assert!(!process_is_qemu(pid), "qemu {pid} still runs");
    let console = kept_console(&err);
    let text = std::fs::read_to_string(&console).unwrap();
    assert_eq!(text.matches("LABCTL-STALL").count(), 2, "{text}");
    std::fs::remove_dir_all(console.parent().unwrap()).unwrap();
}

#[test]
fn vm_arguments_are_checked_before_anything_starts() {
    let hello = repo_root().join("examples/hello-lab");
    let hello = hello.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["--vm", "/nonexistent/cloud.qcow2"],
            "`--vm /nonexistent/cloud.qcow2` is not a file",
        ),
        (vec!["--kernel", "/k"], "--initrd"),
        (vec!["--rootfs", "/r"], "--kernel"),
        (vec!["--memory", "512"], "`--memory` only applies to a VM"),
        (vec!["--accel", "kvm"], "`--accel` only applies to a VM"),
        (vec!["--vm", "/a", "--kernel", "/k"], "cannot be used with"),
    ] {
        let mut argv = vec!["try", hello];
        argv.extend(&args);
        let out = labctl(&argv);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            describe(&out)
        );
    }
}

/// A BIOS boot sector: `xor ax,ax; mov ds,ax; mov si,msg; mov dx,0x3f8;
/// next: lodsb; test al,al; jz done; out dx,al; jmp next; done: cli; hlt;
/// jmp $-1`, then `msg` (CR LF NUL), padded, signed `55 AA`.
fn printing_boot_sector(msg: &str) -> Vec<u8> {
    #[rustfmt::skip]
    let mut s = vec![
        0x31, 0xc0, 0x8e, 0xd8, // xor ax,ax; mov ds,ax
        0xbe, 0x16, 0x7c,       // mov si, 0x7c16 (msg)
        0xba, 0xf8, 0x03,       // mov dx, 0x3f8 (COM1)
        0xac,                   // next: lodsb
        0x84, 0xc0, 0x74, 0x03, // test al,al; jz done
        0xee, 0xeb, 0xf8,       // out dx,al; jmp next
        0xfa, 0xf4, 0xeb, 0xfd, // done: cli; hlt; jmp back to hlt
    ];
    assert_eq!(s.len(), 0x16);
    s.extend_from_slice(msg.as_bytes());
    s.extend_from_slice(b"\r\n\0");
    s.resize(510, 0);
    s.extend_from_slice(&[0x55, 0xaa]);
    s
}
