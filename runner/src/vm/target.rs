//! A booting or booted VM ([`VmTarget`]): the payload rendered into its run
//! dir, qemu started under the accelerator the config allows, and the
//! watches that end a wait early (qemu exited, a console gone silent).

use super::{AgentDiskKind, VmConfig};
use crate::Error;
use crate::payload::{self, PayloadError, RenderOptions, write_private};
use crate::qemu::accel::{self, Hooks};
use crate::qemu::lan::LanNic;
use crate::qemu::machine::make_run_dir;
use crate::qemu::{
    self, AccelMode, ConsoleMark, ExtraDisk, Machine, MachineSpec, QemuError, console, seed,
};
use lab_agent_client::{Client, ClientBuilder, Progress};
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::agent_disk::{self, AgentDisk};
use lab_agent_cloudinit::{AgentFrom, Arch, Channel, Format, SecretMeta};
use lab_agent_proto::lab::Lab;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A booting or booted VM and its run dir.
/// Dropped, it kills qemu and removes the run dir; [`VmTarget::stop`] and
/// [`VmTarget::leave_running`] end it as asked.
#[derive(Debug)]
pub struct VmTarget {
    /// `None` once stopped or left running.
    pub(super) machine: Option<Machine>,
    /// Emptied once stopped or left running: nothing left for `Drop`.
    pub(super) dir: PathBuf,
    token: String,
    pub(super) token_file: PathBuf,
    /// qemu start → the agent's first answer.
    pub(super) first_answer: OnceLock<Duration>,
    /// Set once the machine was reset for a kernel that stalled before
    /// the guest's system started ([`VmTarget::reset_a_stalled_kernel`]): it is, once.
    reset: OnceLock<()>,
    /// A session's VM: its name.
    vm: Option<String>,
}

/// A VM of a session ([`super::VmSession`]): what it gets beside the
/// lab's payload, and where it lives.
#[derive(Debug)]
pub(super) struct Member {
    /// Its name in the lab (`[[vms]] name`): its hostname.
    pub name: String,
    /// Its run dir (in the session's), which exists.
    pub dir: PathBuf,
    /// Its NIC on the session's network.
    pub lan: LanNic,
    /// The seed's `network-config` and `vendor-data` ([`crate::qemu::lan`]).
    pub seed_extra: Vec<(String, Vec<u8>)>,
}

