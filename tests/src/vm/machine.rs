//! One test guest: the core's [`Machine`] under the machine-wide lock, in a
//! temp dir that goes away with it, with its console log kept when the test
//! fails.

use std::net::SocketAddr;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lab_runner::qemu::accel::{self, Hooks};
use lab_runner::qemu::machine::make_run_dir;
use lab_runner::qemu::{
    AccelMode, ExtraDisk, Guest, Machine, MachineSpec, PowerOff, QemuError, console, sanitize, seed,
};

use super::http::{self, HttpAnswer};
use super::lock::VmLock;
use super::{Accel, VmError, VmImage, accel_mode};

/// How a VM is booted. `BootOptions::new(name, user_data)` fills the rest.
#[derive(Debug, Clone)]
pub struct BootOptions {
    /// Names the VM in logs and in the kept console log's file name.
    pub name: String,
    /// The NoCloud `user-data`, verbatim (e.g. `#cloud-config\n…`).
    pub user_data: Vec<u8>,
    /// `instance-id` in `meta-data`; default: the name plus a unique suffix.
    pub instance_id: Option<String>,
    /// The whole `meta-data`; overrides `instance_id` when set.
    pub meta_data: Option<String>,
    pub memory_mib: u32,
    pub cpus: u32,
    /// Appended to the kernel command line.
    pub extra_append: String,
    /// Appended to qemu's arguments.
    pub extra_qemu_args: Vec<String>,
    /// Read-only raw disks after the root and the seed (`/dev/vdc`, …), each
    /// with the serial a KubeVirt `disks:` entry gives it: the runner's own
    /// (`labctl try --vm --agent-from disk` attaches the agent's disk so).
    pub disks: Vec<ExtraDisk>,
    /// Forces the accelerator; default: [`accel_mode`].
    pub accel: Option<Accel>,
    /// A virtio-vsock device (`vhost-device-vsock`, which
    /// `tests/install-deps.sh` puts in the cache); its hybrid socket is
    /// `vsock_url()`'s (the machine's).
    pub vsock: bool,
    /// The root disk's base instead of the image's never-booted root
    /// filesystem: an earlier VM's disk (its qcow2 overlay, kept after a
    /// clean power-off), as a booted golden is. The VM still writes to an
    /// overlay of its own.
    pub root_base: Option<PathBuf>,
}

impl BootOptions {
    pub fn new(name: impl Into<String>, user_data: impl Into<Vec<u8>>) -> BootOptions {
        BootOptions {
            name: name.into(),
            user_data: user_data.into(),
            instance_id: None,
            meta_data: None,
            memory_mib: 1024,
            cpus: guest_cpus(),
            extra_append: String::new(),
            extra_qemu_args: Vec::new(),
            disks: Vec::new(),
            accel: None,
            vsock: false,
            root_base: None,
        }
    }
}

/// A running guest; derefs to the core [`Machine`] (console waits, QMP,
/// power-off, …). Dropping it kills qemu (by its PID) and removes its temp
/// dir; if the test is panicking the console log is first copied to
/// `target/vm-logs/`.
#[derive(Debug)]
pub struct Vm {
    machine: Machine,
    keep_logs: AtomicBool,
    /// Last: released only after qemu is gone. `None` only inside
    /// [`Vm::release`].
    lock: Option<VmLock>,
}

impl Deref for Vm {
    type Target = Machine;
    fn deref(&self) -> &Machine {
        &self.machine
    }
}

impl Vm {
    /// Boots `image` with `opts`. Waits for the VM lock (one VM per
    /// machine), prepares overlay and seed, starts qemu and connects QMP. The
    /// guest is then booting; wait for it with [`Machine::wait_for_console`]
    /// or [`Vm::wait_for_http`].
    pub fn boot(image: &VmImage, opts: BootOptions) -> Result<Vm, VmError> {
        let lock = VmLock::acquire(&opts.name)?;
        Vm::boot_with(image, opts, lock)
    }

