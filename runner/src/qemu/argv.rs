//! What to boot and how: the qemu and `qemu-img` command lines, as pure
//! functions of a [`MachineSpec`], the run dir's [`RunPaths`] and a port.

use super::lan::{LanNic, UPLINK_MAC};
use super::{Accel, GUEST_PORT, sanitize};
use lab_agent_cloudinit::Arch;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The kernel command line of a [`Guest::Kernel`]: the serial console (the
/// machine's UART: `ttyS0`, `ttyAMA0` on arm64 `virt`) is the log (and the
/// student's terminal), the root filesystem is the first virtio disk (the
/// overlay).
pub fn kernel_append(arch: Arch) -> String {
    format!("console={} root=/dev/vda rw", arch.serial_console())
}

/// The UEFI firmware every arm64 guest boots through (`qemu-efi-aarch64`),
/// as KubeVirt's arm64 VMs do: `virt` has no BIOS, and cloud images carry
/// an EFI system partition (its removable-media path,
/// `\EFI\BOOT\BOOTAA64.EFI`, is what boots: the guest keeps no EFI
/// variables, the firmware is only read). A kernel booted directly is
/// handed over by the firmware too: then the guest has ACPI, whose power
/// button is how `system_powerdown` reaches it (Debian's cloud kernel has
/// no driver for the device-tree power key of a firmware-less boot).
pub const ARM64_UEFI: &str = "/usr/share/qemu-efi-aarch64/QEMU_EFI.fd";

/// The qemu system emulator for a guest of `arch`.
pub fn program(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "qemu-system-x86_64",
        Arch::Arm64 => "qemu-system-aarch64",
    }
}

/// The machine type: qemu's default `pc` board on x86, `virt` (KubeVirt's
/// arm64 machine) on arm64.
fn board_args(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::Amd64 => &[],
        Arch::Arm64 => &["-machine", "virt"],
    }
}

/// What the machine boots. Either way the base image is only read: the
/// machine writes to a qcow2 overlay on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guest {
    /// A kernel, its initrd and a root filesystem image, booted without a
    /// bootloader (`root=/dev/vda`): the project's test image
    /// (`tests/vm/build-image.sh`), `labctl try --kernel/--initrd/--rootfs`.
    Kernel {
        kernel: PathBuf,
        initrd: PathBuf,
        rootfs: PathBuf,
    },
    /// A whole disk image with a bootloader (a Debian or Ubuntu cloud
    /// image, qcow2 or raw), booted by the BIOS: `labctl try --vm IMAGE`.
    Disk { image: PathBuf },
}

impl Guest {
    /// The image the overlay is made on.
    pub fn base(&self) -> &Path {
        match self {
            Guest::Kernel { rootfs, .. } => rootfs,
            Guest::Disk { image } => image,
        }
    }
}

/// One machine: what it boots and with what.
#[derive(Debug, Clone)]
pub struct MachineSpec {
    /// Names the machine (qemu's `-name`, file names, the guest's hostname).
    pub name: String,
    pub guest: Guest,
    /// The guest's architecture: which qemu, board, console and firmware.
    pub arch: Arch,
    /// The base image's format (`raw`, `qcow2`, …) as `qemu-img` names it;
    /// `None`: ask `qemu-img info`.
    pub base_format: Option<String>,
    pub memory_mib: u32,
    pub cpus: u32,
    /// The guest's disk (the overlay) in GiB; `None`: the base image's size.
    /// Cloud-init grows the root filesystem into it on first boot
    /// (`growpart`, `resizefs`).
    pub disk_gib: Option<u32>,
    pub accel: Accel,
    /// Appended to [`kernel_append`] (a [`Guest::Kernel`] only).
    pub extra_append: String,
    /// Appended to qemu's arguments.
    pub extra_qemu_args: Vec<String>,
    /// A second NIC on a session's private network (a VM of a session).
    pub lan: Option<LanNic>,
    /// Read-only raw disks after the overlay and the seed (`/dev/vdc`, …):
    /// the agent's disk of `--agent-from disk`.
    pub disks: Vec<ExtraDisk>,
    /// Files the NoCloud seed holds beside `user-data` and `meta-data`
    /// (name, content): a session's `network-config` and `vendor-data`.
    pub seed_extra: Vec<(String, Vec<u8>)>,
    /// qemu may outlive this process (`labctl try --keep`): it gets no
    /// parent-death signal. Otherwise it dies with its parent.
    pub detached: bool,
    /// A virtio-vsock device, backed by this `vhost-device-vsock`
    /// ([`super::vsock`]); `None`: none.
    pub vsock: Option<PathBuf>,
}

