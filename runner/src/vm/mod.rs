//! A lab tried in a VM: the lab's real payload (what `labctl secret`
//! renders: the static agent, the token, the unit, the lab's files and
//! setup) booted by real cloud-init in a qemu guest from a NoCloud seed, as
//! KubeVirt boots it from the Secret. The agent is reached through a
//! loopback port forward; the guest reaches nothing else.
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
//!   lab-agent.img                   with `--agent-from disk`: the agent's disk
//!   seed.iso, seed/                 the NoCloud seed (user-data, meta-data)
//!   console.log                     the serial console
//!   qemu-stderr.log, qemu-cmdline.txt, qmp.sock
//!   stop.sh                         with `--keep`: stops the VM, removes this dir
//! ```
//!
//! # Layout
//! - `config`: the VM flags as given ([`VmRequest`]), checked into a
//!   [`VmConfig`].
//! - this file: the checked machine config ([`VmConfig`]) and the agent
//!   and architecture a guest gets.
//! - `target`: [`VmTarget`], a booting or booted VM: payload, qemu, the
//!   watches on qemu and the console, a client for its agent.
//! - `stop`: power-off or kill, what stays of the run dir ([`Stop`]), or
//!   left running ([`LeftRunning`]).
//! - `session`: [`VmSession`], a lab of several VMs (`[[vms]]`): one guest
//!   per VM, booted as a [`VmTarget`] with its VM's payload, all on one
//!   private network (`qemu/lan.rs`); one run dir holding each VM's.

mod config;
mod session;
mod stop;
mod target;

pub use config::{BOOT_ALLOWANCE, VmRequest};
pub use session::VmSession;
pub use stop::{LeftRunning, Stop};
pub use target::VmTarget;

use crate::Error;
use crate::qemu::{AccelMode, Guest};
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::{Arch, lab_payload};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_MEMORY_MIB: u32 = 2048;
pub const DEFAULT_CPUS: u32 = 2;
/// How long the serial console may stay silent before the agent first
/// answers: then the guest is taken for hung (`--boot-silence`). A boot of
/// the test image under TCG on a busy 2-core host never went quiet for
/// more than ~17 s (the kernel, systemd and each cloud-init stage print as
/// they go; the longest gap is between cloud-init's config and final
/// stages: see tests/vm/README.md); a cloud image doing more
/// on first boot, say key generation and package work, stays quiet for
/// longer. Two minutes is far beyond both, and still ends the wait for a
/// guest that will never boot (a KVM that runs nothing) long before the
/// boot allowance would.
pub const DEFAULT_BOOT_SILENCE: Duration = Duration::from_secs(120);

/// The machine to boot, checked (`labctl try`'s `--vm` / `--kernel …` and
/// the machine flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmConfig {
    /// Absolute paths.
    pub guest: Guest,
    /// `--arch`; resolved against the agent with the payload
    /// ([`guest_arch`]).
    pub arch: Option<Arch>,
    pub memory_mib: u32,
    pub cpus: u32,
    /// `None`: the image's size.
    pub disk_gib: Option<u32>,
    /// `--accel`, else `LAB_AGENT_VM_ACCEL`, else auto.
    pub accel: AccelMode,
    /// Which of the two set it (`None`: neither).
    pub accel_set_by: Option<&'static str>,
    /// `--boot-silence`.
    pub boot_silence: Duration,
    /// `--agent-from disk`: the payload pins the agent, and the guest gets
    /// the agent's disk the way KubeVirt attaches it (`None`: the agent
    /// rides in the payload).
    pub agent_disk: Option<AgentDiskKind>,
}

/// How a VM's agent disk is attached (`--agent-disk`), as KubeVirt attaches
/// each kind of volume ([`lab_agent_cloudinit::agent_disk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AgentDiskKind {
    /// A containerDisk volume whose disk has `serial: lab-agent`: a virtio
    /// disk with that serial, holding `lab-agent.img`.
    #[default]
    ContainerDisk,
    /// A ConfigMap volume with `volumeLabel: LAB-AGENT`: a virtio disk with
    /// no serial holding an ISO 9660 image so labelled, whose files are the
    /// ConfigMap's keys (KubeVirt makes it with `xorrisofs`; here
    /// `lab-agent.img` is that image, without the Rock Ridge and Joliet
    /// names, which spell the same keys).
    ConfigMap,
}

impl AgentDiskKind {
    /// The disk's serial, as the VM's `disks:` entry would give it.
    pub fn serial(self) -> Option<&'static str> {
        match self {
            AgentDiskKind::ContainerDisk => Some(lab_agent_cloudinit::agent_disk::SERIAL),
            AgentDiskKind::ConfigMap => None,
        }
    }
}

/// The agent a VM gets: the static build (as `labctl secret` ships it) for
/// the machine qemu boots ([`guest_arch`]).
pub fn find_static_agent(explicit: Option<&Path>, arch: Option<Arch>) -> Result<PathBuf, Error> {
    let arch = guest_arch(arch, explicit)?;
    let path = agent_bin::find(explicit, Linkage::Static(arch))?;
    if let Some(w) = explicit.map_or_else(|| agent_bin::stale_warning(&path), |_| None) {
        eprintln!("warning: {w}");
    }
    Ok(path)
}

/// The guest's architecture, as `labctl secret` picks the payload's:
/// `--arch`, else the `--agent`'s machine, else amd64.
pub fn guest_arch(arch: Option<Arch>, agent: Option<&Path>) -> Result<Arch, Error> {
    Ok(lab_payload::payload_arch(arch, agent)?)
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
fn check_kernel_arch(guest: &Guest, arch: Arch) -> Result<(), Error> {
    let Guest::Kernel { kernel, .. } = guest else {
        return Ok(());
    };
    match kernel_arch(kernel) {
        Some(found) if found != arch => Err(Error::usage(format!(
            "`--kernel {}` is an {found} kernel, but the guest is {arch}",
            kernel.display()
        ))
        .hint(format!(
            "add `--arch {found}` (with an {found} `--rootfs`; the agent is then the {found} build)"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

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
        assert_eq!(err.kind(), ErrorKind::Usage);
        assert!(
            err.to_string()
                .contains("is an arm64 kernel, but the guest is amd64"),
            "{err}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
