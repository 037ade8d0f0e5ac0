//! The accelerator's fallback, without needing a KVM that lies:
//! - the core's trial with TCG standing in for KVM: the real kernel proves
//!   itself within the grace; a kernel that never prints fails it after
//!   the grace, and its machine and files are gone;
//! - `labctl try --kernel` with that silent kernel under `--accel auto`:
//!   where `/dev/kvm` passes the probe (as on the project's machines) the
//!   KVM boot of the real machine fails its proof and `labctl` says it
//!   falls back to TCG within the grace; anywhere, the TCG guest then stays
//!   silent and `--boot-silence` ends the run with exit 3 and the console.

use crate::failing::{kept_console, process_is_qemu, qemu_pid};
use crate::support::*;
use lab_agent_tests::local::{TempDir, labctl_bin};
use lab_agent_tests::vm::core::accel::{self, KERNEL_PROOF_GRACE, Trial};
use lab_agent_tests::vm::core::machine::make_run_dir;
use lab_agent_tests::vm::core::{Accel, MachineSpec, seed};
use lab_agent_tests::vm::{GuestOs, VmImage, VmLock};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A "kernel" that qemu loads like Linux (a bzImage header: boot protocol
/// 2.06, loaded high, one setup sector) whose real-mode entry only halts:
/// it never prints a line, under any accelerator.
fn silent_kernel() -> Vec<u8> {
    let mut k = vec![0u8; 2048];
    k[0x1f1] = 1; // setup_sects: the setup is the first 1 + 1 sectors
    k[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
    k[0x200..0x202].copy_from_slice(&[0xeb, 0x66]); // jmp short 0x268, as Linux's
    k[0x202..0x206].copy_from_slice(b"HdrS");
    k[0x206..0x208].copy_from_slice(&0x0206u16.to_le_bytes()); // boot protocol
    k[0x211] = 0x01; // loadflags: LOADED_HIGH
    k[0x22c..0x230].copy_from_slice(&0x37ff_ffffu32.to_le_bytes()); // initrd_addr_max
    k[0x238..0x23c].copy_from_slice(&2048u32.to_le_bytes()); // cmdline_size
    k[0x268..0x26c].copy_from_slice(&[0xfa, 0xf4, 0xeb, 0xfd]); // cli; hlt; jmp back to hlt
    k
}

fn write_silent_kernel(dir: &TempDir) -> PathBuf {
    let path = dir.join("silent-vmlinuz");
    std::fs::write(&path, silent_kernel()).unwrap();
    path
}

/// The test image with `kernel` in place of its own.
fn spec_with(image: &VmImage, name: &str, kernel: &Path) -> MachineSpec {
    let mut spec = MachineSpec::new(
        name,
        lab_agent_tests::vm::core::Guest::Kernel {
            kernel: kernel.to_owned(),
            initrd: image.initrd.clone(),
            rootfs: image.rootfs.clone(),
        },
    );
    spec.base_format = Some("raw".into());
    spec.memory_mib = 512;
    // TCG stands in for KVM: the proof is the same whatever runs the guest.
    spec.accel = Accel::Tcg;
    spec
}

#[test]
fn a_trial_proves_a_printing_kernel_and_fails_a_silent_one() {
    // The accelerator is the host's, not the guest's: one guest's kernel
    // proves the trial.
    let image = image(GuestOs::Debian12);
    let tmp = TempDir::new("accel-trial");
    let silent = write_silent_kernel(&tmp);
    let _lock = VmLock::acquire("accel-trial").expect("the VM lock");
    let meta = seed::meta_data("accel-trial", "accel-trial");
    let never = || false;

    // The real kernel prints within the grace, even under TCG.
    let dir = make_run_dir("lab-agent-vm", "accel-trial-real").unwrap();
    let spec = spec_with(&image, "accel-trial-real", &image.kernel);
    let trial = accel::trial(
        &spec,
        b"#cloud-config\n",
        &meta,
        &dir,
        KERNEL_PROOF_GRACE,
        &never,
    )
    .expect("the trial runs");
    let Trial::Proven { machine, after } = trial else {
        panic!("the real kernel did not prove itself under TCG: {trial:?}");
    };
    assert!(after < KERNEL_PROOF_GRACE, "{after:?}");
    let pid = machine.pid();
    assert!(process_is_qemu(pid), "a proven machine runs on");
    eprintln!("trial: the real kernel printed {after:.1?} after qemu's start (TCG)");
    drop(machine);
    assert!(!process_is_qemu(pid));
    std::fs::remove_dir_all(&dir).unwrap();

    // The silent kernel fails it, after the grace and not before; its
    // machine is stopped and what it wrote is gone, for a fresh start.
    let dir = make_run_dir("lab-agent-vm", "accel-trial-silent").unwrap();
    let spec = spec_with(&image, "accel-trial-silent", &silent);
    let started = Instant::now();
    let trial = accel::trial(
        &spec,
        b"#cloud-config\n",
        &meta,
        &dir,
        KERNEL_PROOF_GRACE,
        &never,
    )
    .expect("the trial runs");
    let took = started.elapsed();
    let Trial::Failed(reason) = trial else {
        panic!("a kernel that never prints proved itself: {trial:?}");
    };
    let expected = format!(
        "the guest's kernel printed nothing within {}s under TCG",
        KERNEL_PROOF_GRACE.as_secs()
    );
    assert!(reason.starts_with(&expected), "{reason}");
    assert!(
        took >= KERNEL_PROOF_GRACE && took < KERNEL_PROOF_GRACE + Duration::from_secs(10),
        "{took:?}"
    );
    for gone in [
        "overlay.qcow2",
        "console.log",
        "qmp.sock",
        "qemu-stderr.log",
    ] {
        assert!(!dir.join(gone).exists(), "{gone} is left after the trial");
    }
    assert!(no_qemu_uses(&dir), "the trial's qemu still runs");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn try_falls_back_from_a_kvm_that_runs_nothing_and_gives_up_on_silence() {
    let image = image(GuestOs::Debian12);
    let tmp = TempDir::new("accel-fallback");
    let silent = write_silent_kernel(&tmp);
    let hello = repo_root().join("examples/hello-lab");
    let lock = VmLock::acquire("accel-fallback").expect("the VM lock");
    let mut cmd = Command::new(labctl_bin());
    cmd.arg("try")
        .arg(&hello)
        .arg("--agent")
        .arg(static_agent())
        .arg("--kernel")
        .arg(&silent)
        .arg("--initrd")
        .arg(&image.initrd)
        .arg("--rootfs")
        .arg(&image.rootfs);
    // The flag wins over the variable: with `tcg` obeyed there would be no
    // trial at all.
    cmd.env("LAB_AGENT_VM_ACCEL", "tcg").args([
        "--accel",
        "auto",
        "--memory",
        "512",
        "--boot-silence",
        "20",
    ]);
    let mut running = Running::spawn(cmd, "try-silent");

    let line = running.wait_for_line("accelerator: ", Duration::from_secs(120));
    let fallback_after = if line.starts_with("accelerator: trying KVM") {
        // This host's KVM passed the probe: the real machine is tried.
        let fallback = running.wait_for_line(
            "; falling back to TCG",
            KERNEL_PROOF_GRACE + Duration::from_secs(30),
        );
        let after = running.started.elapsed();
        let expected = format!(
            "KVM is unusable here: the guest's kernel printed nothing within {}s under KVM",
            KERNEL_PROOF_GRACE.as_secs()
        );
        assert!(fallback.starts_with(&expected), "{fallback}");
        running.wait_for_line(
            "accelerator: TCG (KVM failed, see above)",
            Duration::from_secs(30),
        );
        Some(after)
    } else {
        // No usable KVM at all: the probe decides, at once.
        assert!(
            line.starts_with("accelerator: TCG (KVM is unusable here: "),
            "{line}"
        );
        None
    };
    let done = running.finish();
    drop(lock);
    assert_eq!(done.code, Some(3), "{done}");
    let err = &done.stderr;
    for needle in [
        "the guest printed nothing on its serial console for 20s and its agent never answered",
        "--boot-silence SECS",
        "console (last lines):",
        "stopped the VM",
    ] {
        assert!(err.contains(needle), "{needle:?} not in:\n{err}");
    }
    // Bounded by the silence, not the 15-minute boot allowance: the trial,
    // 20 s of silence, the power-off's grace.
    assert!(done.took < Duration::from_secs(150), "{done}");
    let pid = qemu_pid(err);
    assert!(!process_is_qemu(pid), "qemu {pid} still runs");
    let console = kept_console(err);
    let run_dir = console.parent().unwrap().to_owned();
    assert!(
        no_qemu_uses(&run_dir),
        "a qemu of `{}` runs",
        run_dir.display()
    );
    std::fs::remove_dir_all(&run_dir).unwrap();
    match fallback_after {
        Some(after) => eprintln!(
            "fallback: `KVM is unusable here` {:.1}s after `labctl try` started; exit 3 after {:.1}s",
            after.as_secs_f64(),
            done.took.as_secs_f64()
        ),
        None => eprintln!("no usable KVM here: only the silence bound was tested"),
    }
}

/// Whether no running process names `dir` on its command line.
fn no_qemu_uses(dir: &Path) -> bool {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .all(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| !String::from_utf8_lossy(&c).contains(&needle))
                .unwrap_or(true)
        })
}
