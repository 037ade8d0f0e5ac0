//! Accelerator choice: KVM only where it really works, else TCG.
//!
//! `/dev/kvm` existing proves little: on some hosts (a VM itself, with a
//! PVM device) qemu either aborts at once ("failed to set MSR 0x10a") or
//! crawls and dies ("KVM internal error … emulation failure"). So KVM is
//! *tried*: a machine whose BIOS boots a 512-byte boot sector that tells
//! qemu to exit through the `isa-debug-exit` device must exit with that
//! status within a hard timeout. It needs no guest image, so it serves a
//! bootloader image (`--vm`) as well as a kernel.

use super::{QEMU, spawn};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the KVM probe may take: the BIOS and the boot sector need well
/// under a second with a working KVM (and about as long under TCG), so a
/// crawling KVM is caught too.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The `isa-debug-exit` port the boot sector writes to, and the value; qemu
/// then exits with `(value << 1) | 1`.
const EXIT_PORT: u8 = 0xf4;
const EXIT_VALUE: u8 = 0x31;
const EXIT_STATUS: i32 = ((EXIT_VALUE as i32) << 1) | 1;

/// The accelerator qemu runs the guest with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    /// Software emulation, multi-threaded. `-cpu max` gives the guest every
    /// feature TCG emulates (x86-64-v2 and up, which some distributions
    /// require); it costs nothing measurable here.
    Tcg,
}

impl Accel {
    /// The qemu arguments for this accelerator.
    pub fn qemu_args(self) -> &'static [&'static str] {
        match self {
            Accel::Kvm => &["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg => &["-accel", "tcg,thread=multi", "-cpu", "max"],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// `forced` if given; else KVM when [`probe_kvm`] passes, else TCG.
    /// Returns the choice and why, for the user. `work_dir` holds the
    /// probe's scratch files (removed afterwards).
    pub fn choose(forced: Option<Accel>, work_dir: &Path) -> (Accel, String) {
        if let Some(accel) = forced {
            return (accel, "as asked".to_owned());
        }
        match probe_kvm(work_dir) {
            Ok(took) => (Accel::Kvm, format!("a KVM probe boot took {took:.1?}")),
            Err(why) => (Accel::Tcg, format!("KVM is unusable here: {why}")),
        }
    }
}

impl std::str::FromStr for Accel {
    type Err = String;
    fn from_str(s: &str) -> Result<Accel, String> {
        match s {
            "kvm" => Ok(Accel::Kvm),
            "tcg" => Ok(Accel::Tcg),
            other => Err(format!("unknown accelerator {other:?}: use `kvm` or `tcg`")),
        }
    }
}

/// A BIOS boot sector: `mov al, EXIT_VALUE; out EXIT_PORT, al`, then halt
/// forever (should the exit device be missing), padded, with the `55 AA`
/// signature.
pub fn probe_boot_sector() -> [u8; 512] {
    let mut s = [0u8; 512];
    #[rustfmt::skip]
    let code = [
        0xb0, EXIT_VALUE, // mov al, EXIT_VALUE
        0xe6, EXIT_PORT, // out EXIT_PORT, al
        0xfa, // cli
        0xf4, // hlt
        0xeb, 0xfd, // jmp back to hlt
    ];
    s[..code.len()].copy_from_slice(&code);
    s[510] = 0x55;
    s[511] = 0xaa;
    s
}

/// The probe's qemu arguments (without the program).
pub fn probe_args(accel: Accel, disk: &Path) -> Vec<String> {
    let mut args: Vec<String> = accel.qemu_args().iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "-m",
            "64",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x04",
            "-drive",
        ]
        .map(str::to_owned),
    );
    args.push(super::argv::drive_arg(disk, "raw", "readonly=on"));
    args
}

/// Boots [`probe_boot_sector`] under KVM; `Ok(time taken)` when qemu exits
/// with the boot sector's status within [`PROBE_TIMEOUT`], else why not.
pub fn probe_kvm(work_dir: &Path) -> Result<Duration, String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map_err(|e| format!("cannot open /dev/kvm: {e}"))?;
    probe(Accel::Kvm, work_dir)
}

/// The probe under `accel` (TCG passes it too: the tests check the probe
/// itself that way).
pub fn probe(accel: Accel, work_dir: &Path) -> Result<Duration, String> {
    let dir = work_dir.join(format!(
        "accel-probe-{}-{}",
        accel.as_str(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let result = probe_in(accel, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn probe_in(accel: Accel, dir: &Path) -> Result<Duration, String> {
    let disk = dir.join("boot.img");
    // SeaBIOS cannot read a one-sector disk: pad it (sparse) to 1 MiB.
    std::fs::write(&disk, probe_boot_sector())
        .and_then(|()| std::fs::File::options().write(true).open(&disk))
        .and_then(|f| f.set_len(1 << 20))
        .map_err(|e| format!("cannot write `{}`: {e}", disk.display()))?;
    let stderr = dir.join("stderr.log");
    let mut cmd = Command::new(QEMU);
    cmd.args(probe_args(accel, &disk))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(&stderr)
                .map_err(|e| format!("cannot create `{}`: {e}", stderr.display()))?,
        );
    let started = Instant::now();
    let mut child = spawn::spawn(cmd, false).map_err(|e| format!("cannot start {QEMU}: {e}"))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < PROBE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "a probe boot did not finish within {PROBE_TIMEOUT:?}"
                ));
            }
        }
    };
    if status.code() == Some(EXIT_STATUS) {
        return Ok(started.elapsed());
    }
    // qemu's first complaint says why ("failed to set MSR 0x10a …"); what
    // follows is usually an assertion about the same.
    let err = std::fs::read_to_string(&stderr).unwrap_or_default();
    let first = err.lines().map(str::trim).find(|l| !l.is_empty());
    Err(match first {
        Some(line) => format!("a probe boot ended with {status}: {line}"),
        None => format!("a probe boot ended with {status}, not exit status {EXIT_STATUS}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_sector_is_bootable_and_exits() {
        let s = probe_boot_sector();
        assert_eq!(&s[510..], &[0x55, 0xaa]);
        assert_eq!(&s[..4], &[0xb0, 0x31, 0xe6, 0xf4]);
        assert_eq!(EXIT_STATUS, 99);
    }

    #[test]
    fn accelerators_parse_and_name_their_arguments() {
        assert_eq!("kvm".parse::<Accel>(), Ok(Accel::Kvm));
        assert_eq!("tcg".parse::<Accel>(), Ok(Accel::Tcg));
        assert!(
            "hvf"
                .parse::<Accel>()
                .unwrap_err()
                .contains("`kvm` or `tcg`")
        );
        assert_eq!(Accel::Kvm.qemu_args(), ["-accel", "kvm", "-cpu", "host"]);
        let args = probe_args(Accel::Tcg, Path::new("/d/boot.img"));
        assert!(
            args.windows(2)
                .any(|w| w == ["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        );
        assert!(args.contains(&"-no-reboot".to_owned()));
    }

    #[test]
    fn forcing_skips_the_probe() {
        let (accel, why) = Accel::choose(Some(Accel::Tcg), Path::new("/nonexistent"));
        assert_eq!((accel, why.as_str()), (Accel::Tcg, "as asked"));
    }
}
