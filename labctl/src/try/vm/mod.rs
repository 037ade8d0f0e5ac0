//! The VM target of `labctl try`: the lab's real payload (what `labctl
//! secret` renders: the static agent, the token, the unit, the lab's files
//! and setup) booted by real cloud-init in a qemu guest from a NoCloud
//! seed, as KubeVirt boots it from the Secret. The agent is reached through
//! a loopback port forward; the guest reaches nothing else.
//!
//! Two kinds of guest ([`Guest`]):
//! - `--vm IMAGE`: a disk image with a bootloader, e.g. a Debian or Ubuntu
//!   cloud image (qcow2 or raw, BIOS boot; `tests/vm/build-image.sh` makes
//!   `disk.raw`, one laid out the same way, which the VM tests boot);
//! - `--kernel K --initrd I --rootfs R`: a kernel booted directly with its
//!   root filesystem as `/dev/vda`, as the project's VM tests do
//!   (`tests/vm/build-image.sh` makes one).
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
use lab_agent_cloudinit::Arch;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use stop::Stop;
use target::VmTarget;

/// The agent a VM gets: the static build (as `labctl secret` ships it) for
/// the machine qemu boots, an x86_64 one.
pub fn find_static_agent(explicit: Option<&Path>) -> Result<PathBuf, Failure> {
    let path = agent_bin::find(explicit, Linkage::Static(Arch::Amd64))
        .map_err(super::local::agent_bin_failure)?;
    if let Some(w) = explicit.map_or_else(|| agent_bin::stale_warning(&path), |_| None) {
        eprintln!("warning: {w}");
    }
    Ok(path)
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
