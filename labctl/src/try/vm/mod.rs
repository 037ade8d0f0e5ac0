//! The VM target of `labctl try`: the lab's real payload (what `labctl
//! secret` renders: the static agent, the token, the unit, the lab's files
//! and setup) booted by real cloud-init in a qemu guest from a NoCloud
//! seed, as KubeVirt boots it from the Secret. The agent is reached through
//! a loopback port forward; the guest reaches nothing else.
//!
//! Two kinds of guest ([`Guest`]):
//! - `--vm IMAGE`: a disk image with a bootloader, e.g. a Debian or Ubuntu
//!   cloud image (qcow2 or raw; BIOS boot on amd64, UEFI on arm64;
//!   `tests/vm/build-image.sh` makes `disk.raw`, one laid out the same way,
//!   which the VM tests boot);
//! - `--kernel K --initrd I --rootfs R`: a kernel booted directly with its
//!   root filesystem as `/dev/vda`, as the project's VM tests do
//!   (`tests/vm/build-image.sh` makes one).
//!
//! The guest is amd64 or arm64 (`--arch`, else the `--agent`'s machine):
//! its payload carries the static agent for that machine, and qemu boots
//! the matching board (`virt` on arm64, under TCG on an x86_64 host).
//!
//! Either way the image is only read; the guest writes to a qcow2 overlay.
//! Everything lives in one run dir, removed at the end (the console log
//! stays when something failed; everything stays with `--keep`):
//!
//! ```text
//! /tmp/labctl-try-vm-LAB-XXXXXX/ 0700
//!   token, user-data, secret.yaml   the payload, as `labctl secret` writes it (0600)
//!   overlay.qcow2                   the guest's disk, on the (untouched) image
//!   seed.iso, seed/                 the NoCloud seed (user-data, meta-data)
//!   console.log                     the serial console
//!   qemu-stderr.log, qemu-cmdline.txt, qmp.sock
//!   stop.sh                         with `--keep`: stops the VM, removes this dir
//! ```
//!
//! # Layout
//! - [`args`]: the VM flags and the checked [`VmConfig`].
//! - `target`: the VM as a [`Target`](super::Target): payload, qemu, the
//!   watches on qemu and the console.
//! - `stop`: power-off or kill, what stays of the run dir, `--keep`.

pub mod args;
mod stop;
mod target;

pub use args::{
    BOOT_ALLOWANCE, DEFAULT_BOOT_SILENCE, DEFAULT_CPUS, DEFAULT_MEMORY_MIB, VmArgs, VmConfig,
};

use super::{Config, interruptible_for};
use crate::agent_bin::{self, Linkage};
use crate::exit::{Exit, Failure};
use crate::payload::ArchArg;
use lab_agent_cloudinit::{Arch, lab_payload};
use lab_runner::qemu::Guest;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use stop::Stop;
use target::VmTarget;

/// The agent a VM gets: the static build (as `labctl secret` ships it) for
/// the machine qemu boots ([`guest_arch`]).
pub fn find_static_agent(
    explicit: Option<&Path>,
    arch: Option<ArchArg>,
) -> Result<PathBuf, Failure> {
    let arch = guest_arch(arch, explicit)?;
    let path = agent_bin::find(explicit, Linkage::Static(arch))
        .map_err(|e| Failure::from(lab_runner::Error::from(e)))?;
    if let Some(w) = explicit.map_or_else(|| agent_bin::stale_warning(&path), |_| None) {
        eprintln!("warning: {w}");
    }
    Ok(path)
}

/// The guest's architecture, as `labctl secret` picks the payload's:
/// `--arch`, else the `--agent`'s machine, else amd64.
pub fn guest_arch(arch: Option<ArchArg>, agent: Option<&Path>) -> Result<Arch, Failure> {
    lab_payload::payload_arch(arch.map(Arch::from), agent)
        .map_err(|e| Failure::from(lab_runner::Error::from(e)))
}

/// The machine a kernel image is for, from its boot header: an x86 bzImage
/// (`HdrS` at 0x202) or an arm64 `Image` (`ARM\x64` at 0x38). `None`: not
/// a kernel either header names (e.g. compressed), so nothing to check.
pub fn kernel_arch(kernel: &Path) -> Option<Arch> {
    let mut head = [0u8; 0x206];
    let mut file = std::fs::File::open(kernel).ok()?;
    std::io::Read::read_exact(&mut file, &mut head).ok()?;
    if &head[0x38..0x3c] == b"ARM\x64" {
        Some(Arch::Arm64)
    } else if &head[0x202..0x206] == b"HdrS" {
        Some(Arch::Amd64)
    } else {
        None
    }
}

