//! Booting a lab guest under qemu with a NoCloud seed, as KubeVirt would:
//! the one implementation behind `labctl try --vm` / `--kernel` and the
//! project's VM tests (`lab_agent_tests::vm` is a thin layer over this that
//! adds a machine-wide lock, kept logs and test conveniences).
//!
//! It lives in the runner on purpose: the client *library* speaks `/v1` to a
//! URL and knows nothing of qemu or cloud-init (`tests/tests/crate_boundary.rs`).
//!
//! # Layout
//! - [`argv`]: what to boot ([`Guest`]: kernel + initrd + root filesystem,
//!   or a disk image with a bootloader) and the exact qemu and `qemu-img`
//!   arguments, as pure functions.
//! - [`accel`]: the accelerator: KVM only where it runs the real guest
//!   (a boot-sector probe, then the guest's kernel must print within
//!   seconds), else the same machine under TCG; [`accel::start`] starts a
//!   machine that way, as both `labctl try` and the tests do.
//! - [`seed`]: the NoCloud seed (ISO9660 volume `cidata`).
//! - [`lan`]: a session's private network: a second NIC on each guest,
//!   joined by multicast on loopback; its addresses and names from the seed.
//! - [`machine`]: [`Machine::start`]: overlay, seed, free loopback port,
//!   qemu, QMP; power-off, kill, leave running.
//! - [`console`]: the serial console log: waits, marks, boot milestones.
//! - [`qmp`]: the QEMU Machine Protocol client.
//! - [`spawn`]: qemu never outlives its parent (unless asked to).
//! - [`vsock`]: a virtio-vsock device (`vhost-user-vsock-pci` on
//!   `vhost-device-vsock`), the guest's vsock a socket in the run dir.
//!
//! # Invariants
//! - The base image is never written: every machine boots from its own
//!   qcow2 overlay in its run dir.
//! - The guest reaches nothing but the one forwarded port, on loopback
//!   (`-netdev user,restrict=on,hostfwd=tcp:127.0.0.1:PORT-:8899`), and,
//!   in a session, the session's other guests ([`lan`]); and, with a
//!   vsock device, whoever opens the hybrid vsock socket in its run dir
//!   (mode 0700, as the run dir).
//! - qemu is stopped by its own PID; nothing here kills by name.

pub mod accel;
pub mod argv;
pub mod console;
pub mod lan;
pub mod machine;
pub mod qmp;
pub mod seed;
pub mod spawn;
pub mod vsock;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

pub use accel::{Accel, AccelMode};
pub use argv::{ExtraDisk, Guest, MachineSpec, RunPaths, program};
pub use console::ConsoleMark;
pub use lab_agent_cloudinit::Arch;
pub use machine::{Machine, PowerOff};

/// The guest port the agent listens on; forwarded from a loopback port.
pub const GUEST_PORT: u16 = lab_agent_proto::guest::PORT;

/// Everything that can go wrong with a machine. Each message says what
/// failed and carries enough context (log tails) to see why without
/// rerunning.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    /// A tool this needs is missing or broken (qemu, qemu-img, an ISO maker,
    /// firmware).
    #[error("{0}")]
    Missing(String),
    /// This host cannot run the machine as asked (e.g. KVM for a guest of
    /// another architecture).
    #[error("{0}")]
    Unsupported(String),
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
    /// qemu exited while the caller was waiting for something.
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
}

impl QemuError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        QemuError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Checks that qemu for guests of `arch` runs here; returns its version
/// line.
pub fn check_installed(arch: Arch) -> Result<String, QemuError> {
    let qemu = program(arch);
    let package = match arch {
        Arch::Amd64 => "qemu-system-x86",
        Arch::Arm64 => "qemu-system-arm",
    };
    let out = Command::new(qemu)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            QemuError::Missing(format!(
                "cannot run `{qemu}`: {e} (on Debian 12 install `{package}` from \
                 bookworm-backports; `tests/vm/build-image.sh --host-deps` does it)"
            ))
        })?;
    if !out.status.success() {
        return Err(QemuError::Missing(format!(
            "`{qemu} --version` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// Runs a helper command (`qemu-img`, an ISO maker) to completion; its
/// stderr becomes the error.
pub(crate) fn run(cmd: &mut Command) -> Result<(), QemuError> {
    let what = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| QemuError::io(format!("run {what}"), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(QemuError::io(
            format!("run {what}"),
            std::io::Error::other(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        ))
    }
}

/// The last `n` lines of `text`.
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `name` with everything but `[A-Za-z0-9_-]` replaced by `-`: for file
/// names and qemu's `-name`.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_and_names() {
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("a", 5), "a");
        assert_eq!(sanitize("hello lab/1"), "hello-lab-1");
    }
}
