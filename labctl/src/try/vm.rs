//! The VM target of `labctl try`: the lab's real payload (what `labctl
//! secret` renders: the static agent, the token, the unit, the lab's files
//! and setup) booted by real cloud-init in a qemu guest from a NoCloud
//! seed, as KubeVirt boots it from the Secret. The agent is reached through
//! a loopback port forward; the guest reaches nothing else.
//!
//! Two kinds of guest ([`Guest`]):
//! - `--vm IMAGE`: a disk image with a bootloader, e.g. a Debian or Ubuntu
//!   cloud image (qcow2 or raw, BIOS boot; `tests/vm/build-image.sh` makes
//!   `disk.raw`, one laid out the same way, which the VM tests boot);
//! - `--kernel K --initrd I --rootfs R`: a kernel booted directly with its
//!   root filesystem as `/dev/vda`, as the project's VM tests do
//!   (`tests/vm/build-image.sh` makes one).
//!
//! Either way the image is only read; the guest writes to a qcow2 overlay.
//! Everything lives in one run dir, removed at the end (the console log
//! stays when something failed; everything stays with `--keep`):
//!
//! ```text
//! /tmp/labctl-try-vm-LAB-XXXXXX/ 0700
//!   token, user-data, secret.yaml   the payload, as `labctl secret` writes it (0600)
//!   overlay.qcow2                   the guest's disk, on the (untouched) image
//!   seed.iso, seed/                 the NoCloud seed (user-data, meta-data)
//!   console.log                     the serial console
//!   qemu-stderr.log, qemu-cmdline.txt, qmp.sock
//!   stop.sh                         with `--keep`: stops the VM, removes this dir
//! ```

use super::{Config, Target, interruptible_for, labctl_name};
use crate::agent_bin::{self, Linkage};
use crate::exit::{Exit, Failure};
use crate::qemu::accel::{self, Hooks};
use crate::qemu::machine::make_run_dir;
use crate::qemu::{
    self, Accel, AccelMode, Guest, Machine, MachineSpec, PowerOff, QemuError, console, seed,
};
use crate::secret::{self, RenderOptions, SecretError, write_private};
use lab_agent_client::{Client, ClientBuilder, Progress};
use lab_agent_cloudinit::{Format, SecretMeta};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Added to the setup's timeout when `--timeout` is not given: a cloud image
/// under software emulation takes minutes to boot.
pub const BOOT_ALLOWANCE: Duration = Duration::from_secs(15 * 60);
pub const DEFAULT_MEMORY_MIB: u32 = 2048;
pub const DEFAULT_CPUS: u32 = 2;
/// How long the serial console may stay silent before the agent first
/// answers: then the guest is taken for hung (`--boot-silence`). A boot of
/// the test image under TCG on a busy 2-core host never went quiet for
/// more than ~17 s (the kernel, systemd and each cloud-init stage print as
/// they go; the longest gap is between cloud-init's config and final
/// stages: see tests/vm/README.md); a cloud image doing more
/// on first boot, say key generation and package work, stays quiet for
/// longer. Two minutes is far beyond both, and still ends the wait for a
/// guest that will never boot (a KVM that runs nothing) long before the
/// boot allowance would.
pub const DEFAULT_BOOT_SILENCE: Duration = Duration::from_secs(120);
/// How long the guest gets to power off after ACPI before qemu is killed.
const POWEROFF_GRACE: Duration = Duration::from_secs(10);
/// Console lines shown when the VM failed.
const CONSOLE_TAIL_LINES: usize = 25;

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
    #[arg(long, value_enum, value_name = "ACCEL")]
    pub accel: Option<AccelArg>,
    /// Give up when the guest's serial console stays silent this many
    /// seconds before its agent first answers (a guest that never boots)
    /// [default: 120]
    #[arg(long, value_name = "SECS")]
    pub boot_silence: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AccelArg {
    Auto,
    Kvm,
    Tcg,
}

/// `--vm` / `--kernel …` and the machine flags, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmConfig {
    /// Absolute paths.
    pub guest: Guest,
    pub memory_mib: u32,
    pub cpus: u32,
    /// `None`: the image's size.
    pub disk_gib: Option<u32>,
    /// `--accel`, else `LAB_AGENT_VM_ACCEL`, else auto.
    pub accel: AccelMode,
    /// Which of the two set it (`None`: neither).
    pub accel_set_by: Option<&'static str>,
    /// `--boot-silence`.
    pub boot_silence: Duration,
}