impl MachineSpec {
    /// amd64, 1 GiB, 2 vCPUs, TCG, attached to its parent.
    pub fn new(name: impl Into<String>, guest: Guest) -> MachineSpec {
        MachineSpec {
            name: name.into(),
            guest,
            arch: Arch::Amd64,
            base_format: None,
            memory_mib: 1024,
            cpus: 2,
            disk_gib: None,
            accel: Accel::Tcg,
            extra_append: String::new(),
            extra_qemu_args: Vec::new(),
            lan: None,
            disks: Vec::new(),
            seed_extra: Vec::new(),
            detached: false,
            vsock: None,
        }
    }
}

/// A read-only raw disk, as KubeVirt attaches a volume: on virtio, with
/// the `serial` its `disks:` entry names (the guest's
/// `/dev/disk/by-id/virtio-SERIAL`), or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraDisk {
    pub path: PathBuf,
    pub serial: Option<String>,
}

/// The files of one machine, all in its run dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPaths {
    pub dir: PathBuf,
    /// The qcow2 overlay the guest writes to.
    pub overlay: PathBuf,
    /// The NoCloud seed (ISO9660 `cidata`), and the folder it is made from.
    pub seed: PathBuf,
    pub seed_dir: PathBuf,
    /// The serial console, as qemu writes it.
    pub console: PathBuf,
    /// qemu's own stderr.
    pub stderr: PathBuf,
    /// The QMP unix socket.
    pub qmp: PathBuf,
    /// The qemu command line, for whoever debugs a boot.
    pub cmdline: PathBuf,
    /// With a vsock device: the backend's vhost-user socket (qemu's end),
    /// the guest's vsock as a hybrid vsock socket (a client's end), and
    /// the backend's log.
    pub vhost_user: PathBuf,
    pub vsock: PathBuf,
    pub vsock_log: PathBuf,
}

impl RunPaths {
    pub fn new(dir: &Path) -> RunPaths {
        RunPaths {
            dir: dir.to_owned(),
            overlay: dir.join("overlay.qcow2"),
            seed: dir.join("seed.iso"),
            seed_dir: dir.join("seed"),
            console: dir.join("console.log"),
            stderr: dir.join("qemu-stderr.log"),
            qmp: dir.join("qmp.sock"),
            cmdline: dir.join("qemu-cmdline.txt"),
            vhost_user: dir.join("vhost-vsock.sock"),
            vsock: dir.join("vsock.sock"),
            vsock_log: dir.join("vhost-device-vsock.log"),
        }
    }
}

/// `qemu-img create` of a qcow2 overlay on `base`, of `size_gib` or (`None`)
/// the base's size. qemu resolves a relative backing path against the
/// overlay's folder, so `base` should be absolute.
pub fn overlay_args(
    base: &Path,
    base_format: &str,
    overlay: &Path,
    size_gib: Option<u32>,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["create", "-q", "-f", "qcow2", "-F", base_format, "-b"]
        .map(OsString::from)
        .to_vec();
    args.push(base.into());
    args.push(overlay.into());
    if let Some(gib) = size_gib {
        args.push(format!("{gib}G").into());
    }
    args
}

