//! Accelerator choice: KVM only where it really runs the guest, else TCG.
//!
//! `/dev/kvm` existing proves little: on some hosts (a VM itself, with a
//! PVM device) qemu aborts at once ("failed to set MSR 0x10a"), or crawls
//! and dies ("KVM internal error … emulation failure"), or — the worst —
//! runs the BIOS and the kernel's real-mode setup and then nothing at all:
//! the serial console stops after `Probing EDD … ok` and a Linux guest
//! never boots, while TCG boots it in seconds. So, with [`AccelMode::Auto`],
//! [`start`] proves KVM in two steps:
//!
//! 1. **The probe** ([`probe_kvm`], once per process): a machine whose BIOS
//!    boots a 512-byte boot sector that tells qemu to exit through the
//!    `isa-debug-exit` device must exit with that status within
//!    [`PROBE_TIMEOUT`]. It costs ~0.2 s and catches the hosts where KVM
//!    aborts or crawls, before any guest is started.
//! 2. **The real guest** ([`trial`]): the machine itself starts under KVM,
//!    and its Linux kernel must print on the serial console
//!    ([`console::kernel_started`]: its banner or a printk line, not the
//!    firmware's or a bootloader's lines, which a lying KVM still prints)
//!    within [`proof_grace`] of qemu's start.
//!
//! When either fails, [`start`] says so in one line (`KVM is unusable here:
//! …; falling back to TCG`), stops that qemu and starts the same machine
//! afresh (new overlay and console) under TCG; a KVM found unusable stays
//! so for the rest of the process. [`AccelMode::Force`] skips both steps:
//! the guest runs under what was asked, proven or not (a guest whose kernel
//! does not print on `ttyS0` cannot prove anything; forcing KVM is the way
//! to run it under KVM). What keeps a silent guest from being waited on
//! forever is the caller's: `labctl try` gives up when the console stays
//! silent (`--boot-silence`).
//!
//! KVM runs only guests of the host's own architecture, and the probe is
//! x86 code: an arm64 guest on this x86_64 host (or any guest on a host
//! that is not x86_64) runs under TCG, and forcing KVM for it is an error.
//!
//! [`AccelMode`] is one switch for every path: `labctl try --accel`, else
//! the [`ENV`] variable (`LAB_AGENT_VM_ACCEL=auto|kvm|tcg`), which the VM
//! tests and CI set, else `auto`.

use super::argv::{Guest, MachineSpec, RunPaths, program};
use super::machine::Machine;
use super::{QemuError, console, spawn};
use lab_agent_cloudinit::Arch;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long the KVM probe may take: the BIOS and the boot sector need well
/// under a second with a working KVM (and about as long under TCG), so a
/// crawling KVM is caught too.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a kernel booted directly (`-kernel`) gets to print its first
/// line under KVM, from qemu's start. With a working KVM the banner is on
/// the console in well under a second (qemu loads kernel and initrd itself);
/// even TCG needs only ~2 s here for the same kernel (1.8 s measured on an
/// idle 2-core host). 15 s leaves room for a host busy compiling (KVM
/// slows down far less than TCG under load) while a lying KVM costs at
/// most 15 s before the fallback, not the 15 minutes of a boot timeout.
pub const KERNEL_PROOF_GRACE: Duration = Duration::from_secs(15);

/// The same for a disk image: the BIOS reads a bootloader, which may show
/// a menu for a few seconds (cloud images: 0–5 s) and then loads kernel and
/// initrd through BIOS disk calls, slower than qemu's own loader.
pub const DISK_PROOF_GRACE: Duration = Duration::from_secs(30);

/// The environment variable every path reads the accelerator from
/// (`auto`, `kvm` or `tcg`), unless `labctl try --accel` says otherwise.
pub const ENV: &str = "LAB_AGENT_VM_ACCEL";

/// The `isa-debug-exit` port the boot sector writes to, and the value; qemu
/// then exits with `(value << 1) | 1`.
const EXIT_PORT: u8 = 0xf4;
const EXIT_VALUE: u8 = 0x31;
const EXIT_STATUS: i32 = ((EXIT_VALUE as i32) << 1) | 1;