    /// [`Vm::boot`] under a lock the caller already holds: for a test that
    /// runs several machines back to back (or one of `labctl try`'s) with no
    /// other test's VM in between. [`Vm::release`] hands the lock back.
    ///
    /// It returns once the guest's own system has started (systemd's first
    /// line on the console, after the kernel and its initramfs). Before
    /// that, nothing of the guest's system or the payload has run, so a
    /// boot that fails there for the emulator's sake boots again, once,
    /// saying why, with the failed run's console and qemu stderr kept in
    /// `target/vm-logs/`:
    /// - qemu itself died of an internal error (an assertion or a crash
    ///   signal: qemu 10.0's TCG aborted once in CI with `iotlb_to_section:
    ///   Assertion ... failed` while the guest's kernel probed PCI, 2.5 s
    ///   into its boot);
    /// - the kernel reported an RCU stall and the system has not started
    ///   (in CI a Debian 12 kernel under TCG hung bringing up its second
    ///   CPU, "rcu_preempt kthread timer wakeup didn't happen", and never
    ///   went on: the test then failed on its own 600 s wait; a Debian 13
    ///   one, with its first CPU halted for good in the initramfs, "Possible
    ///   timer handling issue on cpu=0").
    pub fn boot_with(image: &VmImage, opts: BootOptions, lock: VmLock) -> Result<Vm, VmError> {
        let vm = Vm::start(image, opts.clone(), lock)?;
        let Some(why) = vm.failed_before_the_system() else {
            return Ok(vm);
        };
        eprintln!("vm[{}]: {why}; booting it again, once", opts.name);
        vm.keep_logs();
        let lock = vm.release();
        Vm::start(image, opts, lock)
    }

