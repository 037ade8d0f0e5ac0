//! The guest images: kernel, initrd, a read-only ext4 root filesystem and the
//! same tree as a bootable disk, built per guest by `tests/vm/build-image.sh`
//! into a cache dir outside the repo.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use super::VmError;
use lab_runner::qemu::{self, Arch, Guest, tail_lines};

pub use super::guest::GuestOs;

impl GuestOs {
    /// The guest's machine: which qemu boots it, which agent its payload
    /// carries.
    pub fn arch(self) -> Arch {
        match self {
            GuestOs::Debian12 | GuestOs::Debian13 => Arch::Amd64,
            GuestOs::Debian13Arm64 => Arch::Arm64,
        }
    }

    /// Debian 13, whatever the architecture: the release decides cloud-init
    /// and systemd.
    fn is_trixie(self) -> bool {
        matches!(self, GuestOs::Debian13 | GuestOs::Debian13Arm64)
    }

    /// The unit whose end is the end of cloud-init's network stage
    /// (trixie renamed `cloud-init.service`; with single-process
    /// cloud-init it is a shim that finishes when that stage does).
    pub fn network_stage_unit(self) -> &'static str {
        if self.is_trixie() {
            "cloud-init-network.service"
        } else {
            "cloud-init.service"
        }
    }

    /// Whether cloud-init keeps what it logged as recoverable (≥ 23.4: a
    /// warning makes the boot "degraded done" and fills `status.json`'s
    /// `recoverable_errors`).
    pub fn cloud_init_reports_degraded(self) -> bool {
        self.is_trixie()
    }

    /// Whether the guest's systemd has `DelegateSubgroup=` (≥ 254).
    pub fn has_delegate_subgroup(self) -> bool {
        self.is_trixie()
    }
}

/// Paths of a built guest image. Never written to: each VM boots from its own
/// qcow2 overlay on `rootfs` (or `disk`).
#[derive(Debug, Clone)]
pub struct VmImage {
    pub os: GuestOs,
    /// The image dir (`<cache>/vm/<guest>-<hash of the build script>/`).
    pub dir: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Raw ext4, booted as `root=/dev/vda`.
    pub rootfs: PathBuf,
    /// The same tree as a bootable raw disk (MBR; GRUB for the BIOS, root
    /// in partition 1, on amd64; an EFI system partition with GRUB, root in
    /// partition 2, on arm64), for `labctl try --vm`, as a cloud image is
    /// booted.
    pub disk: PathBuf,
}

/// Checked once per guest and test process; later calls reuse it.
static ENSURED: Mutex<Vec<VmImage>> = Mutex::new(Vec::new());

impl VmImage {
    /// The build script, in the source tree.
    pub fn build_script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("vm/build-image.sh")
    }

    /// Makes sure the host can run the guest and its image exists: runs the
    /// build script (fast when cached; ~2 min cold, ~40 min for arm64; also installs qemu and
    /// friends when missing), or takes `LAB_AGENT_VM_IMAGE_DEBIAN_12` /
    /// `LAB_AGENT_VM_IMAGE_DEBIAN_13` as is.
    ///
    /// Fails loudly, with the reason, when the host cannot build or run it.
    pub fn ensure(os: GuestOs) -> Result<VmImage, VmError> {
        let mut cached = ENSURED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(image) = cached.iter().find(|i| i.os == os) {
            return Ok(image.clone());
        }
        let var = format!(
            "LAB_AGENT_VM_IMAGE_{}",
            os.name().to_uppercase().replace('-', "_")
        );
        let image = match std::env::var_os(&var) {
            Some(dir) => VmImage::from_dir(os, dir)?,
            None => VmImage::from_dir(os, run_build_script(os)?)?,
        };
        check_qemu_runs(os.arch())?;
        cached.push(image.clone());
        Ok(image)
    }

    /// What the core boots: kernel + initrd + root filesystem.
    pub fn guest(&self) -> Guest {
        Guest::Kernel {
            kernel: self.kernel.clone(),
            initrd: self.initrd.clone(),
            rootfs: self.rootfs.clone(),
        }
    }

    /// An image dir as the build script leaves it.
    pub fn from_dir(os: GuestOs, dir: impl Into<PathBuf>) -> Result<VmImage, VmError> {
        let dir = dir.into();
        let image = VmImage {
            os,
            kernel: dir.join("vmlinuz"),
            initrd: dir.join("initrd.img"),
            rootfs: dir.join("rootfs.raw"),
            disk: dir.join("disk.raw"),
            dir,
        };
        for path in [&image.kernel, &image.initrd, &image.rootfs, &image.disk] {
            if !path.is_file() {
                return Err(VmError::HostUnsupported(format!(
                    "the {os} guest image is incomplete: `{}` is missing (rebuild with `{} --guest {os} --rebuild`)",
                    path.display(),
                    Self::build_script().display()
                )));
            }
        }
        Ok(image)
    }
}

fn run_build_script(os: GuestOs) -> Result<PathBuf, VmError> {
    let script = VmImage::build_script();
    let started = Instant::now();
    // Cold, an arm64 guest's maintainer scripts run under user-mode qemu.
    let cold = match os.arch() {
        Arch::Amd64 => "~2 min",
        Arch::Arm64 => "~40 min",
    };
    eprintln!(
        "vm: preparing the {os} guest image with `{} --guest {os}` (cached: instant; cold: {cold})",
        script.display()
    );
    let output = Command::new("bash")
        .arg(&script)
        .args(["--guest", os.name()])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| VmError::io(format!("run `bash {} --guest {os}`", script.display()), e))?;
    let log = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(VmError::ImageBuild {
            status: output.status.to_string(),
            log_tail: tail_lines(&log, 40),
        });
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout.lines().last().unwrap_or("").trim();
    if dir.is_empty() {
        return Err(VmError::ImageBuild {
            status: "it printed no image dir".into(),
            log_tail: tail_lines(&log, 40),
        });
    }
    eprintln!(
        "vm: {os} guest image `{dir}` ready after {:.1?}",
        started.elapsed()
    );
    Ok(PathBuf::from(dir))
}

fn check_qemu_runs(arch: Arch) -> Result<(), VmError> {
    qemu::check_installed(arch)
        .map(drop)
        .map_err(|e| VmError::HostUnsupported(e.to_string()))
}