/// How often a trial looks at the console.
const POLL: Duration = Duration::from_millis(50);

/// The accelerator qemu runs the guest with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    /// Software emulation, multi-threaded. `-cpu max` gives the guest every
    /// feature TCG emulates (x86-64-v2 and up, which some distributions
    /// require); it costs nothing measurable here. On arm64, with the
    /// implementation-defined pointer-authentication algorithm, which qemu
    /// emulates several times faster than the architected QARMA one (the
    /// guest sees the same instructions).
    Tcg,
}

impl Accel {
    /// The qemu arguments for this accelerator and a guest of `arch`.
    pub fn qemu_args(self, arch: Arch) -> &'static [&'static str] {
        match (self, arch) {
            (Accel::Kvm, _) => &["-accel", "kvm", "-cpu", "host"],
            (Accel::Tcg, Arch::Amd64) => &["-accel", "tcg,thread=multi", "-cpu", "max"],
            (Accel::Tcg, Arch::Arm64) => {
                &["-accel", "tcg,thread=multi", "-cpu", "max,pauth-impdef=on"]
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
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

/// How the accelerator is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccelMode {
    /// KVM if it proves itself (probe, then the real guest), else TCG.
    #[default]
    Auto,
    /// This one, unproven.
    Force(Accel),
}

impl AccelMode {
    /// What [`AccelMode`]'s `FromStr` accepts, as a help text lists them.
    pub const NAMES: [&'static str; 3] = ["auto", "kvm", "tcg"];
}

impl std::str::FromStr for AccelMode {
    type Err = String;
    fn from_str(s: &str) -> Result<AccelMode, String> {
        match s {
            "auto" => Ok(AccelMode::Auto),
            "kvm" => Ok(AccelMode::Force(Accel::Kvm)),
            "tcg" => Ok(AccelMode::Force(Accel::Tcg)),
            other => Err(format!(
                "unknown accelerator {other:?}: use `auto`, `kvm` or `tcg`"
            )),
        }
    }
}

impl AccelMode {
    /// `flag` if given, else the value of [`ENV`] (`env`, unless empty),
    /// else [`AccelMode::Auto`]. Returns the mode and who set it (`None`:
    /// nobody); a bad value of the variable is an error naming it.
    pub fn resolve(
        flag: Option<AccelMode>,
        env: Option<&str>,
    ) -> Result<(AccelMode, Option<&'static str>), String> {
        if let Some(mode) = flag {
            return Ok((mode, Some("--accel")));
        }
        match env.map(str::trim) {
            None | Some("") => Ok((AccelMode::Auto, None)),
            Some(v) => v
                .parse()
                .map(|mode| (mode, Some(ENV)))
                .map_err(|e| format!("{ENV}={v}: {e}")),
        }
    }

    /// [`AccelMode::resolve`] with no flag, from this process's environment.
    pub fn from_env() -> Result<(AccelMode, Option<&'static str>), String> {
        let env = std::env::var_os(ENV).map(|v| v.to_string_lossy().into_owned());
        AccelMode::resolve(None, env.as_deref())
    }
}

/// How long [`trial`] waits for the kernel's first line: see
/// [`KERNEL_PROOF_GRACE`], [`DISK_PROOF_GRACE`].
pub fn proof_grace(guest: &Guest) -> Duration {
    match guest {
        Guest::Kernel { .. } => KERNEL_PROOF_GRACE,
        Guest::Disk { .. } => DISK_PROOF_GRACE,
    }
}

/// What [`start`] reports back while it works.
pub struct Hooks<'a> {
    /// A line for the user, as it happens (the fallback line among them).
    pub say: &'a dyn Fn(&str),
    /// Polled while a trial waits: `true` ends the wait at once (Ctrl-C);
    /// [`start`] then returns the unproven machine for the caller to stop.
    pub cancelled: &'a dyn Fn() -> bool,
}

impl std::fmt::Debug for Hooks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks").finish_non_exhaustive()
    }
}