/// The whole qemu command line (without the program), forwarding loopback
/// `port` to the guest's agent port.
pub fn qemu_args(spec: &MachineSpec, paths: &RunPaths, port: u16) -> Vec<OsString> {
    let mut a = Args::default();
    a.push(["-name", &sanitize(&spec.name)]);
    a.push(["-nodefaults", "-no-user-config", "-display", "none"]);
    a.push(spec.accel.qemu_args(spec.arch).iter().copied());
    a.push(board_args(spec.arch).iter().copied());
    a.push(["-smp", &spec.cpus.to_string()]);
    a.push(["-m", &spec.memory_mib.to_string()]);
    if spec.arch == Arch::Arm64 {
        a.push(["-bios", ARM64_UEFI]);
    }
    if let Guest::Kernel { kernel, initrd, .. } = &spec.guest {
        let mut append = kernel_append(spec.arch);
        if !spec.extra_append.trim().is_empty() {
            append.push(' ');
            append.push_str(spec.extra_append.trim());
        }
        a.push(["-kernel"]);
        a.0.push(kernel.into());
        a.push(["-initrd"]);
        a.0.push(initrd.into());
        a.push(["-append", &append]);
    }
    // The overlay first: it is /dev/vda, and the disk the firmware boots.
    a.push([
        "-drive",
        &drive_arg(&paths.overlay, "qcow2", "cache=unsafe"),
    ]);
    a.push(["-drive", &drive_arg(&paths.seed, "raw", "readonly=on")]);
    for (i, disk) in spec.disks.iter().enumerate() {
        // -device rather than if=virtio: only a device takes a serial.
        let file = disk.path.display().to_string().replace(',', ",,");
        a.push([
            "-drive",
            &format!("file={file},if=none,id=disk{i},format=raw,readonly=on"),
        ]);
        // The last PCI slots, in order: the kernel names virtio disks in
        // PCI order, and the root disk must stay `/dev/vda` (`root=` of a
        // kernel boot, a disk image's GRUB) and the seed `/dev/vdb`.
        let slot = 0x1f - i;
        let mut device = format!("virtio-blk-pci,drive=disk{i},addr={slot:#x}");
        if let Some(serial) = &disk.serial {
            device.push_str(&format!(",serial={}", serial.replace(',', ",,")));
        }
        a.push(["-device", &device]);
    }
    a.push([
        "-netdev",
        &format!("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:{GUEST_PORT}"),
    ]);
    // romfile= : no iPXE ROM, so the firmware never tries to boot from the network.
    match &spec.lan {
        None => a.push(["-device", "virtio-net-pci,netdev=net0,romfile="]),
        Some(lan) => {
            // The MAC the seed's network-config knows the user NIC by.
            a.push([
                "-device",
                &format!("virtio-net-pci,netdev=net0,mac={UPLINK_MAC},romfile="),
            ]);
            a.push(lan.qemu_args().iter().map(String::as_str));
        }
    }
    a.push(["-device", "virtio-rng-pci"]);
    if spec.vsock.is_some() {
        let vsock = super::vsock::qemu_args(paths, spec.memory_mib);
        a.push(vsock.iter().map(String::as_str));
    }
    a.push(["-serial", &format!("file:{}", paths.console.display())]);
    a.push([
        "-qmp",
        &format!("unix:{},server=on,wait=off", paths.qmp.display()),
    ]);
    a.push(spec.extra_qemu_args.iter().map(String::as_str));
    a.0
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn push<'a>(&mut self, items: impl IntoIterator<Item = &'a str>) {
        self.0.extend(items.into_iter().map(OsString::from));
    }
}

