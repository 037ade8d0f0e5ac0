//! `labctl try`'s VM flags ([`VmArgs`]) and what they become once checked
//! (the runner's [`VmConfig`]): the guest's files as absolute paths, its size, the
//! accelerator and the boot-silence limit.

use crate::exit::Failure;
use crate::payload::ArchArg;
use clap::builder::TypedValueParser as _;
use lab_agent_cloudinit::Arch;
use lab_runner::qemu::accel;
use lab_runner::qemu::{AccelMode, Guest};
use lab_runner::vm::{DEFAULT_BOOT_SILENCE, DEFAULT_CPUS, DEFAULT_MEMORY_MIB, VmConfig};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Added to the setup's timeout when `--timeout` is not given: a cloud image
/// under software emulation takes minutes to boot.
pub const BOOT_ALLOWANCE: Duration = Duration::from_secs(15 * 60);
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
}

/// The checked [`VmConfig`]: `None` when no VM was asked for (and then no
/// machine flag may be given either). Reads `LAB_AGENT_VM_ACCEL`.
pub fn config_from_args(args: &VmArgs) -> Result<Option<VmConfig>, Failure> {
    let env = std::env::var_os(accel::ENV).map(|v| v.to_string_lossy().into_owned());
    config_from_args_env(args, env.as_deref())
}

/// [`config_from_args`] with `accel_env` as `LAB_AGENT_VM_ACCEL`.
pub fn config_from_args_env(
    args: &VmArgs,
    accel_env: Option<&str>,
) -> Result<Option<VmConfig>, Failure> {
    let guest = match (&args.vm, &args.kernel, &args.initrd, &args.rootfs) {
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
                ("--arch", args.arch.is_some()),
                ("--memory", args.memory.is_some()),
                ("--cpus", args.cpus.is_some()),
                ("--disk-size", args.disk_size.is_some()),
                ("--accel", args.accel.is_some()),
                ("--boot-silence", args.boot_silence.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
                return Err(Failure::usage(format!(
                    "`{flag}` only applies to a VM: add `--vm IMAGE` or `--kernel …`"
                )));
            }
            return Ok(None);
        }
        // clap enforces the combinations; this is a safety net.
        _ => {
            return Err(Failure::usage(
                "give either `--vm IMAGE` or all of `--kernel`, `--initrd` and `--rootfs`",
            ));
        }
    };
    let memory_mib = args.memory.unwrap_or(DEFAULT_MEMORY_MIB);
    if !(256..=1 << 20).contains(&memory_mib) {
        return Err(Failure::usage(format!(
            "`--memory {memory_mib}` is out of range: give MiB, at least 256"
        )));
    }
    let cpus = args.cpus.unwrap_or(DEFAULT_CPUS);
    if !(1..=64).contains(&cpus) {
        return Err(Failure::usage(format!(
            "`--cpus {cpus}` is out of range (1 to 64)"
        )));
    }
    if let Some(gib) = args.disk_size {
        if !(1..=4096).contains(&gib) {
            return Err(Failure::usage(format!(
                "`--disk-size {gib}` is out of range (1 to 4096 GiB)"
            )));
        }
    }
    let (accel, accel_set_by) =
        AccelMode::resolve(args.accel, accel_env).map_err(Failure::usage)?;
    let boot_silence = match args.boot_silence {
        None => DEFAULT_BOOT_SILENCE,
        Some(0) => {
            return Err(Failure::usage("`--boot-silence` must be at least 1 second"));
        }
        Some(secs) => Duration::from_secs(secs),
    };
    Ok(Some(VmConfig {
        guest,
        arch: args.arch.map(Arch::from),
        memory_mib,
        cpus,
        disk_gib: args.disk_size,
        accel,
        accel_set_by,
        boot_silence,
    }))
}

/// An absolute path to an existing file (qemu resolves an overlay's relative
/// backing path against the overlay's own folder).
fn existing_file(flag: &str, path: &Path) -> Result<PathBuf, Failure> {
    if !path.is_file() {
        return Err(Failure::usage(format!(
            "`{flag} {}` is not a file",
            path.display()
        )));
    }
    fs::canonicalize(path).map_err(|e| {
        Failure::usage(format!("failed to resolve `{flag} {}`", path.display())).with_source(e)
    })
}