impl Hooks<'_> {
    /// Lines go to stderr; nothing cancels.
    pub fn stderr() -> Hooks<'static> {
        Hooks {
            say: &|line| eprintln!("{line}"),
            cancelled: &|| false,
        }
    }
}

/// A machine [`start`]ed, and why it runs under its accelerator
/// ([`Machine::accel`]).
#[derive(Debug)]
pub struct Started {
    pub machine: Machine,
    /// For the user: "forced", "KVM is unusable here: …", how fast the
    /// kernel printed under KVM, …
    pub why: String,
}

/// The line [`start`] says when it gives up on KVM.
pub fn fallback_line(reason: &str) -> String {
    format!("KVM is unusable here: {reason}; falling back to TCG")
}

/// Why KVM was found unusable earlier in this process, if it was.
static KVM_UNUSABLE: Mutex<Option<String>> = Mutex::new(None);

/// [`Machine::start`] under the accelerator `mode` allows (`spec.accel` is
/// ignored): with [`AccelMode::Auto`], KVM when it proves itself (the
/// probe, then a [`trial`] of this very machine), else the same machine
/// under TCG. `dir` is the run dir, as for [`Machine::start`]; the probe's
/// scratch files go there too.
pub fn start(
    spec: &MachineSpec,
    mode: AccelMode,
    user_data: &[u8],
    meta_data: &str,
    dir: &Path,
    hooks: &Hooks<'_>,
) -> Result<Started, QemuError> {
    let under = |accel: Accel| {
        let mut spec = spec.clone();
        spec.accel = accel;
        spec
    };
    let tcg = |why: String| {
        Machine::start(&under(Accel::Tcg), user_data, meta_data, dir)
            .map(|machine| Started { machine, why })
    };
    let foreign = kvm_cannot_run(spec.arch);
    match (mode, foreign) {
        (AccelMode::Force(Accel::Kvm), Some(why)) => {
            return Err(QemuError::Unsupported(format!(
                "cannot run the {} guest under KVM: {why}; use TCG (`--accel tcg` or `auto`)",
                spec.arch
            )));
        }
        (AccelMode::Auto, Some(why)) => return tcg(why),
        _ => {}
    }
    match mode {
        AccelMode::Force(accel) => {
            return Machine::start(&under(accel), user_data, meta_data, dir).map(|machine| {
                Started {
                    machine,
                    why: "forced".into(),
                }
            });
        }
        AccelMode::Auto => {}
    }
    let known = KVM_UNUSABLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(reason) = known {
        return tcg(format!(
            "KVM is unusable here: {reason} (found by an earlier boot of this process)"
        ));
    }
    static PROBE: OnceLock<Result<Duration, String>> = OnceLock::new();
    let probed = PROBE.get_or_init(|| probe_kvm(dir)).clone();
    let took = match probed {
        Ok(took) => took,
        Err(reason) => return tcg(format!("KVM is unusable here: {reason}")),
    };
    let grace = proof_grace(&spec.guest);
    (hooks.say)(&format!(
        "accelerator: trying KVM (a probe boot took {took:.1?}); the guest's kernel must \
         print within {}s, else TCG",
        grace.as_secs()
    ));
    let reason = match trial(
        &under(Accel::Kvm),
        user_data,
        meta_data,
        dir,
        grace,
        hooks.cancelled,
    )? {
        Trial::Proven { machine, after } => {
            return Ok(Started {
                machine: *machine,
                why: format!("the guest's kernel printed {after:.1?} after qemu's start"),
            });
        }
        Trial::Cancelled(machine) => {
            return Ok(Started {
                machine: *machine,
                why: "interrupted before KVM proved itself".into(),
            });
        }
        Trial::Failed(reason) => reason,
    };
    (hooks.say)(&fallback_line(&reason));
    *KVM_UNUSABLE.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
    tcg("KVM failed, see above".into())
}

/// Why KVM is out of the question for a guest of `arch` here, if it is:
/// KVM runs only guests of the host's own architecture, and the probe that
/// proves it is x86 code.
pub fn kvm_cannot_run(arch: Arch) -> Option<String> {
    let host = std::env::consts::ARCH;
    if host != arch.uname() {
        Some(format!(
            "KVM runs only guests of the host's own architecture (this host is {host}, the \
             guest {})",
            arch.uname()
        ))
    } else if arch != Arch::Amd64 {
        Some(format!(
            "this driver proves KVM with an x86 probe only; an {host} guest runs under TCG"
        ))
    } else {
        None
    }
}