/// `--kernel` must be for the machine qemu boots: a kernel of the other
/// architecture would only leave the console silent.
fn check_kernel_arch(guest: &Guest, arch: Arch) -> Result<(), Failure> {
    let Guest::Kernel { kernel, .. } = guest else {
        return Ok(());
    };
    match kernel_arch(kernel) {
        Some(found) if found != arch => Err(Failure::usage(format!(
            "`--kernel {}` is an {found} kernel, but the guest is {arch}",
            kernel.display()
        ))
        .hint(format!(
            "add `--arch {found}` (with an {found} `--rootfs`; the agent is then the {found} build)"
        ))),
        _ => Ok(()),
    }
}

/// Boots, waits, grades, reports; stops the VM (or leaves it with `--keep`).
pub fn run(config: &Config, vm: &VmConfig) -> Result<Exit, Failure> {
    let rt = super::common::runtime()?;
    let target = start_interruptibly(&rt, config, vm)?;
    let outcome = rt.block_on(interruptible_for("the VM", async {
        tokio::select! {
            result = super::flow(config, &target) => result,
            failure = target.qemu_exited() => Err(failure),
            failure = target.silent_console(vm.boot_silence) => Err(failure),
        }
    }));
    let result = match outcome {
        Ok(result) => result,
        Err(interrupted) => {
            target.stop(Stop::Interrupted);
            return Err(interrupted);
        }
    };
    if config.keep && target.is_running() {
        target.leave_running(config, &result);
        return result;
    }
    target.stop(match &result {
        Ok(Exit::SetupFailed) => Stop::KeepConsole,
        Err(f) if f.exit == Exit::SetupFailed => Stop::KeepConsole,
        Ok(_) => Stop::Discard,
        Err(_) => Stop::ShowConsole,
    });
    result
}

/// [`VmTarget::start`] on a thread of its own while this one watches for
/// Ctrl-C and SIGTERM: a KVM trial can take seconds, and an interrupted
/// start stops its qemu and removes the run dir (it holds the token) like
/// an interrupted wait does.
fn start_interruptibly(
    rt: &tokio::runtime::Runtime,
    config: &Config,
    vm: &VmConfig,
) -> Result<VmTarget, Failure> {
    let cancel = AtomicBool::new(false);
    let cancelled = || cancel.load(Ordering::Relaxed);
    std::thread::scope(|s| {
        let starting = s.spawn(|| VmTarget::start(config, vm, &cancelled));
        let waited = rt.block_on(interruptible_for("the VM", async {
            while !starting.is_finished() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
        if waited.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        let started = starting
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match waited {
            Ok(()) => started,
            Err(interrupted) => {
                if let Ok(target) = started {
                    target.stop(Stop::Interrupted);
                }
                Err(interrupted)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernels_architecture_comes_from_its_boot_header() {
        let dir = std::env::temp_dir().join(format!("labctl-kernel-arch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, at: usize, magic: &[u8]| {
            let mut bytes = vec![0u8; 0x400];
            bytes[at..at + magic.len()].copy_from_slice(magic);
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let x86 = write("bzImage", 0x202, b"HdrS");
        let arm = write("Image", 0x38, b"ARM\x64");
        let neither = write("gz", 0, b"\x1f\x8b");
        assert_eq!(kernel_arch(&x86), Some(Arch::Amd64));
        assert_eq!(kernel_arch(&arm), Some(Arch::Arm64));
        assert_eq!(kernel_arch(&neither), None);
        assert_eq!(kernel_arch(&dir.join("missing")), None);

        let guest = |kernel: &Path| Guest::Kernel {
            kernel: kernel.to_owned(),
            initrd: "/i".into(),
            rootfs: "/r".into(),
        };
        assert!(check_kernel_arch(&guest(&arm), Arch::Arm64).is_ok());
        assert!(check_kernel_arch(&guest(&neither), Arch::Amd64).is_ok());
        let err = check_kernel_arch(&guest(&arm), Arch::Amd64).unwrap_err();
        assert_eq!(err.exit, Exit::Usage);
        assert!(
            err.message
                .contains("is an arm64 kernel, but the guest is amd64"),
            "{}",
            err.message
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
