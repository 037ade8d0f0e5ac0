//! One guest under qemu: start, observe, stop.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::argv::{self, ARM64_UEFI, MachineSpec, RunPaths};
use super::console::{self, ConsoleMark, Watch};
use super::qmp::Qmp;
use super::{Accel, Arch, GUEST_PORT, QemuError, program, run, seed, spawn};

/// How long qemu gets to open its QMP socket.
const QMP_TIMEOUT: Duration = Duration::from_secs(20);

/// How [`Machine::powerdown`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerOff {
    /// The guest shut down after ACPI power-off, taking this long.
    Clean(Duration),
    /// It did not in time; qemu was killed.
    Killed,
}

/// A running qemu. Dropping it kills qemu by its PID, unless
/// [`Machine::leave_running`] was called. The run dir is the caller's.
#[derive(Debug)]
pub struct Machine {
    name: String,
    accel: Accel,
    child: Mutex<Child>,
    pid: u32,
    started: Instant,
    started_wall: SystemTime,
    port: u16,
    paths: RunPaths,
    qmp: Mutex<Option<Qmp>>,
    leave_running: bool,
    /// The vsock device's backend (`vhost-device-vsock`), if the guest
    /// has one: killed after qemu.
    vsock: Option<Mutex<Child>>,
}

impl Machine {
    /// Makes the overlay and the seed (`user_data`, `meta_data`) in `dir`,
    /// which must exist, starts qemu with a free loopback port forwarded to
    /// the guest's agent port, and connects QMP. The guest is then booting.
    pub fn start(
        spec: &MachineSpec,
        user_data: &[u8],
        meta_data: &str,
        dir: &Path,
    ) -> Result<Machine, QemuError> {
        if spec.arch == Arch::Arm64 && !Path::new(ARM64_UEFI).is_file() {
            return Err(QemuError::Missing(format!(
                "`{ARM64_UEFI}` is missing: an arm64 guest boots through UEFI (on Debian install \
                 `qemu-efi-aarch64`)"
            )));
        }
        let paths = RunPaths::new(dir);
        let base = std::fs::canonicalize(spec.guest.base())
            .map_err(|e| QemuError::io(format!("find `{}`", spec.guest.base().display()), e))?;
        let format = match (&spec.base_format, spec.disk_gib) {
            (Some(f), None) => f.clone(),
            _ => {
                let info = image_info(&base)?;
                if let Some(gib) = spec.disk_gib {
                    let wanted = u64::from(gib) << 30;
                    if wanted < info.virtual_size {
                        return Err(QemuError::io(
                            format!("size the disk of `{}`", base.display()),
                            std::io::Error::other(format!(
                                "{gib} GiB is smaller than the image ({:.1} GiB)",
                                info.virtual_size as f64 / f64::from(1u32 << 30)
                            )),
                        ));
                    }
                }
                spec.base_format.clone().unwrap_or(info.format)
            }
        };
        run(Command::new("qemu-img").args(argv::overlay_args(
            &base,
            &format,
            &paths.overlay,
            spec.disk_gib,
        )))?;
        seed::write(
            &paths.seed_dir,
            &paths.seed,
            user_data,
            meta_data,
            &spec.seed_extra,
        )?;

        // The vsock device's backend first: qemu connects to its socket.
        let mut vsock = spec
            .vsock
            .as_deref()
            .map(|program| super::vsock::start_backend(program, &paths, spec.detached))
            .transpose()?;
        let stop_backend = |backend: &mut Option<Child>| {
            if let Some(mut b) = backend.take() {
                let _ = b.kill();
                let _ = b.wait();
            }
        };
        // A free port can be taken between our probe and qemu's bind: retry.
        let mut last_err = None;
        for _attempt in 0..3 {
            let port = free_loopback_port()?;
            let qemu = program(spec.arch);
            let mut cmd = Command::new(qemu);
            cmd.args(argv::qemu_args(spec, &paths, port))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&paths.stderr).map_err(|e| {
                    QemuError::io(format!("create `{}`", paths.stderr.display()), e)
                })?);
            let _ = std::fs::write(&paths.cmdline, format!("{cmd:?}\n"));
            let _ = std::fs::remove_file(&paths.qmp);
            let started_wall = SystemTime::now();
            let started = Instant::now();
            let mut child = spawn::spawn(cmd, spec.detached)
                .map_err(|e| QemuError::io(format!("start `{qemu}`"), e))?;
            match wait_for_qmp(&mut child, &paths) {
                Ok(qmp) => {
                    return Ok(Machine {
                        name: spec.name.clone(),
                        accel: spec.accel,
                        pid: child.id(),
                        child: Mutex::new(child),
                        started,
                        started_wall,
                        port,
                        paths,
                        qmp: Mutex::new(Some(qmp)),
                        leave_running: false,
                        vsock: vsock.take().map(Mutex::new),
                    });
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let port_taken = matches!(&e, QemuError::QemuStart { stderr, .. }
                        if stderr.contains("hostfwd") || stderr.contains("host forwarding"));
                    if !port_taken {
                        stop_backend(&mut vsock);
                        return Err(e);
                    }
                    last_err = Some(e);
                }
            }
        }
        stop_backend(&mut vsock);
        Err(last_err.expect("three attempts"))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// qemu's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The loopback port forwarded to the guest's agent port.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn agent_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `http://127.0.0.1:PORT`, for the client or `labctl --url`.
    pub fn agent_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// With a vsock device: `vsock+unix:///RUN_DIR/vsock.sock?port=8899`,
    /// the agent over the guest's vsock.
    pub fn vsock_url(&self) -> Option<String> {
        self.vsock.as_ref().map(|_| {
            format!(
                "vsock+unix://{}?port={GUEST_PORT}",
                self.paths.vsock.display()
            )
        })
    }

    /// The vsock backend's process id, if the guest has a vsock device.
    pub fn vsock_pid(&self) -> Option<u32> {
        let backend = self.vsock.as_ref()?;
        Some(backend.lock().unwrap_or_else(|e| e.into_inner()).id())
    }

    /// When qemu was started (just before the spawn).
    pub fn started_at(&self) -> Instant {
        self.started
    }

    pub fn started_at_wall(&self) -> SystemTime {
        self.started_wall
    }

    /// Time since qemu was started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn paths(&self) -> &RunPaths {
        &self.paths
    }

    pub fn console_log_path(&self) -> &Path {
        &self.paths.console
    }

    /// The serial console so far.
    pub fn console_text(&self) -> String {
        console::read(&self.paths.console)
    }

    /// The end of the console log now, for [`Machine::wait_for_console_since`].
    pub fn console_mark(&self) -> ConsoleMark {
        console::mark(&self.paths.console)
    }

    /// Waits until `needle` appears anywhere on the console; returns the time
    /// from qemu's start to when it was seen (±50 ms). Fails early when qemu
    /// exits or the kernel panics.
    pub fn wait_for_console(&self, needle: &str, timeout: Duration) -> Result<Duration, QemuError> {
        self.wait_for_console_since(ConsoleMark::default(), needle, timeout)
    }

    /// Like [`Machine::wait_for_console`], but only text printed after `mark`.
    pub fn wait_for_console_since(
        &self,
        mark: ConsoleMark,
        needle: &str,
        timeout: Duration,
    ) -> Result<Duration, QemuError> {
        let exited = || self.exit_status();
        let stderr = || self.qemu_stderr();
        let watch = Watch {
            path: &self.paths.console,
            exited: &exited,
            stderr: &stderr,
        };
        let seen = console::wait_for(&watch, mark, needle, timeout)?;
        Ok(seen.duration_since(self.started))
    }

    /// Runs a QMP command and returns its `return` value.
    pub fn qmp(&self, command: &str, arguments: Option<Value>) -> Result<Value, QemuError> {
        let mut guard = self.qmp.lock().unwrap_or_else(|e| e.into_inner());
        let qmp = guard.as_mut().ok_or_else(|| QemuError::Qmp {
            command: command.into(),
            message: "the QMP connection was lost".into(),
        })?;
        let result = qmp.execute(command, arguments);
        if result.is_err() {
            *guard = None;
        }
        result
    }

    /// `Some(status)` once qemu has exited.
    pub fn exit_status(&self) -> Option<String> {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    pub fn is_running(&self) -> bool {
        self.exit_status().is_none()
    }

    /// ACPI power-off (QMP `system_powerdown`); kills qemu if the guest is
    /// not off within `grace`.
    pub fn powerdown(&self, grace: Duration) -> PowerOff {
        let asked = Instant::now();
        if self.is_running() {
            // A guest still in early boot may ignore ACPI: the kill covers it.
            let _ = self.qmp("system_powerdown", None);
        }
        while asked.elapsed() < grace {
            if !self.is_running() {
                return PowerOff::Clean(asked.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        PowerOff::Killed
    }

    /// SIGKILL to qemu's PID, then reap it; then its vsock backend's.
    pub fn kill(&self) {
        let procs = std::iter::once(&self.child).chain(self.vsock.as_ref());
        for p in procs {
            let mut child = p.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// qemu's own stderr so far.
    pub fn qemu_stderr(&self) -> String {
        std::fs::read_to_string(&self.paths.stderr).unwrap_or_default()
    }

    /// Lets go of qemu without stopping it (`labctl try --keep`); returns
    /// its PID. Only a machine started `detached` survives its parent.
    pub fn leave_running(mut self) -> u32 {
        self.leave_running = true;
        self.qmp.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.pid
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if !self.leave_running {
            self.kill();
        }
    }
}

/// What `qemu-img info` says of a disk image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// `raw`, `qcow2`, …
    pub format: String,
    /// The disk's size as the guest sees it, in bytes.
    pub virtual_size: u64,
}

/// Format and size of a disk image (`qemu-img info`).
pub fn image_info(path: &Path) -> Result<ImageInfo, QemuError> {
    let out = Command::new("qemu-img")
        .args(["info", "-U", "--output=json"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            QemuError::Missing(format!(
                "cannot run `qemu-img`: {e} (on Debian: `apt-get install qemu-utils`)"
            ))
        })?;
    let err = |why: String| {
        QemuError::io(
            format!("read the image `{}`", path.display()),
            std::io::Error::other(why),
        )
    };
    if !out.status.success() {
        return Err(err(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    let v: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| err(format!("`qemu-img info` said no JSON: {e}")))?;
    match (v["format"].as_str(), v["virtual-size"].as_u64()) {
        (Some(format), Some(virtual_size)) => Ok(ImageInfo {
            format: format.to_owned(),
            virtual_size,
        }),
        _ => Err(err(format!(
            "`qemu-img info` named no format and size: {v}"
        ))),
    }
}

fn wait_for_qmp(child: &mut Child, paths: &RunPaths) -> Result<Qmp, QemuError> {
    let started = Instant::now();
    let stderr = || std::fs::read_to_string(&paths.stderr).unwrap_or_default();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(QemuError::QemuStart {
                message: format!("qemu exited at once ({status})"),
                stderr: stderr(),
            });
        }
        if paths.qmp.exists() {
            if let Ok(qmp) = Qmp::connect(&paths.qmp) {
                return Ok(qmp);
            }
        }
        if started.elapsed() > QMP_TIMEOUT {
            return Err(QemuError::QemuStart {
                message: format!("its QMP socket did not appear within {QMP_TIMEOUT:?}"),
                stderr: stderr(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A loopback port nothing listens on right now.
pub fn free_loopback_port() -> Result<u16, QemuError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| QemuError::io("find a free loopback port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| QemuError::io("find a free loopback port", e))
}

/// A fresh run dir `PREFIX-NAME-XXXXXX` under the temp dir, mode 0700 (the
/// seed in it holds the token), created exclusively. The caller owns it
/// from then on (a failed or `--keep` run leaves it for inspection).
pub fn make_run_dir(prefix: &str, name: &str) -> Result<PathBuf, QemuError> {
    let prefix = format!("{prefix}-{}", super::sanitize(name));
    crate::tempdir::create(&prefix, 0o700)
        .map(tempfile::TempDir::keep)
        .map_err(|e| QemuError::io(format!("create a run dir `{prefix}-…`"), e))
}
