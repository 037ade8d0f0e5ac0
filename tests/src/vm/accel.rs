//! Accelerator choice: KVM only where it really works, else TCG.
//!
//! `/dev/kvm` existing proves little: on these machines it is a PVM device
//! (the host is itself a VM) and qemu either aborts at once ("failed to set
//! MSR 0x10a") or crawls and dies. So KVM is *tried*: a kernel-only boot that
//! must reach its expected panic (no root disk) within a hard timeout.

use std::fs::OpenOptions;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::VmImage;
use super::machine::QEMU;

/// How long the KVM probe may take. A working KVM reaches the panic in well
/// under a second; TCG needs ~4 s, so a crawling KVM is caught too.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The accelerator qemu runs the guest with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    /// Software emulation, multi-threaded (both cores).
    Tcg,
}

static SELECTED: OnceLock<Accel> = OnceLock::new();

impl Accel {
    /// The qemu arguments for this accelerator.
    pub fn qemu_args(self) -> &'static [&'static str] {
        match self {
            Accel::Kvm => &["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg => &["-accel", "tcg,thread=multi"],
        }
    }

    /// `LAB_AGENT_VM_ACCEL=tcg|kvm` if set, else KVM when the probe boots,
    /// else TCG. Decided once per process; the decision and its reason go to
    /// stderr.
    pub fn select(image: &VmImage) -> Accel {
        *SELECTED.get_or_init(|| {
            let (accel, why) = match std::env::var("LAB_AGENT_VM_ACCEL").as_deref() {
                Ok("tcg") => (Accel::Tcg, "forced by LAB_AGENT_VM_ACCEL".to_string()),
                Ok("kvm") => (Accel::Kvm, "forced by LAB_AGENT_VM_ACCEL".to_string()),
                _ => match probe_kvm(image) {
                    Ok(took) => (Accel::Kvm, format!("probe boot took {took:.1?}")),
                    Err(why) => (Accel::Tcg, format!("KVM unusable: {why}")),
                },
            };
            eprintln!("vm: accelerator {accel:?} ({why})");
            accel
        })
    }
}

/// Boots the guest kernel alone under KVM; it must panic for want of a root
/// disk (and qemu exit, `-no-reboot`) within [`PROBE_TIMEOUT`].
fn probe_kvm(image: &VmImage) -> Result<Duration, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map_err(|e| format!("cannot open /dev/kvm: {e}"))?;

    let dir = std::env::temp_dir().join(format!("lab-agent-kvm-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let console = dir.join("console.log");
    let stderr = dir.join("stderr.log");
    let result = (|| {
        let mut cmd = Command::new(QEMU);
        cmd.args(Accel::Kvm.qemu_args())
            .args([
                "-m",
                "256",
                "-nodefaults",
                "-no-user-config",
                "-display",
                "none",
            ])
            .args(["-no-reboot", "-serial"])
            .arg(format!("file:{}", console.display()))
            .arg("-kernel")
            .arg(&image.kernel)
            .args(["-append", "console=ttyS0 panic=-1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(&stderr)
                    .map_err(|e| format!("cannot create `{}`: {e}", stderr.display()))?,
            );
        let started = Instant::now();
        let mut child =
            super::spawn::spawn(cmd).map_err(|e| format!("cannot start {QEMU}: {e}"))?;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() < PROBE_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Ok(None) | Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "a kernel-only probe boot did not finish within {PROBE_TIMEOUT:?}"
                    ));
                }
            }
        };
        let took = started.elapsed();
        let text = std::fs::read_to_string(&console).unwrap_or_default();
        if text.contains("Kernel panic") {
            Ok(took)
        } else {
            let err = std::fs::read_to_string(&stderr).unwrap_or_default();
            Err(format!(
                "the probe boot ended ({status}) without reaching the kernel: {}",
                super::tail_lines(err.trim(), 3)
            ))
        }
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