impl VmTarget {
    /// Renders `lab`'s payload with `agent` (the static build), prepares
    /// overlay and seed, starts qemu under the accelerator `vm.accel` allows
    /// (under `auto`, that takes up to a KVM trial's grace); `keep`: qemu
    /// may outlive this process ([`VmTarget::leave_running`]). Returns as
    /// soon as the guest is booting, or, unproven, once `cancelled()`.
    pub fn start(
        lab: &Lab,
        agent: &Path,
        keep: bool,
        vm: &VmConfig,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<VmTarget, Error> {
        Self::boot(lab, agent, keep, vm, cancelled, None)
    }

    /// [`VmTarget::start`], for one VM or (`member`) a VM of a session:
    /// `lab` is then that VM's view of the lab ([`Lab::for_vm`]).
    pub(super) fn boot(
        lab: &Lab,
        agent: &Path,
        keep: bool,
        vm: &VmConfig,
        cancelled: &dyn Fn() -> bool,
        member: Option<Member>,
    ) -> Result<VmTarget, Error> {
        let arch = super::guest_arch(vm.arch, Some(agent))?;
        super::check_kernel_arch(&vm.guest, arch)?;
        let version = qemu::check_installed(arch)?;
        let dir = match &member {
            Some(m) => m.dir.clone(),
            None => make_run_dir("labctl-try-vm", &lab.name)?,
        };
        let mut target = VmTarget {
            machine: None,
            token: String::new(),
            token_file: dir.join("token"),
            dir,
            first_answer: OnceLock::new(),
            reset: OnceLock::new(),
            vm: member.as_ref().map(|m| m.name.clone()),
        };

        // The payload exactly as `labctl secret` renders it for a Secret.
        let user_data = target
            .render(lab, agent, arch, vm.agent_disk)
            .map_err(|e| {
                let hint = e.hint();
                Error::usage("failed to render the lab's payload")
                    .with_source(e)
                    .hints(hint)
            })?;

        // A session's VM is named after the VM: qemu's `-name`, the
        // guest's hostname (how the other VMs know it) and its instance.
        let name = match &member {
            Some(m) => format!("{}-{}", lab.name, m.name),
            None => lab.name.clone(),
        };
        let mut spec = MachineSpec::new(name.clone(), vm.guest.clone());
        spec.arch = arch;
        spec.memory_mib = vm.memory_mib;
        spec.cpus = vm.cpus;
        spec.disk_gib = vm.disk_gib;
        spec.detached = keep;
        // A real virtio-vsock device, as KubeVirt's `autoattachVSOCK`
        // gives: the payload's agent listens there too.
        spec.vsock = qemu::vsock::find_backend()?;
        if spec.vsock.is_none() {
            eprintln!("{}{}", target.prefix(), qemu::vsock::missing_note());
        }
        if let Some(kind) = vm.agent_disk {
            spec.disks.push(ExtraDisk {
                path: target.dir.join(agent_disk::IMAGE_FILE),
                serial: kind.serial().map(str::to_owned),
            });
        }
        let hostname = seed::hostname(member.as_ref().map_or(&lab.name, |m| &m.name));
        if let Some(m) = member {
            spec.lan = Some(m.lan);
            spec.seed_extra = m.seed_extra;
        }
        let instance = format!(
            "labctl-try-{}-{}",
            qemu::sanitize(&name),
            std::process::id()
        );
        let meta = seed::meta_data(&instance, &hostname);
        let hooks = Hooks {
            say: &|line| eprintln!("{}{line}", target.prefix()),
            cancelled,
        };
        let started = accel::start(&spec, vm.accel, &user_data, &meta, &target.dir, &hooks)?;
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
        let prefix = target.prefix();
        let vsock = machine
            .vsock_url()
            .map_or(String::new(), |url| format!(" and {url}"));
        eprintln!(
            "{prefix}accelerator: {} ({why})\n{prefix}booting `{}` (qemu {}): qemu pid {}, agent \
             at {}{vsock} (token in `{}`), console `{}`",
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

    /// "VM `NAME`: " before what a session's VM says; nothing for one VM.
    pub(super) fn prefix(&self) -> String {
        self.vm
            .as_ref()
            .map_or(String::new(), |vm| format!("VM `{vm}`: "))
    }

    /// Renders the lab's payload with a fresh token and writes it to the
    /// run dir as `labctl secret` would (token, user-data, secret.yaml, all
    /// 0600); returns the user-data for the seed. With `agent_disk`, the
    /// payload pins the agent (`--agent-from disk`) and the agent's disk is
    /// written beside it, as `labctl agent-disk` makes it.
    fn render(
        &mut self,
        lab: &Lab,
        agent: &Path,
        arch: Arch,
        agent_disk: Option<AgentDiskKind>,
    ) -> Result<Vec<u8>, PayloadError> {
        let agent = agent_bin::load(Some(agent), Linkage::Static(arch))?;
        if agent_disk.is_some() {
            let disk = AgentDisk::new([(arch, agent.bytes.clone())])?;
            write_private(
                &self.dir.join(agent_disk::IMAGE_FILE),
                &disk.image(),
                "the agent's disk",
            )?;
        }
        let token = lab_agent_cloudinit::token::generate().map_err(PayloadError::Random)?;
        let opts = RenderOptions {
            arch,
            meta: SecretMeta {
                name: "labctl-try".into(),
                namespace: None,
                labels: Default::default(),
                annotations: Default::default(),
            },
            format: Format::Yaml,
            serial_autologin: true,
            // TCP for `labctl try`'s own calls; vsock too when the guest
            // has a device (one without logs a line and goes on).
            channel: Channel::Both,
            agent_from: if agent_disk.is_some() {
                AgentFrom::Disk
            } else {
                AgentFrom::Embedded
            },
        };
        let rendered = payload::render_logged(lab, &agent, &token, &opts, &mut std::io::stderr())?;
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

    /// qemu's process id (`None` once stopped or left running).
    pub fn qemu_pid(&self) -> Option<u32> {
        self.machine.as_ref().map(Machine::pid)
    }

    /// The VM's run dir (empty once stopped or left running).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn is_running(&self) -> bool {
        self.machine.as_ref().is_some_and(Machine::is_running)
    }

    /// Resolves when qemu exits, with an error that says so.
    pub async fn qemu_exited(&self) -> Error {
        loop {
            if let Some(e) = self.exit_error() {
                return e;
            }
            tokio::time::sleep(WATCH_POLL).await;
        }
    }

    /// The error [`VmTarget::qemu_exited`] resolves with, once qemu has
    /// exited.
    pub(super) fn exit_error(&self) -> Option<Error> {
        let status = self.machine().exit_status()?;
        let stderr = self.machine().qemu_stderr();
        let mut f = Error::unreachable(format!(
            "qemu exited ({status}) before `labctl try` was done"
        ));
        if !stderr.trim().is_empty() {
            f = f.with_source(qemu::tail_lines(stderr.trim(), 5));
        }
        Some(f)
    }

    /// Resolves, with an error, when the serial console has printed
    /// nothing for `limit` and the agent has never answered: a guest that
    /// does not boot (whatever the accelerator) ends here, not at the
    /// boot allowance; so does one whose payload said on the console that
    /// it could not install the agent (`install_error`).
    /// Pending for good once the agent has answered (the setup's own
    /// timeout then bounds the wait).
    pub async fn silent_console(&self, limit: Duration) -> Error {
        let mut silence = self.silence();
        loop {
            if self.first_answer.get().is_some() {
                return std::future::pending().await;
            }
            self.reset_a_stalled_kernel(&mut silence, limit);
            if let Some(e) = self
                .install_error()
                .or_else(|| self.silence_error(&mut silence, limit))
            {
                return e;
            }
            tokio::time::sleep(WATCH_POLL).await;
        }
    }

    /// Resets the machine (QMP `system_reset`), once, saying why, when its
    /// kernel stalled before the guest's system started
    /// ([`console::system_started`]: the kernel and its initramfs only): the
    /// kernel's RCU stall report, or a console silent for `limit` after the
    /// kernel started. Until then the root file system has not been
    /// written and nothing of the payload has run, so booting again loses
    /// nothing, and the stall is the emulator's: under TCG on a loaded
    /// 2-core host, Debian guests with two vCPUs hung bringing up the
    /// second CPU, and in the initramfs with the first halted for good
    /// (RCU stall reports for minutes). After the one reset the boot's
    /// other watches decide.
    pub(super) fn reset_a_stalled_kernel(&self, silence: &mut Silence, limit: Duration) {
        if self.first_answer.get().is_some() || self.reset.get().is_some() {
            return;
        }
        let machine = self.machine();
        let text = machine.console_text();
        if console::system_started(&text) {
            return;
        }
        let why = match console::kernel_stall(&text) {
            Some(line) => format!(
                "the guest's kernel stalled before its system started ({})",
                lab_agent_proto::text::escape(line)
            ),
            None if silence.since.elapsed() >= limit && console::kernel_started(&text) => {
                format!(
                    "the guest's kernel printed nothing for {}s before its system started",
                    limit.as_secs()
                )
            }
            None => return,
        };
        let _ = self.reset.set(());
        let mark = console::mark(machine.console_log_path());
        if let Err(e) = machine.qmp("system_reset", None) {
            // qemu gone or deaf: the watches on qemu and the console say so.
            eprintln!("{}{why}; could not reset the VM: {e}", self.prefix());
            return;
        }
        eprintln!("{}{why}: reset the VM, once", self.prefix());
        (silence.seen, silence.since) = (mark, Instant::now());
    }

    /// The installer's own line on the console when it could not install
    /// the agent (no agent disk, another agent on it, another machine…):
    /// with no agent in the VM nothing would ever answer, so the wait ends
    /// with that line (escaped: the guest wrote it), not at the allowance.
    pub(super) fn install_error(&self) -> Option<Error> {
        if self.first_answer.get().is_some() {
            return None;
        }
        let text = self.machine().console_text();
        let reason = installer_failure(&text)?;
        Some(
            Error::unreachable(format!(
                "the VM's payload could not install the agent: {}",
                lab_agent_proto::text::escape(reason)
            ))
            .hint("the VM's serial console has the rest (kept with the run dir)"),
        )
    }

    /// What [`VmTarget::silence_error`] watches, from qemu's start.
    pub(super) fn silence(&self) -> Silence {
        Silence {
            seen: console::mark(self.machine().console_log_path()),
            since: self.machine().started_at(),
        }
    }

    /// The error [`VmTarget::silent_console`] resolves with, once the
    /// console has been silent for `limit` and the agent never answered.
    pub(super) fn silence_error(&self, silence: &mut Silence, limit: Duration) -> Option<Error> {
        if self.first_answer.get().is_some() {
            return None;
        }
        let now = console::mark(self.machine().console_log_path());
        if now != silence.seen {
            (silence.seen, silence.since) = (now, Instant::now());
        }
        if silence.since.elapsed() < limit {
            return None;
        }
        Some(
            Error::unreachable(format!(
                "the guest printed nothing on its serial console for {}s and its agent \
                 never answered: it is not booting",
                limit.as_secs()
            ))
            .hint("`--boot-silence SECS` waits longer for a guest that is quiet while it boots"),
        )
    }
}

/// How often the watches look at qemu and the console.
pub(super) const WATCH_POLL: Duration = Duration::from_millis(250);

/// A console's end when last seen, and since when it has not moved.
#[derive(Debug)]
pub(super) struct Silence {
    seen: ConsoleMark,
    since: Instant,
}

/// What `labctl try`'s flow asks of the VM while it waits and grades.
impl VmTarget {
    /// A client for the guest's agent, with its token.
    pub fn client(&self) -> Result<Client, lab_agent_client::Error> {
        ClientBuilder::default()
            // Short long-polls: the display shows each state as it comes.
            .long_poll(Duration::from_secs(2))
            // Before the guest listens, qemu's port forward accepts and then
            // says nothing: give up on such an attempt soon and try again.
            .request_timeout(Duration::from_secs(5))
            .build(&self.machine().agent_url(), &self.token)
    }

    /// The checks' `LAB_DIR` in the guest.
    pub fn guest_lab_dir(&self) -> &str {
        lab_agent_proto::GUEST_LAB_DIR
    }

    /// Sees every progress report of the wait (the first answer is timed);
    /// while the agent does not answer, says how far the boot is.
    pub fn on_progress(&self, progress: &Progress) -> Option<String> {
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

    /// The agent is ready: prints how long the boot took.
    pub fn on_ready(&self) {
        let machine = self.machine();
        let ready = machine.elapsed();
        let answered = *self.first_answer.get().unwrap_or(&ready);
        // One VM's line is `vm: …` (the VM tests read it); a session's
        // names its VM.
        let head = self
            .vm
            .as_ref()
            .map_or("vm: ".to_owned(), |_| self.prefix());
        eprintln!(
            "{head}qemu start → agent answered {:.1}s → ready {:.1}s",
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

/// The reason in the installer's failure line (`lab-agent payload:
/// REASON`, `cloud-init/src/installer.rs`'s `fail`), if the console has one;
/// its success line says `installed`.
fn installer_failure(console: &str) -> Option<&str> {
    const HEAD: &str = "lab-agent payload: ";
    console.lines().find_map(|line| {
        let reason = &line[line.find(HEAD)? + HEAD.len()..];
        (!reason.starts_with("installed")).then_some(reason.trim_end())
    })
}

/// "10.0.2" from "QEMU emulator version 10.0.2 (Debian …)".
fn version_number(line: &str) -> &str {
    line.split_once("version ")
        .and_then(|(_, v)| v.split_whitespace().next())
        .unwrap_or(line)
}

/// A tool missing or a file that failed is the caller's to fix; a machine
/// that does not run is the guest's.
impl From<QemuError> for Error {
    fn from(e: QemuError) -> Error {
        match e {
            QemuError::Missing(_) | QemuError::Io { .. } => Error::usage(e.to_string()),
            e => Error::unreachable(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installers_failure_line_is_found_and_its_success_is_not() {
        let ok = "[  40.1] cloud-init[612]: lab-agent payload: installed the agent from its disk, 2 lab file(s)\n";
        assert_eq!(installer_failure(ok), None);
        let bad =
            "x\n[  41.0] cloud-init[612]: lab-agent payload: no agent disk: attach it\r\nmore\n";
        assert_eq!(installer_failure(bad), Some("no agent disk: attach it"));
        assert_eq!(installer_failure("nothing here\n"), None);
    }

    #[test]
    fn qemu_versions_are_short() {
        assert_eq!(
            version_number("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)"),
            "10.0.2"
        );
        assert_eq!(version_number("odd"), "odd");
    }
}