/// How a [`trial`] ended.
#[derive(Debug)]
pub enum Trial {
    /// The kernel printed `after` qemu's start; the machine runs on.
    Proven {
        machine: Box<Machine>,
        after: Duration,
    },
    /// It did not (or qemu would not start, or exited): why. The machine
    /// is stopped and its files are gone (the seed stays: it was only
    /// read), so the run dir is ready for another start.
    Failed(String),
    /// `cancelled()` said so before either; the machine still runs.
    Cancelled(Box<Machine>),
}

/// Starts the machine `spec` under `spec.accel` and waits until its kernel
/// prints ([`console::kernel_started`]) or `grace` has passed since qemu's
/// start. Errors are what would fail under any accelerator (a missing
/// image, no ISO maker); qemu failing to start under it is a
/// [`Trial::Failed`].
pub fn trial(
    spec: &MachineSpec,
    user_data: &[u8],
    meta_data: &str,
    dir: &Path,
    grace: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<Trial, QemuError> {
    let accel = spec.accel.as_str().to_uppercase();
    let machine = match Machine::start(spec, user_data, meta_data, dir) {
        Ok(machine) => machine,
        Err(QemuError::QemuStart { message, stderr }) => {
            forget_machine_files(dir);
            return Ok(Trial::Failed(format!(
                "qemu did not start under {accel} ({message}{})",
                first_line(&stderr).map_or(String::new(), |l| format!(": {l}"))
            )));
        }
        Err(e) => return Err(e),
    };
    loop {
        let text = machine.console_text();
        if console::kernel_started(&text) {
            let after = machine.elapsed();
            return Ok(Trial::Proven {
                machine: Box::new(machine),
                after,
            });
        }
        if cancelled() {
            return Ok(Trial::Cancelled(Box::new(machine)));
        }
        let failed = if let Some(status) = machine.exit_status() {
            Some(format!(
                "qemu exited ({status}) under {accel} before the guest's kernel printed a line{}",
                first_line(&machine.qemu_stderr()).map_or(String::new(), |l| format!(": {l}"))
            ))
        } else if machine.elapsed() >= grace {
            Some(silent_kernel(&accel, grace, &text))
        } else {
            None
        };
        if let Some(reason) = failed {
            machine.kill();
            drop(machine);
            forget_machine_files(dir);
            return Ok(Trial::Failed(reason));
        }
        std::thread::sleep(POLL);
    }
}

/// Why a trial failed when the console has only `text` after `grace`.
fn silent_kernel(accel: &str, grace: Duration, text: &str) -> String {
    let last = text
        .lines()
        .map(|l| l.trim_matches(|c: char| c.is_whitespace() || c.is_control()))
        .rfind(|l| !l.is_empty());
    format!(
        "the guest's kernel printed nothing within {}s under {accel} (console: {} bytes{})",
        grace.as_secs(),
        text.len(),
        last.map_or(String::new(), |l| format!(", the last line {l:?}"))
    )
}

fn first_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|l| !l.is_empty())
}

