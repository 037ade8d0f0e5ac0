//! Real Debian 12 and Debian 13 guests (and Debian 13 for arm64, outside
//! CI) with real cloud-init, booted under
//! qemu, for the end-to-end tests.
//!
//! The machine itself (overlay, NoCloud seed, qemu arguments, accelerator
//! probe, free port, console log, QMP power-off) is `labctl try --vm`'s:
//! [`lab_runner::qemu`]. This layer adds what tests need on top.
//!
//! # Layout
//! - [`guest`]: [`GuestOs`] (the guests: Debian 12, Debian 13, Debian 13
//!   for arm64) and which of them `LAB_AGENT_VM_GUESTS` selects (`build.rs`
//!   reads the same file).
//! - [`image`]: [`VmImage::ensure`], which runs `tests/vm/build-image.sh --guest NAME`:
//!   it installs the host packages and builds (or finds cached) kernel,
//!   initrd, root filesystem and a bootable disk.
//! - [`machine`]: [`Vm::boot`] — one qemu per test on the shared cores, in
//!   a machine-wide VM slot; its console log is kept when the test fails.
//! - [`http`]: a minimal HTTP probe (slirp accepts TCP long before the guest
//!   listens, so only an HTTP answer means "up").
//! - [`manifest`]: a VM as `labctl render` describes it (the
//!   `VirtualMachine` and its Secret) mapped onto [`BootOptions`], every
//!   field mapped or an error (tests/vm/README.md, "From the manifest to
//!   qemu").
//! - [`lock`]: how many VMs run at once on the machine (two slots on two
//!   cores), across test binaries; a side-by-side measurement takes all.
//! - [`accel_mode`]: how the accelerator is chosen; the core's
//!   `accel::start` then proves KVM on each boot's real guest and falls
//!   back to TCG (once KVM fails, the rest of the process uses TCG).
//!
//! # Environment
//! - `LAB_AGENT_CACHE`: cache root (default `$XDG_CACHE_HOME/lab-agent` or
//!   `~/.cache/lab-agent`); images live in `vm/<hash of the build script>/`.
//! - `LAB_AGENT_VM_IMAGE_DEBIAN_12=DIR`, `LAB_AGENT_VM_IMAGE_DEBIAN_13=DIR`,
//!   `LAB_AGENT_VM_IMAGE_DEBIAN_13_ARM64=DIR`: use this image dir for that
//!   guest, skip the build script.
//! - `LAB_AGENT_VM_GUESTS=debian-12,debian-13,debian-13-arm64`: the guests
//!   whose scenarios run (default: the two amd64 ones; a test for a guest
//!   left out is ignored: `build.rs` reruns when the variable changes).
//! - `LAB_AGENT_VM_SLOTS=N`: VMs at once (default 2 on ≥ 2 cores).
//! - `LAB_AGENT_VM_CPUS=N`: each guest's vCPUs (default 1; the runaway
//!   scenario asks for 2).
//! - `LAB_AGENT_VM_ACCEL=auto|kvm|tcg`: the accelerator (default `auto`: KVM
//!   if the guest's kernel prints under it within seconds, else TCG); the
//!   same switch `labctl try` obeys, read by the same code.
//! - `LAB_AGENT_VM_KEEP_LOGS=1`: keep console logs of passing tests too.

pub mod guest;
pub mod http;
pub mod image;
pub mod lock;
pub mod machine;
pub mod manifest;

use std::sync::OnceLock;
use std::time::Duration;

use lab_runner::qemu::AccelMode;

pub use image::{GuestOs, VmImage};
pub use lab_runner::qemu::{self as core, Accel, Arch, ConsoleMark, PowerOff, QemuError};
pub use lock::VmLock;
pub use machine::{BootOptions, Vm, guest_cpus};

/// Everything that can go wrong with a test VM. Each message says what failed
/// and carries enough context (log tails) to see why without rerunning.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// The host cannot build or run the guest at all (no qemu, not root, …).
    #[error("this host cannot run the test VM: {0}")]
    HostUnsupported(String),
    /// `tests/vm/build-image.sh` failed.
    #[error("failed to build the guest image ({status}); last lines of its log:\n{log_tail}")]
    ImageBuild { status: String, log_tail: String },
    /// A local file or process operation failed.
    #[error("failed to {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The machine failed (qemu would not start, exited, a console wait
    /// timed out, the kernel panicked, QMP).
    #[error(transparent)]
    Qemu(#[from] QemuError),
    /// No HTTP answer on the forwarded port in time.
    #[error("no HTTP answer on {url} within {waited:?} (last attempt: {last_error})")]
    HttpTimeout {
        url: String,
        waited: Duration,
        last_error: String,
    },
}

impl VmError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        VmError::Io {
            what: what.into(),
            source,
        }
    }
}

/// `LAB_AGENT_VM_ACCEL` (`auto`, `kvm` or `tcg`; unset: `auto`), read once
/// per process by the core's own parser, the one `labctl` uses. A bad value
/// panics, naming it.
pub fn accel_mode() -> AccelMode {
    static MODE: OnceLock<AccelMode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let (mode, set_by) = AccelMode::from_env().unwrap_or_else(|e| panic!("{e}"));
        if let Some(var) = set_by {
            eprintln!("vm: accelerator {mode:?} (set by {var})");
        }
        mode
    })
}
