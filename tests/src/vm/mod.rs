//! A real Debian 12 guest with real cloud-init, booted under qemu, for the
//! end-to-end tests.
//!
//! # Layout
//! - [`image`]: [`VmImage::ensure`] runs `tests/vm/build-image.sh`, which
//!   installs the host packages and builds (or finds cached) kernel, initrd and
//!   root filesystem.
//! - [`accel`]: KVM only where a real probe boots, else TCG.
//! - [`machine`]: [`Vm::boot`] — one qemu per test, on a throw-away qcow2
//!   overlay, with a NoCloud seed, a loopback port forward to the guest's
//!   8899, a serial console log and a QMP socket. Dropping it kills qemu.
//! - [`console`]: waiting for text on the serial console.
//! - [`qmp`]: the QEMU Machine Protocol client (power-down, queries).
//! - [`http`]: a minimal HTTP probe (slirp accepts TCP long before the guest
//!   listens, so only an HTTP answer means "up").
//! - [`lock`]: one VM at a time on the machine, across test binaries.
//! - [`spawn`]: qemu is started from a thread that lives as long as the test
//!   process, so it dies with the process even if `Drop` never runs.
//!
//! # Environment
//! - `LAB_AGENT_CACHE`: cache root (default `$XDG_CACHE_HOME/lab-agent` or
//!   `~/.cache/lab-agent`); images live in `vm/<hash of the build script>/`.
//! - `LAB_AGENT_VM_IMAGE=DIR`: use this image dir, skip the build script.
//! - `LAB_AGENT_VM_ACCEL=tcg|kvm`: force the accelerator (default: probe).
//! - `LAB_AGENT_VM_KEEP_LOGS=1`: keep console logs of passing tests too.

pub mod accel;
pub mod console;
pub mod http;
pub mod image;
pub mod lock;
pub mod machine;
pub mod qmp;
pub mod spawn;

use std::path::PathBuf;
use std::time::Duration;

pub use accel::Accel;
pub use image::VmImage;
pub use machine::{BootOptions, PowerOff, Vm};

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
    /// qemu did not come up (bad arguments, port taken, …).
    #[error("failed to start qemu: {message}; its stderr:\n{stderr}")]
    QemuStart { message: String, stderr: String },
    /// qemu exited while the test was waiting for something.
    #[error(
        "qemu exited ({status}) while waiting for {waiting_for}; stderr:\n{stderr}\nconsole log `{}`, last lines:\n{console_tail}",
        console_log.display()
    )]
    QemuExited {
        status: String,
        waiting_for: String,
        stderr: String,
        console_log: PathBuf,
        console_tail: String,
    },
    /// The text never appeared on the serial console.
    #[error(
        "{needle:?} did not appear on the serial console within {waited:?}; console log `{}`, last lines:\n{console_tail}",
        console_log.display()
    )]
    ConsoleTimeout {
        needle: String,
        waited: Duration,
        console_log: PathBuf,
        console_tail: String,
    },
    /// The guest kernel panicked.
    #[error("the guest kernel panicked; console log `{}`, last lines:\n{console_tail}", console_log.display())]
    KernelPanic {
        console_log: PathBuf,
        console_tail: String,
    },
    /// A QMP exchange failed or qemu answered with an error.
    #[error("QMP `{command}` failed: {message}")]
    Qmp { command: String, message: String },
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

/// The last `n` lines of `text`.
pub(crate) fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