/// A `-drive` value; qemu option values escape a comma by doubling it.
pub fn drive_arg(path: &Path, format: &str, extra: &str) -> String {
    let file = path.display().to_string().replace(',', ",,");
    format!("file={file},if=virtio,format={format},{extra}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// The value after `flag`, for every occurrence.
    fn values<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    }

    fn paths() -> RunPaths {
        RunPaths::new(Path::new("/run/d"))
    }

    #[test]
    fn a_kernel_guest_boots_without_a_bootloader() {
        let mut spec = MachineSpec::new(
            "hello lab",
            Guest::Kernel {
                kernel: "/img/vmlinuz".into(),
                initrd: "/img/initrd.img".into(),
                rootfs: "/img/rootfs.raw".into(),
            },
        );
        spec.extra_append = "quiet".into();
        let args = strings(&qemu_args(&spec, &paths(), 40123));
        assert_eq!(values(&args, "-name"), ["hello-lab"]);
        assert_eq!(values(&args, "-kernel"), ["/img/vmlinuz"]);
        assert_eq!(values(&args, "-initrd"), ["/img/initrd.img"]);
        assert_eq!(
            values(&args, "-append"),
            ["console=ttyS0 root=/dev/vda rw quiet"]
        );
        assert_eq!(
            values(&args, "-drive"),
            [
                "file=/run/d/overlay.qcow2,if=virtio,format=qcow2,cache=unsafe",
                "file=/run/d/seed.iso,if=virtio,format=raw,readonly=on"
            ]
        );
        // The base image itself is never on the command line: only the overlay.
        assert!(!args.iter().any(|a| a.contains("rootfs.raw")), "{args:?}");
        assert_eq!(
            values(&args, "-netdev"),
            ["user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:40123-:8899"]
        );
        assert_eq!(values(&args, "-serial"), ["file:/run/d/console.log"]);
        assert_eq!(
            values(&args, "-qmp"),
            ["unix:/run/d/qmp.sock,server=on,wait=off"]
        );
        assert_eq!(values(&args, "-accel"), ["tcg,thread=multi"]);
        assert_eq!(values(&args, "-cpu"), ["max"]);
        assert!(values(&args, "-machine").is_empty(), "{args:?}");
        assert_eq!(values(&args, "-smp"), ["2"]);
        assert_eq!(values(&args, "-m"), ["1024"]);
        assert_eq!(program(spec.arch), "qemu-system-x86_64");
    }

    #[test]
    fn an_arm64_guest_is_a_virt_machine_on_its_own_console() {
        let mut spec = MachineSpec::new(
            "arm",
            Guest::Kernel {
                kernel: "/img/vmlinuz".into(),
                initrd: "/img/initrd.img".into(),
                rootfs: "/img/rootfs.raw".into(),
            },
        );
        spec.arch = Arch::Arm64;
        let args = strings(&qemu_args(&spec, &paths(), 40123));
        assert_eq!(program(spec.arch), "qemu-system-aarch64");
        assert_eq!(values(&args, "-machine"), ["virt"]);
        assert_eq!(values(&args, "-cpu"), ["max,pauth-impdef=on"]);
        assert_eq!(values(&args, "-accel"), ["tcg,thread=multi"]);
        assert_eq!(
            values(&args, "-append"),
            ["console=ttyAMA0 root=/dev/vda rw"]
        );
        // Booted directly, through the firmware (ACPI, as in KubeVirt).
        assert_eq!(values(&args, "-bios"), [ARM64_UEFI]);
        assert_eq!(
            values(&args, "-device"),
            ["virtio-net-pci,netdev=net0,romfile=", "virtio-rng-pci"]
        );

        // A disk boots from UEFI, as an arm64 cloud image does.
        spec.guest = Guest::Disk {
            image: "/img/debian-13-genericcloud-arm64.qcow2".into(),
        };
        let args = strings(&qemu_args(&spec, &paths(), 40123));
        assert_eq!(values(&args, "-bios"), [ARM64_UEFI]);
        assert!(values(&args, "-append").is_empty(), "{args:?}");
    }

    #[test]
    fn a_sessions_guest_has_a_second_nic_on_the_sessions_group() {
        use crate::qemu::lan::Lan;
        let mut spec = MachineSpec::new(
            "server",
            Guest::Kernel {
                kernel: "/img/vmlinuz".into(),
                initrd: "/img/initrd.img".into(),
                rootfs: "/img/rootfs.raw".into(),
            },
        );
        spec.lan = Some(LanNic {
            lan: Lan {
                group: "239.89.1.2".parse().unwrap(),
                port: 30000,
            },
            mac: LanNic::mac_for(0),
            addr: "10.89.0.2".parse().unwrap(),
            prefix_len: 24,
        });
        let args = strings(&qemu_args(&spec, &paths(), 40123));
        // The user NIC is as for one VM (restricted, the agent forwarded),
        // under the MAC the network-config matches.
        assert_eq!(
            values(&args, "-netdev"),
            [
                "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:40123-:8899",
                "dgram,id=lan0,remote.type=inet,remote.host=239.89.1.2,remote.port=30000,\
                 local.type=inet,local.host=127.0.0.1,local.port=0"
            ]
        );
        assert_eq!(
            values(&args, "-device"),
            [
                "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56,romfile=",
                "virtio-net-pci,netdev=lan0,mac=52:54:00:89:00:00,romfile=",
                "virtio-rng-pci"
            ]
        );
    }

    #[test]
    fn a_disk_guest_boots_its_own_bootloader_from_the_overlay() {
        let mut spec = MachineSpec::new(
            "cloud",
            Guest::Disk {
                image: "/home/me/debian-12-genericcloud-amd64.qcow2".into(),
            },
        );
        spec.accel = Accel::Kvm;
        spec.memory_mib = 2048;
        spec.cpus = 4;
        spec.extra_append = "ignored without -kernel".into();
        spec.extra_qemu_args = vec!["-snapshot".into()];
        let args = strings(&qemu_args(&spec, &paths(), 2222));
        for flag in ["-kernel", "-initrd", "-append"] {
            assert!(values(&args, flag).is_empty(), "{flag} in {args:?}");
        }
        assert!(
            !args.iter().any(|a| a.contains("genericcloud")),
            "the image itself must not be attached: {args:?}"
        );
        assert!(
            values(&args, "-drive")[0].starts_with("file=/run/d/overlay.qcow2,"),
            "{args:?}"
        );
        assert_eq!(values(&args, "-accel"), ["kvm"]);
        assert_eq!(values(&args, "-cpu"), ["host"]);
        assert_eq!(values(&args, "-m"), ["2048"]);
        assert_eq!(values(&args, "-smp"), ["4"]);
        assert_eq!(args.last().map(String::as_str), Some("-snapshot"));
        // The NIC has no boot ROM: the BIOS boots the disk or nothing.
        assert_eq!(
            values(&args, "-device"),
            ["virtio-net-pci,netdev=net0,romfile=", "virtio-rng-pci"]
        );
    }

    #[test]
    fn a_vsock_device_is_vhost_user_on_shared_memory() {
        let mut spec = MachineSpec::new(
            "v",
            Guest::Disk {
                image: "/img/d.raw".into(),
            },
        );
        spec.memory_mib = 1536;
        let plain = strings(&qemu_args(&spec, &paths(), 1));
        assert!(
            !plain
                .iter()
                .any(|a| a.contains("vsock") || a.contains("memfd")),
            "{plain:?}"
        );
        spec.vsock = Some("/opt/vhost-device-vsock".into());
        let args = strings(&qemu_args(&spec, &paths(), 1));
        assert_eq!(
            values(&args, "-object"),
            ["memory-backend-memfd,id=mem0,size=1536M,share=on"]
        );
        assert_eq!(values(&args, "-machine"), ["memory-backend=mem0"]);
        assert_eq!(
            values(&args, "-chardev"),
            ["socket,id=vsock0,path=/run/d/vhost-vsock.sock"]
        );
        assert!(
            values(&args, "-device").contains(&"vhost-user-vsock-pci,chardev=vsock0"),
            "{args:?}"
        );
    }

    #[test]
    fn an_agent_disk_is_read_only_virtio_with_its_serial() {
        let mut spec = MachineSpec::new(
            "d",
            Guest::Disk {
                image: "/i.raw".into(),
            },
        );
        spec.disks = vec![
            ExtraDisk {
                path: "/run/d/lab-agent.img".into(),
                serial: Some("lab-agent".into()),
            },
            ExtraDisk {
                path: "/run/d/a,b.iso".into(),
                serial: None,
            },
        ];
        let args = strings(&qemu_args(&spec, &paths(), 1));
        assert_eq!(
            &values(&args, "-drive")[2..],
            [
                "file=/run/d/lab-agent.img,if=none,id=disk0,format=raw,readonly=on",
                "file=/run/d/a,,b.iso,if=none,id=disk1,format=raw,readonly=on"
            ]
        );
        assert_eq!(
            &values(&args, "-device")[..2],
            [
                "virtio-blk-pci,drive=disk0,addr=0x1f,serial=lab-agent",
                "virtio-blk-pci,drive=disk1,addr=0x1e"
            ]
        );
    }

    #[test]
    fn overlays_name_their_backing_format() {
        let args = strings(&overlay_args(
            Path::new("/img/cloud.qcow2"),
            "qcow2",
            Path::new("/run/d/overlay.qcow2"),
            None,
        ));
        assert_eq!(
            args,
            [
                "create",
                "-q",
                "-f",
                "qcow2",
                "-F",
                "qcow2",
                "-b",
                "/img/cloud.qcow2",
                "/run/d/overlay.qcow2"
            ]
        );
        let grown = strings(&overlay_args(
            Path::new("/img/cloud.qcow2"),
            "qcow2",
            Path::new("/run/d/overlay.qcow2"),
            Some(20),
        ));
        assert_eq!(grown.last().map(String::as_str), Some("20G"));
    }

    #[test]
    fn drive_paths_escape_commas() {
        assert_eq!(
            drive_arg(Path::new("/tmp/a,b.qcow2"), "qcow2", "cache=unsafe"),
            "file=/tmp/a,,b.qcow2,if=virtio,format=qcow2,cache=unsafe"
        );
    }
}