    /// Watches the boot until the guest's system starts (`None`),
    /// or says why it will not for the emulator's sake. Anything else (a
    /// slow boot, the guest's own failure) is `None` too: the test's own
    /// waits see it.
    fn failed_before_the_system(&self) -> Option<String> {
        let deadline = std::time::Instant::now() + KERNEL_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.wait_for_console(console::SYSTEM_STARTED, left.min(STALL_CHECK)) {
                Err(QemuError::QemuExited { status, stderr, .. })
                    if emulator_crash(&status, &stderr) =>
                {
                    return Some(format!(
                        "qemu itself failed before the guest's system started ({status}: {})",
                        stderr.trim()
                    ));
                }
                Err(QemuError::ConsoleTimeout { .. }) => {
                    if let Some(line) = console::kernel_stall(&self.console_text()) {
                        return Some(format!(
                            "the guest's kernel stalled before its system started ({line:?})"
                        ));
                    }
                    if left <= STALL_CHECK {
                        return None;
                    }
                }
                _ => return None,
            }
        }
    }

    fn start(image: &VmImage, opts: BootOptions, lock: VmLock) -> Result<Vm, VmError> {
        let mode = opts.accel.map_or_else(accel_mode, AccelMode::Force);
        let dir = make_run_dir("lab-agent-vm", &opts.name)?;
        let guest = match (&opts.root_base, image.guest()) {
            (Some(base), Guest::Kernel { kernel, initrd, .. }) => Guest::Kernel {
                kernel,
                initrd,
                rootfs: base.clone(),
            },
            (_, guest) => guest,
        };
        let mut spec = MachineSpec::new(opts.name.clone(), guest);
        spec.arch = image.os.arch();
        spec.memory_mib = opts.memory_mib;
        spec.cpus = opts.cpus;
        spec.extra_append = opts.extra_append.clone();
        spec.extra_qemu_args = opts.extra_qemu_args.clone();
        spec.disks = opts.disks.clone();
        // The build script makes a raw root filesystem: no need to ask; an
        // earlier VM's disk is a qcow2 (`qemu-img info` says).
        spec.base_format = opts.root_base.is_none().then(|| "raw".into());
        if opts.vsock {
            let backend = lab_runner::qemu::vsock::find_backend()?.ok_or_else(|| {
                VmError::HostUnsupported(format!(
                    "{}; `tests/install-deps.sh` (or `tests/vhost-vsock.sh`) installs it",
                    lab_runner::qemu::vsock::missing_note()
                ))
            })?;
            spec.vsock = Some(backend);
        }
        let meta = opts.meta_data.clone().unwrap_or_else(|| {
            let id = opts
                .instance_id
                .clone()
                .unwrap_or_else(|| format!("{}-{}", sanitize(&opts.name), dir_suffix(&dir)));
            seed::meta_data(&id, &seed::hostname(&opts.name))
        });
        let say = |line: &str| eprintln!("vm[{}]: {line}", opts.name);
        let hooks = Hooks {
            say: &say,
            cancelled: &|| false,
        };
        match accel::start(&spec, mode, &opts.user_data, &meta, &dir, &hooks) {
            Ok(accel::Started { machine, why }) => {
                eprintln!(
                    "vm[{}]: qemu pid {} ({:?}: {why}), agent port 127.0.0.1:{}, console `{}`",
                    opts.name,
                    machine.pid(),
                    machine.accel(),
                    machine.port(),
                    machine.console_log_path().display()
                );
                Ok(Vm {
                    machine,
                    keep_logs: AtomicBool::new(false),
                    lock: Some(lock),
                })
            }
            Err(e) => {
                // The error carries qemu's stderr; nothing else here is worth keeping.
                let _ = std::fs::remove_dir_all(&dir);
                Err(e.into())
            }
        }
    }

    /// Stops the VM like dropping it does (kills qemu, removes its dir),
    /// but keeps the machine-wide lock for the caller's next machine.
    pub fn release(mut self) -> VmLock {
        let lock = self.lock.take().expect("a Vm holds its lock");
        drop(self);
        lock
    }

    /// The core machine (also reachable through `Deref`).
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The VM's temp dir (overlay, seed, console log, QMP socket).
    pub fn dir(&self) -> &Path {
        &self.machine.paths().dir
    }

    /// One `GET path` to the guest's port (see [`http::get`]).
    pub fn http_get(&self, path: &str, bearer: Option<&str>) -> Result<HttpAnswer, String> {
        http::get(self.agent_addr(), path, bearer)
    }

    /// Waits until the guest's port gives any HTTP answer to `GET path`;
    /// returns the time since qemu's start and the answer.
    pub fn wait_for_http(
        &self,
        path: &str,
        timeout: Duration,
    ) -> Result<(Duration, HttpAnswer), VmError> {
        let answer = http::wait_for_answer(self.agent_addr(), path, timeout)?;
        Ok((self.elapsed(), answer))
    }

    /// The forwarded port's address.
    pub fn addr(&self) -> SocketAddr {
        self.agent_addr()
    }

    /// ACPI power-off; kills qemu if the guest is not off within `grace`.
    pub fn powerdown(&self, grace: Duration) -> Result<PowerOff, VmError> {
        Ok(self.machine.powerdown(grace))
    }

    /// Keep the console log in `target/vm-logs/` even if the test passes.
    pub fn keep_logs(&self) {
        self.keep_logs.store(true, Ordering::Relaxed);
    }

    fn save_logs(&self) -> Option<PathBuf> {
        let dir = vm_logs_dir();
        std::fs::create_dir_all(&dir).ok()?;
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let base = format!("{}-{stamp}", sanitize(self.name()));
        let log = dir.join(format!("{base}.log"));
        std::fs::copy(self.console_log_path(), &log).ok()?;
        let stderr = self.qemu_stderr();
        if !stderr.trim().is_empty() {
            let _ = std::fs::write(dir.join(format!("{base}.qemu-stderr.log")), stderr);
        }
        Some(log)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.machine.kill();
        let failed = std::thread::panicking();
        let keep = failed
            || self.keep_logs.load(Ordering::Relaxed)
            || std::env::var_os("LAB_AGENT_VM_KEEP_LOGS").is_some_and(|v| v != "0");
        if keep {
            match self.save_logs() {
                Some(log) => {
                    eprintln!("vm[{}]: console log kept: `{}`", self.name(), log.display())
                }
                None => {
                    eprintln!(
                        "vm[{}]: could not copy the console log; kept `{}`",
                        self.name(),
                        self.dir().display()
                    );
                    return;
                }
            }
        }
        let _ = std::fs::remove_dir_all(self.dir());
    }
}

