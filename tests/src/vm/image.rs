//! The guest image: kernel, initrd and a read-only ext4 root filesystem, built
//! by `tests/vm/build-image.sh` into a cache dir outside the repo.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use super::VmError;
use labctl::qemu::{self, Guest, tail_lines};

/// Paths of a built guest image. Never written to: each VM boots from its own
/// qcow2 overlay on `rootfs`.
#[derive(Debug, Clone)]
pub struct VmImage {
    /// The image dir (`<cache>/vm/<hash of the build script>/`).
    pub dir: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Raw ext4, booted as `root=/dev/vda`.
    pub rootfs: PathBuf,
}

/// Checked once per test process; later calls reuse it.
static ENSURED: Mutex<Option<VmImage>> = Mutex::new(None);

impl VmImage {
    /// The build script, in the source tree.
    pub fn build_script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("vm/build-image.sh")
    }

    /// Makes sure the host can run the guest and the image exists: runs the
    /// build script (fast when cached; ~1–2 min cold, also installs qemu and
    /// friends when missing), or takes `LAB_AGENT_VM_IMAGE` as is.
    ///
    /// Fails loudly, with the reason, when the host cannot build or run it.
    pub fn ensure() -> Result<VmImage, VmError> {
        let mut cached = ENSURED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(image) = cached.as_ref() {
            return Ok(image.clone());
        }
        let image = match std::env::var_os("LAB_AGENT_VM_IMAGE") {
            Some(dir) => VmImage::from_dir(dir)?,
            None => VmImage::from_dir(run_build_script()?)?,
        };
        check_qemu_runs()?;
        *cached = Some(image.clone());
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
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<VmImage, VmError> {
        let dir = dir.into();
        let image = VmImage {
            kernel: dir.join("vmlinuz"),
            initrd: dir.join("initrd.img"),
            rootfs: dir.join("rootfs.raw"),
            dir,
        };
        for path in [&image.kernel, &image.initrd, &image.rootfs] {
            if !path.is_file() {
                return Err(VmError::HostUnsupported(format!(
                    "the guest image is incomplete: `{}` is missing (rebuild with `{} --rebuild`)",
                    path.display(),
                    Self::build_script().display()
                )));
            }
        }
        Ok(image)
    }
}

fn run_build_script() -> Result<PathBuf, VmError> {
    let script = VmImage::build_script();
    let started = Instant::now();
    eprintln!(
        "vm: preparing the guest image with `{}` (cached: instant; cold: ~1-2 min)",
        script.display()
    );
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| VmError::io(format!("run `bash {}`", script.display()), e))?;
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
        "vm: guest image `{dir}` ready after {:.1?}",
        started.elapsed()
    );
    Ok(PathBuf::from(dir))
}

fn check_qemu_runs() -> Result<(), VmError> {
    qemu::check_installed()
        .map(drop)
        .map_err(|e| VmError::HostUnsupported(e.to_string()))
}
