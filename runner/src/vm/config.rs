//! The machine a front end asks for ([`VmRequest`]: `labctl try`'s `--vm`
//! / `--kernel …` and machine flags, as given) checked into the
//! [`VmConfig`] a VM boots: the guest's files as absolute paths, its size,
//! the accelerator and the boot-silence limit. The errors name the flags,
//! as the one front end spells them.

use super::{AgentDiskKind, DEFAULT_BOOT_SILENCE, DEFAULT_CPUS, DEFAULT_MEMORY_MIB, VmConfig};
use crate::Error;
use crate::qemu::{AccelMode, Guest, accel};
use lab_agent_cloudinit::{AgentFrom, Arch};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Added to the setup's timeout when `--timeout` is not given: a cloud image
/// under software emulation takes minutes to boot.
pub const BOOT_ALLOWANCE: Duration = Duration::from_secs(15 * 60);

/// The VM flags as given, before any check; all `None`: no VM.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VmRequest {
    /// `--vm IMAGE`: a disk image with a bootloader.
    pub image: Option<PathBuf>,
    /// `--kernel`, `--initrd`, `--rootfs`: a kernel booted directly.
    pub kernel: Option<PathBuf>,
    pub initrd: Option<PathBuf>,
    pub rootfs: Option<PathBuf>,
    pub arch: Option<Arch>,
    pub memory_mib: Option<u32>,
    pub cpus: Option<u32>,
    pub disk_gib: Option<u32>,
    pub accel: Option<AccelMode>,
    pub boot_silence_secs: Option<u64>,
    /// `--agent-from disk` (with `--agent-disk`, how it is attached).
    pub agent_from: Option<AgentFrom>,
    pub agent_disk: Option<AgentDiskKind>,
}

impl VmRequest {
    /// [`VmRequest::config`] with this process's `LAB_AGENT_VM_ACCEL`.
    pub fn config_from_env(&self) -> Result<Option<VmConfig>, Error> {
        let env = std::env::var_os(accel::ENV).map(|v| v.to_string_lossy().into_owned());
        self.config(env.as_deref())
    }

    /// The checked [`VmConfig`]: `None` when no VM was asked for (and then
    /// no machine flag may be given either); `accel_env` is the value of
    /// `LAB_AGENT_VM_ACCEL` (read only for a VM). Errors are
    /// [`ErrorKind::Usage`](crate::ErrorKind::Usage).
    pub fn config(&self, accel_env: Option<&str>) -> Result<Option<VmConfig>, Error> {
        let guest = match (&self.image, &self.kernel, &self.initrd, &self.rootfs) {
            (Some(image), None, None, None) => Guest::Disk {
                image: existing_file("--vm", image)?,
            },
            (None, Some(kernel), Some(initrd), Some(rootfs)) => Guest::Kernel {
                kernel: existing_file("--kernel", kernel)?,
                initrd: existing_file("--initrd", initrd)?,
                rootfs: existing_file("--rootfs", rootfs)?,
            },
            (None, None, None, None) => {
                let given = [
                    ("--arch", self.arch.is_some()),
                    ("--memory", self.memory_mib.is_some()),
                    ("--cpus", self.cpus.is_some()),
                    ("--disk-size", self.disk_gib.is_some()),
                    ("--accel", self.accel.is_some()),
                    ("--boot-silence", self.boot_silence_secs.is_some()),
                    ("--agent-from", self.agent_from.is_some()),
                    ("--agent-disk", self.agent_disk.is_some()),
                ];
                if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
                    return Err(Error::usage(format!(
                        "`{flag}` only applies to a VM: add `--vm IMAGE` or `--kernel …`"
                    )));
                }
                return Ok(None);
            }
            // The front end's parser enforces the combinations; a safety net.
            _ => {
                return Err(Error::usage(
                    "give either `--vm IMAGE` or all of `--kernel`, `--initrd` and `--rootfs`",
                ));
            }
        };
        let memory_mib = self.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB);
        if !(256..=1 << 20).contains(&memory_mib) {
            return Err(Error::usage(format!(
                "`--memory {memory_mib}` is out of range: give MiB, at least 256"
            )));
        }
        let cpus = self.cpus.unwrap_or(DEFAULT_CPUS);
        if !(1..=64).contains(&cpus) {
            return Err(Error::usage(format!(
                "`--cpus {cpus}` is out of range (1 to 64)"
            )));
        }
        if let Some(gib) = self.disk_gib {
            if !(1..=4096).contains(&gib) {
                return Err(Error::usage(format!(
                    "`--disk-size {gib}` is out of range (1 to 4096 GiB)"
                )));
            }
        }
        let (accel, accel_set_by) =
            AccelMode::resolve(self.accel, accel_env).map_err(Error::usage)?;
        let boot_silence = match self.boot_silence_secs {
            None => DEFAULT_BOOT_SILENCE,
            Some(0) => return Err(Error::usage("`--boot-silence` must be at least 1 second")),
            Some(secs) => Duration::from_secs(secs),
        };
        let agent_disk = match (self.agent_from, self.agent_disk) {
            (Some(AgentFrom::Disk), kind) => Some(kind.unwrap_or_default()),
            (_, Some(_)) => {
                return Err(Error::usage(
                    "`--agent-disk` says how the agent's disk is attached: add `--agent-from disk`",
                ));
            }
            (_, None) => None,
        };
        Ok(Some(VmConfig {
            guest,
            arch: self.arch,
            memory_mib,
            cpus,
            disk_gib: self.disk_gib,
            accel,
            accel_set_by,
            boot_silence,
            agent_disk,
        }))
    }
}