/// `--accel`'s values are [`AccelMode`]'s own names, listed in the help and
/// parsed by [`AccelMode`]'s `FromStr`, the same as `LAB_AGENT_VM_ACCEL`.
fn accel_parser() -> impl clap::builder::TypedValueParser<Value = AccelMode> {
    clap::builder::PossibleValuesParser::new(AccelMode::NAMES).try_map(|s| s.parse::<AccelMode>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Exit;
    use crate::{Cli, Command};
    use clap::Parser;
    use lab_runner::qemu::Accel;
    fn parse(args: &[&str]) -> Result<VmArgs, String> {
        let mut argv = vec!["labctl", "try", "LAB"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Try(t),
            }) => Ok(t.vm),
            Ok(_) => unreachable!(),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Three real files in a temp dir of their own.
    fn files(tag: &str) -> (PathBuf, [String; 3]) {
        let dir = std::env::temp_dir().join(format!("labctl-vm-args-{tag}-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let names = ["vmlinuz", "initrd.img", "rootfs.raw"].map(|n| {
            let p = dir.join(n);
            fs::write(&p, n).unwrap();
            p.display().to_string()
        });
        (dir, names)
    }

    #[test]
    fn no_vm_flags_is_local_mode() {
        assert_eq!(config_from_args(&parse(&[]).unwrap()).unwrap(), None);
    }

    #[test]
    fn machine_flags_need_a_vm() {
        let err = config_from_args(&parse(&["--memory", "512"]).unwrap()).unwrap_err();
        assert_eq!(err.exit, Exit::Usage);
        assert!(
            err.message.contains("`--memory` only applies to a VM"),
            "{}",
            err.message
        );
        let err = config_from_args(&parse(&["--arch", "arm64"]).unwrap()).unwrap_err();
        assert!(
            err.message.contains("`--arch` only applies to a VM"),
            "{}",
            err.message
        );
        let err = parse(&["--arch", "riscv64"]).unwrap_err();
        assert!(err.contains("amd64") && err.contains("arm64"), "{err}");
    }

    #[test]
    fn kernel_initrd_and_rootfs_come_together() {
        let err = parse(&["--kernel", "/k"]).unwrap_err();
        assert!(
            err.contains("--initrd") && err.contains("--rootfs"),
            "{err}"
        );
        let err = parse(&["--initrd", "/i"]).unwrap_err();
        assert!(err.contains("--kernel"), "{err}");
        let err = parse(&[
            "--vm", "/img", "--kernel", "/k", "--initrd", "/i", "--rootfs", "/r",
        ])
        .unwrap_err();
        assert!(err.contains("cannot be used with"), "{err}");
    }

    #[test]
    fn a_kernel_guest_gets_absolute_paths_and_defaults() {
        let (dir, [k, i, r]) = files("kernel");
        // Not canonical (qemu-img would resolve a relative backing path
        // against the overlay's folder): it gets resolved.
        let k_dotted = format!(
            "{}/../{}/vmlinuz",
            dir.display(),
            dir.file_name().unwrap().to_str().unwrap()
        );
        let args = parse(&["--kernel", &k_dotted, "--initrd", &i, "--rootfs", &r]).unwrap();
        let config = config_from_args_env(&args, None).unwrap().unwrap();
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
            }
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_disk_image_with_machine_flags() {
        let (dir, [_, _, image]) = files("disk");
        let args = parse(&[
            "--vm",
            &image,
            "--memory",
            "4096",
            "--cpus",
            "4",
            "--disk-size",
            "20",
            "--accel",
            "tcg",
            "--boot-silence",
            "30",
            "--arch",
            "arm64",
        ])
        .unwrap();
        // The flag wins over the variable.
        let config = config_from_args_env(&args, Some("kvm")).unwrap().unwrap();
        assert_eq!(
            config.guest,
            Guest::Disk {
                image: PathBuf::from(&image)
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
        let args = parse(&["--vm", &image, "--memory", "16"]).unwrap();
        let err = config_from_args(&args).unwrap_err();
        assert!(err.message.contains("at least 256"), "{}", err.message);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_accelerator_variable_is_obeyed_and_checked() {
        let (dir, [_, _, image]) = files("accel-env");
        let args = parse(&["--vm", &image]).unwrap();
        let config = config_from_args_env(&args, Some("tcg")).unwrap().unwrap();
        assert_eq!(
            (config.accel, config.accel_set_by),
            (AccelMode::Force(Accel::Tcg), Some("LAB_AGENT_VM_ACCEL"))
        );
        let config = config_from_args_env(&args, Some("auto")).unwrap().unwrap();
        assert_eq!(config.accel, AccelMode::Auto);
        let err = config_from_args_env(&args, Some("hvf")).unwrap_err();
        assert_eq!(err.exit, Exit::Usage);
        assert!(
            err.message
                .starts_with("LAB_AGENT_VM_ACCEL=hvf: unknown accelerator"),
            "{}",
            err.message
        );
        // Without a VM the variable is not read at all.
        assert_eq!(
            config_from_args_env(&parse(&[]).unwrap(), Some("hvf")).unwrap(),
            None
        );
        let err = config_from_args_env(
            &parse(&["--vm", &image, "--boot-silence", "0"]).unwrap(),
            None,
        )
        .unwrap_err();
        assert!(err.message.contains("at least 1 second"), "{}", err.message);
        let err =
            config_from_args_env(&parse(&["--boot-silence", "9"]).unwrap(), None).unwrap_err();
        assert!(
            err.message
                .contains("`--boot-silence` only applies to a VM"),
            "{}",
            err.message
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_image_is_a_usage_error() {
        let args = parse(&["--vm", "/nonexistent/cloud.qcow2"]).unwrap();
        let err = config_from_args(&args).unwrap_err();
        assert_eq!(err.exit, Exit::Usage);
        assert_eq!(err.message, "`--vm /nonexistent/cloud.qcow2` is not a file");
    }
}