/// Removes what a stopped machine wrote in `dir` (overlay, console, qemu's
/// logs, the QMP socket), for a fresh start in the same dir.
fn forget_machine_files(dir: &Path) {
    let paths = RunPaths::new(dir);
    for path in [
        &paths.overlay,
        &paths.console,
        &paths.stderr,
        &paths.qmp,
        &paths.cmdline,
    ] {
        let _ = std::fs::remove_file(path);
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
    let mut args: Vec<String> = accel
        .qemu_args(Arch::Amd64)
        .iter()
        .map(|s| s.to_string())
        .collect();
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
    let qemu = program(Arch::Amd64);
    let mut cmd = Command::new(qemu);
    cmd.args(probe_args(accel, &disk))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(&stderr)
                .map_err(|e| format!("cannot create `{}`: {e}", stderr.display()))?,
        );
    let started = Instant::now();
    let mut child = spawn::spawn(cmd, false).map_err(|e| format!("cannot start {qemu}: {e}"))?;
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
    fn kvm_is_only_for_the_hosts_own_architecture() {
        // The tests run on x86_64 (CI and these machines).
        assert_eq!(std::env::consts::ARCH, "x86_64");
        assert_eq!(kvm_cannot_run(Arch::Amd64), None);
        let why = kvm_cannot_run(Arch::Arm64).expect("an arm64 guest");
        assert!(
            why.contains("this host is x86_64, the guest aarch64"),
            "{why}"
        );
    }

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
        assert_eq!(
            Accel::Kvm.qemu_args(Arch::Amd64),
            ["-accel", "kvm", "-cpu", "host"]
        );
        let args = probe_args(Accel::Tcg, Path::new("/d/boot.img"));
        assert!(
            args.windows(2)
                .any(|w| w == ["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        );
        assert!(args.contains(&"-no-reboot".to_owned()));
    }

    #[test]
    fn the_flag_wins_over_the_variable_which_wins_over_auto() {
        let kvm = AccelMode::Force(Accel::Kvm);
        let tcg = AccelMode::Force(Accel::Tcg);
        assert_eq!("auto".parse::<AccelMode>(), Ok(AccelMode::Auto));
        assert_eq!("kvm".parse::<AccelMode>(), Ok(kvm));
        assert_eq!(AccelMode::resolve(None, None), Ok((AccelMode::Auto, None)));
        assert_eq!(
            AccelMode::resolve(None, Some(" ")),
            Ok((AccelMode::Auto, None))
        );
        assert_eq!(
            AccelMode::resolve(None, Some("tcg")),
            Ok((tcg, Some("LAB_AGENT_VM_ACCEL")))
        );
        assert_eq!(
            AccelMode::resolve(Some(kvm), Some("tcg")),
            Ok((kvm, Some("--accel")))
        );
        assert_eq!(
            AccelMode::resolve(Some(AccelMode::Auto), Some("tcg")),
            Ok((AccelMode::Auto, Some("--accel")))
        );
        // The flag wins without reading the variable; a bad variable that
        // is used names itself and the choices.
        assert!(AccelMode::resolve(Some(tcg), Some("hvf")).is_ok());
        let err = AccelMode::resolve(None, Some("KVM")).unwrap_err();
        assert_eq!(
            err,
            "LAB_AGENT_VM_ACCEL=KVM: unknown accelerator \"KVM\": use `auto`, `kvm` or `tcg`"
        );
    }

    #[test]
    fn a_silent_kernel_is_described_by_its_console() {
        let firmware = "SeaBIOS (version 1.16.3)\r\nBooting from ROM..\r\n\
                        Probing EDD (edd=off to disable)... ok\r\n\r\n";
        let reason = silent_kernel("KVM", KERNEL_PROOF_GRACE, firmware);
        assert_eq!(
            reason,
            format!(
                "the guest's kernel printed nothing within 15s under KVM (console: {} bytes, \
                 the last line \"Probing EDD (edd=off to disable)... ok\")",
                firmware.len()
            )
        );
        assert_eq!(
            silent_kernel("KVM", DISK_PROOF_GRACE, ""),
            "the guest's kernel printed nothing within 30s under KVM (console: 0 bytes)"
        );
        assert_eq!(
            fallback_line("why"),
            "KVM is unusable here: why; falling back to TCG"
        );
    }

    #[test]
    fn a_bootloader_gets_longer_than_a_kernel() {
        let kernel = Guest::Kernel {
            kernel: "/k".into(),
            initrd: "/i".into(),
            rootfs: "/r".into(),
        };
        let disk = Guest::Disk {
            image: "/d.qcow2".into(),
        };
        assert_eq!(proof_grace(&kernel), KERNEL_PROOF_GRACE);
        assert_eq!(proof_grace(&disk), DISK_PROOF_GRACE);
        assert!(KERNEL_PROOF_GRACE < DISK_PROOF_GRACE);
    }
}