/// An absolute path to an existing file (qemu resolves an overlay's relative
/// backing path against the overlay's own folder).
fn existing_file(flag: &str, path: &Path) -> Result<PathBuf, Error> {
    if !path.is_file() {
        return Err(Error::usage(format!(
            "`{flag} {}` is not a file",
            path.display()
        )));
    }
    std::fs::canonicalize(path).map_err(|e| {
        Error::usage(format!("failed to resolve `{flag} {}`", path.display())).with_source(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use crate::qemu::Accel;
    use std::fs;

    /// Three real files in a temp dir of their own.
    fn files(tag: &str) -> (PathBuf, [PathBuf; 3]) {
        let dir =
            std::env::temp_dir().join(format!("runner-vm-config-{tag}-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let names = ["vmlinuz", "initrd.img", "rootfs.raw"].map(|n| {
            let p = dir.join(n);
            fs::write(&p, n).unwrap();
            p
        });
        (dir, names)
    }

    fn disk(image: &Path) -> VmRequest {
        VmRequest {
            image: Some(image.to_owned()),
            ..VmRequest::default()
        }
    }

    #[test]
    fn no_vm_flags_is_local_mode() {
        assert_eq!(VmRequest::default().config_from_env().unwrap(), None);
    }

    #[test]
    fn machine_flags_need_a_vm() {
        let memory = VmRequest {
            memory_mib: Some(512),
            ..VmRequest::default()
        };
        let err = memory.config(None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Usage);
        assert!(
            err.to_string().contains("`--memory` only applies to a VM"),
            "{err}"
        );
        let arch = VmRequest {
            arch: Some(Arch::Arm64),
            ..VmRequest::default()
        };
        let err = arch.config(None).unwrap_err();
        assert!(
            err.to_string().contains("`--arch` only applies to a VM"),
            "{err}"
        );
    }

    #[test]
    fn a_kernel_guest_gets_absolute_paths_and_defaults() {
        let (dir, [k, i, r]) = files("kernel");
        // Not canonical (qemu-img would resolve a relative backing path
        // against the overlay's folder): it gets resolved.
        let k_dotted = dir
            .join("..")
            .join(dir.file_name().unwrap())
            .join("vmlinuz");
        let request = VmRequest {
            kernel: Some(k_dotted),
            initrd: Some(i.clone()),
            rootfs: Some(r.clone()),
            ..VmRequest::default()
        };
        let config = request.config(None).unwrap().unwrap();
        assert_eq!(
            config,
            VmConfig {
                guest: Guest::Kernel {
                    kernel: fs::canonicalize(&k).unwrap(),
                    initrd: fs::canonicalize(&i).unwrap(),
                    rootfs: fs::canonicalize(&r).unwrap(),
                },
                arch: None,
                memory_mib: DEFAULT_MEMORY_MIB,
                cpus: DEFAULT_CPUS,
                disk_gib: None,
                accel: AccelMode::Auto,
                accel_set_by: None,
                boot_silence: DEFAULT_BOOT_SILENCE,
                agent_disk: None,
            }
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_disk_image_with_machine_flags() {
        let (dir, [_, _, image]) = files("disk");
        let request = VmRequest {
            memory_mib: Some(4096),
            cpus: Some(4),
            disk_gib: Some(20),
            accel: Some(AccelMode::Force(Accel::Tcg)),
            boot_silence_secs: Some(30),
            arch: Some(Arch::Arm64),
            ..disk(&image)
        };
        // The flag wins over the variable.
        let config = request.config(Some("kvm")).unwrap().unwrap();
        assert_eq!(
            config.guest,
            Guest::Disk {
                image: image.clone()
            }
        );
        assert_eq!(config.arch, Some(Arch::Arm64));
        assert_eq!(
            (
                config.memory_mib,
                config.cpus,
                config.disk_gib,
                config.accel,
                config.accel_set_by,
                config.boot_silence,
            ),
            (
                4096,
                4,
                Some(20),
                AccelMode::Force(Accel::Tcg),
                Some("--accel"),
                Duration::from_secs(30)
            )
        );
        let small = VmRequest {
            memory_mib: Some(16),
            ..disk(&image)
        };
        let err = small.config(None).unwrap_err();
        assert!(err.to_string().contains("at least 256"), "{err}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_accelerator_variable_is_obeyed_and_checked() {
        let (dir, [_, _, image]) = files("accel-env");
        let request = disk(&image);
        let config = request.config(Some("tcg")).unwrap().unwrap();
        assert_eq!(
            (config.accel, config.accel_set_by),
            (AccelMode::Force(Accel::Tcg), Some("LAB_AGENT_VM_ACCEL"))
        );
        let config = request.config(Some("auto")).unwrap().unwrap();
        assert_eq!(config.accel, AccelMode::Auto);
        let err = request.config(Some("hvf")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Usage);
        assert!(
            err.to_string()
                .starts_with("LAB_AGENT_VM_ACCEL=hvf: unknown accelerator"),
            "{err}"
        );
        // Without a VM the variable is not read at all.
        assert_eq!(VmRequest::default().config(Some("hvf")).unwrap(), None);
        let silent = |secs, request: VmRequest| VmRequest {
            boot_silence_secs: Some(secs),
            ..request
        };
        let err = silent(0, disk(&image)).config(None).unwrap_err();
        assert!(err.to_string().contains("at least 1 second"), "{err}");
        let err = silent(9, VmRequest::default()).config(None).unwrap_err();
        assert!(
            err.to_string()
                .contains("`--boot-silence` only applies to a VM"),
            "{err}"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_image_is_a_usage_error() {
        let err = disk(Path::new("/nonexistent/cloud.qcow2"))
            .config(None)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Usage);
        assert_eq!(
            err.to_string(),
            "`--vm /nonexistent/cloud.qcow2` is not a file"
        );
    }
}