/// A test guest's vCPUs: `LAB_AGENT_VM_CPUS`, else 1. Under TCG two
/// guests booting at once on a 2-core host were ready 14–26 % sooner with
/// one vCPU each than with two (hello-lab, `labctl try --kernel`, Debian
/// 12: 206.6/185.1 s → 154.8/161.6 s; Debian 13: 165.8/160.0 s →
/// 148.7/150.5 s; 2026-12-07), and spent ~15 % less host CPU: with two,
/// a vCPU spins on a lock whose holder's thread the host has preempted.
/// Nor can a kernel hang bringing up a second CPU it does not have. A
/// test about contention inside the guest (the runaways) asks for two.
pub fn guest_cpus() -> u32 {
    match std::env::var("LAB_AGENT_VM_CPUS") {
        Ok(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=8).contains(n))
            .unwrap_or_else(|| panic!("LAB_AGENT_VM_CPUS={v:?} is not a number from 1 to 8")),
        Err(_) => 1,
    }
}

/// How long [`Vm::boot_with`] watches for the guest's system to start (a
/// loaded machine under TCG: ~15–40 s).
const KERNEL_WITHIN: Duration = Duration::from_secs(300);
/// How often, before the system starts, the console is looked at for a stall
/// (RCU reports one after 21 s without progress).
const STALL_CHECK: Duration = Duration::from_secs(30);

/// Whether qemu's end was its own failure rather than the guest's doing:
/// killed by a crash signal (an assertion aborts), or an assertion message.
fn emulator_crash(status: &str, stderr: &str) -> bool {
    stderr.contains("Assertion")
        || ["SIGABRT", "SIGSEGV", "SIGBUS", "SIGILL"]
            .iter()
            .any(|s| status.contains(s))
}

/// Where kept console logs go: `<cargo target dir>/vm-logs/`. The test binary
/// lives under the target dir, which cargo marks with `CACHEDIR.TAG`.
pub fn vm_logs_dir() -> PathBuf {
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .find(|dir| dir.join("CACHEDIR.TAG").is_file())
            .map(Path::to_path_buf)
    });
    from_exe
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("vm-logs")
}

fn dir_suffix(dir: &Path) -> String {
    dir.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.rsplit('-').next())
        .unwrap_or("0")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_qemu_s_own_failures_boot_again() {
        let assertion = "qemu-system-x86_64: system/physmem.c:2678: iotlb_to_section: \
                         Assertion `section_index < d->map.sections_nb' failed.\n";
        assert!(emulator_crash(
            "signal: 6 (SIGABRT) (core dumped)",
            assertion
        ));
        assert!(emulator_crash("signal: 11 (SIGSEGV)", ""));
        // The guest powering off, or qemu refusing its arguments: not a crash.
        assert!(!emulator_crash("exit status: 0", ""));
        assert!(!emulator_crash(
            "exit status: 1",
            "qemu-system-x86_64: -no-such-option: invalid option"
        ));
        assert!(!emulator_crash("signal: 9 (SIGKILL)", ""));
    }

    /// The report of the stall that hung a CI boot, and a boot's
    /// ordinary lines.
    #[test]
    fn instance_ids_end_in_the_run_dir_suffix() {
        assert_eq!(
            dir_suffix(Path::new("/tmp/lab-agent-vm-x-12-0abc1234")),
            "0abc1234"
        );
    }
}
