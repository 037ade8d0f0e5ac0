//! `labctl try`'s VM flags ([`VmArgs`]), checked by the runner
//! ([`VmRequest::config`]) into what a VM boots ([`VmConfig`]).

use crate::exit::Failure;
use crate::payload::{AgentFromArg, ArchArg};
use clap::builder::TypedValueParser as _;
use lab_agent_cloudinit::{AgentFrom, Arch};
use lab_runner::qemu::AccelMode;
use lab_runner::vm::{AgentDiskKind, VmConfig, VmRequest};
use std::path::PathBuf;

#[derive(Debug, Default, Clone, clap::Args)]
#[command(next_help_heading = "Try in a VM (qemu, as in production)")]
pub struct VmArgs {
    /// Boot this disk image under qemu and try the lab inside, with the payload
    /// `labctl secret` renders on a NoCloud seed: an image with a bootloader,
    /// e.g. a Debian or Ubuntu cloud image (qcow2 or raw). It is never written
    #[arg(long, value_name = "IMAGE", conflicts_with = "kernel")]
    pub vm: Option<PathBuf>,
    /// Like `--vm`, but boot this kernel directly (with `--initrd` and
    /// `--rootfs`, no bootloader), as the project's VM tests do
    #[arg(long, value_name = "FILE", requires_all = ["initrd", "rootfs"])]
    pub kernel: Option<PathBuf>,
    /// The initrd for `--kernel`
    #[arg(long, value_name = "FILE", requires = "kernel")]
    pub initrd: Option<PathBuf>,
    /// The root filesystem image for `--kernel` (the guest's `/dev/vda`)
    #[arg(long, value_name = "FILE", requires = "kernel")]
    pub rootfs: Option<PathBuf>,
    /// The guest's architecture: which qemu boots it (arm64: the `virt`
    /// machine through UEFI, under TCG on an x86_64 host) and
    /// which static agent its payload carries [default: the `--agent`'s
    /// machine, else amd64]
    #[arg(long, value_name = "ARCH", value_enum)]
    pub arch: Option<ArchArg>,
    /// Guest memory in MiB [default: 2048]
    #[arg(long, value_name = "MIB")]
    pub memory: Option<u32>,
    /// Guest vCPUs [default: 2]
    #[arg(long, value_name = "N")]
    pub cpus: Option<u32>,
    /// Grow the guest's disk (its overlay) to this many GiB; cloud-init grows
    /// the root filesystem into it [default: the image's size]
    #[arg(long, value_name = "GIB")]
    pub disk_size: Option<u32>,
    /// The accelerator: `auto` uses KVM only when the guest's kernel prints
    /// on the console within seconds under it (on some hosts `/dev/kvm`
    /// exists but runs no guest), else boots it again under TCG; `kvm` and
    /// `tcg` force one [default: $LAB_AGENT_VM_ACCEL, else auto]
    #[arg(long, value_name = "ACCEL", value_parser = accel_parser())]
    pub accel: Option<AccelMode>,
    /// Give up when the guest's serial console stays silent this many
    /// seconds before its agent first answers (a guest that never boots)
    /// [default: 120]
    #[arg(long, value_name = "SECS")]
    pub boot_silence: Option<u64>,
    /// `disk`: the payload pins the agent's SHA-256 and the guest gets the
    /// agent's disk beside it, as a lab VM whose Secret is rendered with
    /// `labctl secret --agent-from disk` [default: embedded]
    #[arg(long, value_name = "FROM", value_enum)]
    pub agent_from: Option<AgentFromArg>,
    /// How the agent's disk is attached, as KubeVirt attaches each volume:
    /// `containerdisk` (a virtio disk with serial `lab-agent`) or
    /// `configmap` (a disk labelled `LAB-AGENT`, no serial) [default:
    /// containerdisk]
    #[arg(long, value_name = "KIND", value_enum)]
    pub agent_disk: Option<AgentDiskArg>,
}

/// `--agent-disk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentDiskArg {
    Containerdisk,
    Configmap,
}

/// The checked [`VmConfig`]: `None` when no VM was asked for (and then no
/// machine flag may be given either). Reads `LAB_AGENT_VM_ACCEL`.
pub fn config_from_args(args: &VmArgs) -> Result<Option<VmConfig>, Failure> {
    Ok(VmRequest::from(args).config_from_env()?)
}

impl From<&VmArgs> for VmRequest {
    fn from(args: &VmArgs) -> VmRequest {
        VmRequest {
            image: args.vm.clone(),
            kernel: args.kernel.clone(),
            initrd: args.initrd.clone(),
            rootfs: args.rootfs.clone(),
            arch: args.arch.map(Arch::from),
            memory_mib: args.memory,
            cpus: args.cpus,
            disk_gib: args.disk_size,
            accel: args.accel,
            boot_silence_secs: args.boot_silence,
            agent_from: args.agent_from.map(AgentFrom::from),
            agent_disk: args.agent_disk.map(|kind| match kind {
                AgentDiskArg::Containerdisk => AgentDiskKind::ContainerDisk,
                AgentDiskArg::Configmap => AgentDiskKind::ConfigMap,
            }),
        }
    }
}

/// `--accel`'s values are [`AccelMode`]'s own names, listed in the help and
/// parsed by [`AccelMode`]'s `FromStr`, the same as `LAB_AGENT_VM_ACCEL`.
fn accel_parser() -> impl clap::builder::TypedValueParser<Value = AccelMode> {
    clap::builder::PossibleValuesParser::new(AccelMode::NAMES).try_map(|s| s.parse::<AccelMode>())
}