impl VmConfig {
    /// `None` when no VM was asked for (and then no machine flag may be
    /// given either). Reads `LAB_AGENT_VM_ACCEL`.
    pub fn from_args(args: &VmArgs) -> Result<Option<VmConfig>, Failure> {
        let env = std::env::var_os(accel::ENV).map(|v| v.to_string_lossy().into_owned());
        VmConfig::from_args_env(args, env.as_deref())
    }

    /// [`VmConfig::from_args`] with `accel_env` as `LAB_AGENT_VM_ACCEL`.
    pub fn from_args_env(
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
        let flag = args.accel.map(|a| match a {
            AccelArg::Auto => AccelMode::Auto,
            AccelArg::Kvm => AccelMode::Force(Accel::Kvm),
            AccelArg::Tcg => AccelMode::Force(Accel::Tcg),
        });
        let (accel, accel_set_by) = AccelMode::resolve(flag, accel_env).map_err(Failure::usage)?;
        let boot_silence = match args.boot_silence {
            None => DEFAULT_BOOT_SILENCE,
            Some(0) => {
                return Err(Failure::usage("`--boot-silence` must be at least 1 second"));
            }
            Some(secs) => Duration::from_secs(secs),
        };
        Ok(Some(VmConfig {
            guest,
            memory_mib,
            cpus,
            disk_gib: args.disk_size,
            accel,
            accel_set_by,
            boot_silence,
        }))
    }
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

/// The agent a VM gets: the static build (as `labctl secret` ships it).
pub fn find_static_agent(explicit: Option<&Path>) -> Result<PathBuf, Failure> {
    let path =
        agent_bin::find(explicit, Linkage::Static).map_err(super::local::agent_bin_failure)?;
    if let Some(w) = explicit.map_or_else(|| agent_bin::stale_warning(&path), |_| None) {
        eprintln!("warning: {w}");
    }
    Ok(path)
}

/// Boots, waits, grades, reports; stops the VM (or leaves it with `--keep`).
pub fn run(config: &Config, vm: &VmConfig) -> Result<Exit, Failure> {
    let rt = super::common::runtime()?;
    let target = start_interruptibly(&rt, config, vm)?;
    let outcome = rt.block_on(interruptible_for("the VM", async {
        tokio::select! {
            result = super::flow(config, &target) => result,
            failure = target.qemu_exited() => Err(failure),
            failure = target.silent_console(vm.boot_silence) => Err(failure),
        }
    }));
    let result = match outcome {
        Ok(result) => result,
        Err(interrupted) => {
            target.stop(Stop::Interrupted);
            return Err(interrupted);
        }
    };
    if config.keep && target.is_running() {
        target.leave_running(config, &result);
        return result;
    }
    target.stop(match &result {
        Ok(Exit::SetupFailed) => Stop::KeepConsole,
        Err(f) if f.exit == Exit::SetupFailed => Stop::KeepConsole,
        Ok(_) => Stop::Discard,
        Err(_) => Stop::ShowConsole,
    });
    result
}

/// [`VmTarget::start`] on a thread of its own while this one watches for
/// Ctrl-C and SIGTERM: a KVM trial can take seconds, and an interrupted
/// start stops its qemu and removes the run dir (it holds the token) like
/// an interrupted wait does.
fn start_interruptibly(
    rt: &tokio::runtime::Runtime,
    config: &Config,
    vm: &VmConfig,
) -> Result<VmTarget, Failure> {
    let cancel = AtomicBool::new(false);
    let cancelled = || cancel.load(Ordering::Relaxed);
    std::thread::scope(|s| {
        let starting = s.spawn(|| VmTarget::start(config, vm, &cancelled));
        let waited = rt.block_on(interruptible_for("the VM", async {
            while !starting.is_finished() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
        if waited.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        let started = starting
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match waited {
            Ok(()) => started,
            Err(interrupted) => {
                if let Ok(target) = started {
                    target.stop(Stop::Interrupted);
                }
                Err(interrupted)
            }
        }
    })
}

/// How the VM stops, and what happens to the run dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// All went as asked: power off, remove everything.
    Discard,
    /// Ctrl-C or SIGTERM: kill qemu at once (the overlay is thrown away
    /// anyway), remove everything.
    Interrupted,
    /// The setup failed (its log was shown): keep the console log.
    KeepConsole,
    /// The VM failed: show the console's last lines and keep it.
    ShowConsole,
}

/// A booting or booted VM and its run dir.
#[derive(Debug)]
struct VmTarget {
    /// `None` once stopped or left running.
    machine: Option<Machine>,
    dir: PathBuf,
    token: String,
    token_file: PathBuf,
    /// qemu start → the agent's first answer.
    first_answer: OnceLock<Duration>,
}

impl VmTarget {
    /// Renders the payload, prepares overlay and seed, starts qemu under
    /// the accelerator `vm.accel` allows (under `auto`, that takes up to a
    /// KVM trial's grace). Returns as soon as the guest is booting, or,
    /// unproven, once `cancelled()`.
    fn start(
        config: &Config,
        vm: &VmConfig,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<VmTarget, Failure> {
        let version = qemu::check_installed().map_err(qemu_failure)?;
        let lab = &config.lab;
        let dir = make_run_dir("labctl-try-vm", &lab.name).map_err(qemu_failure)?;
        let mut target = VmTarget {
            machine: None,
            token: String::new(),
            token_file: dir.join("token"),
            dir,
            first_answer: OnceLock::new(),
        };

        // The payload exactly as `labctl secret` renders it for a Secret.
        let user_data = target.render(config).map_err(|e| {
            let hint = e.hint();
            Failure::usage("failed to render the lab's payload")
                .with_source(e)
                .hints(hint)
        })?;

        let mut spec = MachineSpec::new(lab.name.clone(), vm.guest.clone());
        spec.memory_mib = vm.memory_mib;
        spec.cpus = vm.cpus;
        spec.disk_gib = vm.disk_gib;
        spec.detached = config.keep;
        let instance = format!(
            "labctl-try-{}-{}",
            qemu::sanitize(&lab.name),
            std::process::id()
        );
        let meta = seed::meta_data(&instance, &seed::hostname(&lab.name));
        let hooks = Hooks {
            say: &|line| eprintln!("{line}"),
            cancelled,
        };
        let started = accel::start(&spec, vm.accel, &user_data, &meta, &target.dir, &hooks)
            .map_err(qemu_failure)?;
        let machine = started.machine;
        if cancelled() {
            // The caller stops it at once: nothing to announce.
            target.machine = Some(machine);
            return Ok(target);
        }
        let accel = machine.accel();
        let why = match (vm.accel, vm.accel_set_by) {
            (AccelMode::Force(_), Some(accel::ENV)) => format!("as {} asks", accel::ENV),
            (AccelMode::Force(_), _) => "as asked".to_owned(),
            (AccelMode::Auto, _) => started.why,
        };
        eprintln!(
            "accelerator: {} ({why})\nbooting `{}` (qemu {}): qemu pid {}, agent at {} \
             (token in `{}`), console `{}`",
            accel.as_str().to_uppercase(),
            vm.guest.base().display(),
            version_number(&version),
            machine.pid(),
            machine.agent_url(),
            target.token_file.display(),
            machine.console_log_path().display()
        );
        target.machine = Some(machine);
        Ok(target)
    }

    /// Renders the lab's payload with a fresh token and writes it to the
    /// run dir as `labctl secret` would (token, user-data, secret.yaml, all
    /// 0600); returns the user-data for the seed.
    fn render(&mut self, config: &Config) -> Result<Vec<u8>, SecretError> {
        let agent = agent_bin::load(Some(&config.agent), Linkage::Static)?;
        let token = crate::token::generate().map_err(SecretError::Random)?;
        let opts = RenderOptions {
            meta: SecretMeta {
                name: "labctl-try".into(),
                namespace: None,
                labels: Default::default(),
            },
            format: Format::Yaml,
            serial_autologin: true,
        };
        let rendered =
            secret::render_logged(&config.lab, &agent, &token, &opts, &mut std::io::stderr())?;
        write_private(
            &self.token_file,
            format!("{token}\n").as_bytes(),
            "the token",
        )?;
        write_private(
            &self.dir.join("user-data"),
            rendered.user_data.as_bytes(),
            "the user-data",
        )?;
        write_private(
            &self.dir.join("secret.yaml"),
            rendered.manifest.as_bytes(),
            "the Secret",
        )?;
        self.token = token;
        Ok(rendered.user_data.as_bytes().to_vec())
    }

    fn machine(&self) -> &Machine {
        self.machine.as_ref().expect("the VM is running")
    }

    fn is_running(&self) -> bool {
        self.machine.as_ref().is_some_and(Machine::is_running)
    }

    /// Resolves when qemu exits, with a failure that says so.
    async fn qemu_exited(&self) -> Failure {
        loop {
            if let Some(status) = self.machine().exit_status() {
                let stderr = self.machine().qemu_stderr();
                let mut f = Failure::new(
                    Exit::Unreachable,
                    format!("qemu exited ({status}) before `labctl try` was done"),
                );
                if !stderr.trim().is_empty() {
                    f = f.with_source(qemu::tail_lines(stderr.trim(), 5));
                }
                return f;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Resolves, with a failure, when the serial console has printed
    /// nothing for `limit` and the agent has never answered: a guest that
    /// does not boot (whatever the accelerator) ends here, not at the
    /// boot allowance. Pending for good once the agent has answered (the
    /// setup's own timeout then bounds the wait).
    async fn silent_console(&self, limit: Duration) -> Failure {
        let path = self.machine().console_log_path().to_owned();
        let mut seen = console::mark(&path);
        let mut since = self.machine().started_at();
        loop {
            if self.first_answer.get().is_some() {
                return std::future::pending().await;
            }
            let now = console::mark(&path);
            if now != seen {
                (seen, since) = (now, Instant::now());
            }
            if since.elapsed() >= limit {
                return Failure::new(
                    Exit::Unreachable,
                    format!(
                        "the guest printed nothing on its serial console for {}s and its agent \
                         never answered: it is not booting",
                        limit.as_secs()
                    ),
                )
                .hint(
                    "`--boot-silence SECS` waits longer for a guest that is quiet while it boots",
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Stops qemu (ACPI power-off, else kill; at once when interrupted) and
    /// cleans the run dir as `how` says.
    fn stop(mut self, how: Stop) {
        if let Some(machine) = self.machine.take() {
            // A guest whose agent never answered is at best still booting,
            // and ignores ACPI that early: waiting for it is time lost.
            let never_answered = how == Stop::ShowConsole && self.first_answer.get().is_none();
            let off = if how == Stop::Interrupted || never_answered {
                machine.kill();
                PowerOff::Killed
            } else {
                machine.powerdown(POWEROFF_GRACE)
            };
            match off {
                PowerOff::Killed if how == Stop::Interrupted => eprintln!("stopped the VM"),
                PowerOff::Killed if never_answered => {
                    eprintln!("stopped the VM (killed qemu: its agent never answered)")
                }
                PowerOff::Clean(took) => eprintln!("stopped the VM (powered off in {took:.1?})"),
                PowerOff::Killed => eprintln!(
                    "stopped the VM (killed qemu: no power-off within {POWEROFF_GRACE:?})"
                ),
            }
        }
        let console = self.dir.join("console.log");
        match how {
            Stop::Discard | Stop::Interrupted => remove_dir(&self.dir),
            Stop::KeepConsole | Stop::ShowConsole => {
                if how == Stop::ShowConsole {
                    let text = console::read(&console);
                    eprintln!("console (last lines):");
                    for line in qemu::tail_lines(&text, CONSOLE_TAIL_LINES).lines() {
                        eprintln!("  │ {line}");
                    }
                }
                keep_only(
                    &self.dir,
                    &["console.log", "qemu-stderr.log", "qemu-cmdline.txt"],
                );
                eprintln!("console log kept: `{}`", console.display());
            }
        }
        // Nothing left for Drop.
        self.dir = PathBuf::new();
    }

    /// `--keep`: leave qemu running, write `stop.sh`, say how to reach it.
    fn leave_running(mut self, config: &Config, result: &Result<Exit, Failure>) {
        let machine = self.machine.take().expect("running");
        let url = machine.agent_url();
        let console = machine.console_log_path().to_owned();
        let pid = machine.leave_running();
        let stop = self.dir.join("stop.sh");
        let written = fs::write(&stop, stop_script(pid, &self.dir));
        let labctl = labctl_name();
        let conn = format!("--url {url} --token-file {}", self.token_file.display());
        let mut text = format!(
            "\nthe VM keeps running (qemu pid {pid}); `{labctl}` is done with it. Reach it with, e.g.:\n  \
             {labctl} exec {conn} [--user USER] -- COMMAND\n  \
             {labctl} grade {} {conn}\n",
            config.lab.dir.display()
        );
        if matches!(result, Err(f) if f.exit == Exit::SetupFailed) {
            text.push_str(&format!(
                "  {labctl} exec {conn} -- cat /var/lib/lab-agent/setup.log\n"
            ));
        }
        text.push_str(&format!(
            "serial console log: `{}` (root is logged in on the serial console)\n",
            console.display()
        ));
        match written {
            Ok(()) => text.push_str(&format!(
                "stop it and remove its files with:\n  sh {}\n",
                stop.display()
            )),
            Err(e) => text.push_str(&format!(
                "stop it with `kill {pid}`, then remove `{}` (failed to write `{}`: {e})\n",
                self.dir.display(),
                stop.display()
            )),
        }
        eprint!("{text}");
        // The run dir stays.
        self.dir = PathBuf::new();
    }
}

impl Target for VmTarget {
    fn client(&self) -> Result<Client, Failure> {
        ClientBuilder::default()
            // Short long-polls: the display shows each state as it comes.
            .long_poll(Duration::from_secs(2))
            // Before the guest listens, qemu's port forward accepts and then
            // says nothing: give up on such an attempt soon and try again.
            .request_timeout(Duration::from_secs(5))
            .build(&self.machine().agent_url(), &self.token)
            .map_err(Failure::client)
    }

    fn guest_lab_dir(&self) -> &str {
        lab_agent_proto::GUEST_LAB_DIR
    }

    fn on_progress(&self, progress: &Progress) -> Option<String> {
        let machine = self.machine();
        if progress.state.is_some() {
            self.first_answer.get_or_init(|| machine.elapsed());
            return None;
        }
        let text = machine.console_text();
        Some(format!(
            "booting: {}",
            console::milestone(&text).unwrap_or("qemu has started")
        ))
    }

    fn on_ready(&self) {
        let machine = self.machine();
        let ready = machine.elapsed();
        let answered = *self.first_answer.get().unwrap_or(&ready);
        eprintln!(
            "vm: qemu start → agent answered {:.1}s → ready {:.1}s",
            answered.as_secs_f64(),
            ready.as_secs_f64()
        );
    }
}

impl Drop for VmTarget {
    /// A panic or an early return: qemu dies with the machine; the dir goes.
    fn drop(&mut self) {
        if let Some(machine) = self.machine.take() {
            machine.kill();
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// "10.0.2" from "QEMU emulator version 10.0.2 (Debian …)".
fn version_number(line: &str) -> &str {
    line.split_once("version ")
        .and_then(|(_, v)| v.split_whitespace().next())
        .unwrap_or(line)
}

fn qemu_failure(e: QemuError) -> Failure {
    match e {
        QemuError::Missing(_) | QemuError::Io { .. } => Failure::usage(e.to_string()),
        e => Failure::new(Exit::Unreachable, e.to_string()),
    }
}

fn remove_dir(dir: &Path) {
    if let Err(e) = fs::remove_dir_all(dir) {
        eprintln!("warning: failed to remove `{}`: {e}", dir.display());
    }
}

/// Removes everything in `dir` but `keep` (the seed and the token go: the
/// user-data holds the token).
fn keep_only(dir: &Path, keep: &[&str]) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if keep.iter().any(|k| e.file_name() == *k) {
            continue;
        }
        let path = e.path();
        let _ = if e.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
    }
}

/// `stop.sh` for `--keep`: kills qemu if `pid` is still the qemu of `dir`
/// (not a reused PID), waits for it, removes `dir`.
fn stop_script(pid: u32, dir: &Path) -> String {
    let dir = shell_quote(&dir.display().to_string());
    format!(
        "#!/bin/sh\n\
         # Written by `labctl try --keep`: stops the VM it left running and removes its files.\n\
         pid={pid}\n\
         dir={dir}\n\
         if tr '\\0' ' ' </proc/$pid/cmdline 2>/dev/null | grep -qF \"$dir/\"; then\n\
         \x20   kill \"$pid\"\n\
         \x20   while kill -0 \"$pid\" 2>/dev/null; do sleep 0.2; done\n\
         fi\n\
         rm -rf -- \"$dir\"\n\
         echo \"stopped the VM (qemu pid $pid) and removed $dir\"\n"
    )
}

/// `s` in single quotes for sh.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::Parser;

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
    fn qemu_versions_are_short() {
        assert_eq!(
            version_number("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)"),
            "10.0.2"
        );
        assert_eq!(version_number("odd"), "odd");
    }

    #[test]
    fn no_vm_flags_is_local_mode() {
        assert_eq!(VmConfig::from_args(&parse(&[]).unwrap()).unwrap(), None);
    }

    #[test]
    fn machine_flags_need_a_vm() {
        let err = VmConfig::from_args(&parse(&["--memory", "512"]).unwrap()).unwrap_err();
        assert_eq!(err.exit, Exit::Usage);
        assert!(
            err.message.contains("`--memory` only applies to a VM"),
            "{}",
            err.message
        );
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
        let config = VmConfig::from_args_env(&args, None).unwrap().unwrap();
        assert_eq!(
            config,
            VmConfig {
                guest: Guest::Kernel {
                    kernel: fs::canonicalize(&k).unwrap(),
                    initrd: fs::canonicalize(&i).unwrap(),
                    rootfs: fs::canonicalize(&r).unwrap(),
                },
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
        ])
        .unwrap();
        // The flag wins over the variable.
        let config = VmConfig::from_args_env(&args, Some("kvm"))
            .unwrap()
            .unwrap();
        assert_eq!(
            config.guest,
            Guest::Disk {
                image: PathBuf::from(&image)
            }
        );
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
        let err = VmConfig::from_args(&args).unwrap_err();
        assert!(err.message.contains("at least 256"), "{}", err.message);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_accelerator_variable_is_obeyed_and_checked() {
        let (dir, [_, _, image]) = files("accel-env");
        let args = parse(&["--vm", &image]).unwrap();
        let config = VmConfig::from_args_env(&args, Some("tcg"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (config.accel, config.accel_set_by),
            (AccelMode::Force(Accel::Tcg), Some("LAB_AGENT_VM_ACCEL"))
        );
        let config = VmConfig::from_args_env(&args, Some("auto"))
            .unwrap()
            .unwrap();
        assert_eq!(config.accel, AccelMode::Auto);
        let err = VmConfig::from_args_env(&args, Some("hvf")).unwrap_err();
        assert_eq!(err.exit, Exit::Usage);
        assert!(
            err.message
                .starts_with("LAB_AGENT_VM_ACCEL=hvf: unknown accelerator"),
            "{}",
            err.message
        );
        // Without a VM the variable is not read at all.
        assert_eq!(
            VmConfig::from_args_env(&parse(&[]).unwrap(), Some("hvf")).unwrap(),
            None
        );
        let err = VmConfig::from_args_env(
            &parse(&["--vm", &image, "--boot-silence", "0"]).unwrap(),
            None,
        )
        .unwrap_err();
        assert!(err.message.contains("at least 1 second"), "{}", err.message);
        let err =
            VmConfig::from_args_env(&parse(&["--boot-silence", "9"]).unwrap(), None).unwrap_err();
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
        let err = VmConfig::from_args(&args).unwrap_err();
        assert_eq!(err.exit, Exit::Usage);
        assert_eq!(err.message, "`--vm /nonexistent/cloud.qcow2` is not a file");
    }

    #[test]
    fn the_stop_script_checks_the_pid_is_still_this_qemu() {
        let s = stop_script(4242, Path::new("/tmp/labctl-try-vm-x'y"));
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        assert!(s.contains("pid=4242\n"), "{s}");
        assert!(s.contains(r"dir='/tmp/labctl-try-vm-x'\''y'"), "{s}");
        assert!(s.contains("grep -qF \"$dir/\""), "{s}");
        assert!(s.contains("rm -rf -- \"$dir\""), "{s}");
    }

    #[test]
    fn only_the_console_logs_are_kept() {
        let dir = std::env::temp_dir().join(format!("labctl-keep-only-{}", std::process::id()));
        fs::create_dir_all(dir.join("seed")).unwrap();
        for f in [
            "console.log",
            "token",
            "user-data",
            "overlay.qcow2",
            "seed/user-data",
        ] {
            fs::write(dir.join(f), "x").unwrap();
        }
        keep_only(&dir, &["console.log", "qemu-stderr.log"]);
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["console.log"]);
        fs::remove_dir_all(dir).unwrap();
    }
}
