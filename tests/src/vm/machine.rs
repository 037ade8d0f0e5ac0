//! One guest under qemu: boot, observe, stop.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::console::{self, ConsoleMark, Watch};
use super::http::{self, HttpAnswer};
use super::lock::VmLock;
use super::qmp::Qmp;
use super::{Accel, VmError, VmImage};

/// The qemu binary (from bookworm-backports, installed by the build script).
pub const QEMU: &str = "qemu-system-x86_64";

/// The guest port the agent listens on; forwarded from a loopback port.
pub const GUEST_PORT: u16 = 8899;

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
    /// Default: [`Accel::select`].
    pub accel: Option<Accel>,
}

impl BootOptions {
    pub fn new(name: impl Into<String>, user_data: impl Into<Vec<u8>>) -> BootOptions {
        BootOptions {
            name: name.into(),
            user_data: user_data.into(),
            instance_id: None,
            meta_data: None,
            memory_mib: 1024,
            cpus: 2,
            extra_append: String::new(),
            extra_qemu_args: Vec::new(),
            accel: None,
        }
    }
}

/// How [`Vm::powerdown`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerOff {
    /// The guest shut down after ACPI power-off, taking this long.
    Clean(Duration),
    /// It did not in time; qemu was killed.
    Killed,
}

/// A running guest. Dropping it kills qemu (by its PID) and removes its temp
/// dir; if the test is panicking the console log is first copied to
/// `target/vm-logs/`.
#[derive(Debug)]
pub struct Vm {
    name: String,
    accel: Accel,
    child: Mutex<Child>,
    started: Instant,
    started_wall: SystemTime,
    port: u16,
    dir: PathBuf,
    console: PathBuf,
    stderr: PathBuf,
    qmp: Mutex<Option<Qmp>>,
    keep_logs: AtomicBool,
    /// Last: released only after qemu is gone.
    _lock: VmLock,
}

impl Vm {
    /// Boots `image` with `opts`. Waits for the VM lock (one VM per
    /// machine), prepares overlay and seed, starts qemu and connects QMP. The
    /// guest is then booting; wait for it with [`Vm::wait_for_console`] or
    /// [`Vm::wait_for_http`].
    pub fn boot(image: &VmImage, opts: BootOptions) -> Result<Vm, VmError> {
        let lock = VmLock::acquire(&opts.name)?;
        let accel = opts.accel.unwrap_or_else(|| Accel::select(image));
        let dir = make_run_dir(&opts.name)?;
        let result = Self::boot_in(image, &opts, accel, &dir, lock);
        if result.is_err() {
            // The error carries qemu's stderr; nothing else here is worth keeping.
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    fn boot_in(
        image: &VmImage,
        opts: &BootOptions,
        accel: Accel,
        dir: &Path,
        lock: VmLock,
    ) -> Result<Vm, VmError> {
        let overlay = dir.join("overlay.qcow2");
        run(Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
            .arg(&image.rootfs)
            .arg(&overlay))?;

        let seed = dir.join("seed.iso");
        write_seed(dir, opts, &seed)?;

        let console = dir.join("console.log");
        let stderr = dir.join("qemu-stderr.log");
        let qmp_path = dir.join("qmp.sock");
        let mut append = String::from("console=ttyS0 root=/dev/vda rw");
        if !opts.extra_append.is_empty() {
            append.push(' ');
            append.push_str(&opts.extra_append);
        }

        // A free port can be taken between our probe and qemu's bind: retry.
        let mut last_err = None;
        for _attempt in 0..3 {
            let port = free_loopback_port()?;
            let mut cmd = Command::new(QEMU);
            cmd.args(["-name", &opts.name])
                .args(["-nodefaults", "-no-user-config", "-display", "none"])
                .args(accel.qemu_args())
                .args(["-smp", &opts.cpus.to_string()])
                .args(["-m", &opts.memory_mib.to_string()])
                .arg("-kernel")
                .arg(&image.kernel)
                .arg("-initrd")
                .arg(&image.initrd)
                .args(["-append", &append])
                .arg("-drive")
                .arg(drive_arg(&overlay, "qcow2", "cache=unsafe"))
                .arg("-drive")
                .arg(drive_arg(&seed, "raw", "readonly=on"))
                .arg("-netdev")
                .arg(format!(
                    "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:{GUEST_PORT}"
                ))
                .args(["-device", "virtio-net-pci,netdev=net0,romfile="])
                .args(["-device", "virtio-rng-pci"])
                .arg("-serial")
                .arg(format!("file:{}", console.display()))
                .arg("-qmp")
                .arg(format!("unix:{},server=on,wait=off", qmp_path.display()))
                .args(&opts.extra_qemu_args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(
                    std::fs::File::create(&stderr)
                        .map_err(|e| VmError::io(format!("create `{}`", stderr.display()), e))?,
                );
            let _ = std::fs::write(dir.join("qemu-cmdline.txt"), format!("{cmd:?}\n"));

            let _ = std::fs::remove_file(&qmp_path);
            let started_wall = SystemTime::now();
            let started = Instant::now();
            let mut child =
                super::spawn::spawn(cmd).map_err(|e| VmError::io(format!("start `{QEMU}`"), e))?;
            match wait_for_qmp(&mut child, &qmp_path, &stderr) {
                Ok(qmp) => {
                    eprintln!(
                        "vm[{}]: qemu pid {} ({accel:?}), agent port 127.0.0.1:{port}, console `{}`",
                        opts.name,
                        child.id(),
                        console.display()
                    );
                    return Ok(Vm {
                        name: opts.name.clone(),
                        accel,
                        child: Mutex::new(child),
                        started,
                        started_wall,
                        port,
                        dir: dir.to_owned(),
                        console,
                        stderr,
                        qmp: Mutex::new(Some(qmp)),
                        keep_logs: AtomicBool::new(false),
                        _lock: lock,
                    });
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let port_taken = matches!(&e, VmError::QemuStart { stderr, .. }
                        if stderr.contains("hostfwd") || stderr.contains("host forwarding"));
                    if !port_taken {
                        return Err(e);
                    }
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.expect("three attempts"))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// The loopback port forwarded to the guest's 8899.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn agent_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `http://127.0.0.1:PORT`, for the client crate or `labctl --url`.
    pub fn agent_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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

    /// The VM's temp dir (overlay, seed, console log, QMP socket).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn console_log_path(&self) -> &Path {
        &self.console
    }

    /// The serial console so far.
    pub fn console_text(&self) -> String {
        console::read(&self.console)
    }

    /// The end of the console log now, for [`Vm::wait_for_console_since`].
    pub fn console_mark(&self) -> ConsoleMark {
        console::mark(&self.console)
    }

    /// Waits until `needle` appears anywhere on the console; returns the time
    /// from qemu's start to when it was seen (±50 ms).
    pub fn wait_for_console(&self, needle: &str, timeout: Duration) -> Result<Duration, VmError> {
        self.wait_for_console_since(ConsoleMark::default(), needle, timeout)
    }

    /// Like [`Vm::wait_for_console`], but only text printed after `mark`.
    pub fn wait_for_console_since(
        &self,
        mark: ConsoleMark,
        needle: &str,
        timeout: Duration,
    ) -> Result<Duration, VmError> {
        let exited = || self.exit_status();
        let stderr = || self.qemu_stderr();
        let watch = Watch {
            path: &self.console,
            exited: &exited,
            stderr: &stderr,
        };
        let seen = console::wait_for(&watch, mark, needle, timeout)?;
        Ok(seen.duration_since(self.started))
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

    /// Runs a QMP command and returns its `return` value.
    pub fn qmp(&self, command: &str, arguments: Option<Value>) -> Result<Value, VmError> {
        let mut guard = self.qmp.lock().unwrap_or_else(|e| e.into_inner());
        let qmp = guard.as_mut().ok_or_else(|| VmError::Qmp {
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

    /// ACPI power-off (QMP `system_powerdown`); kills qemu if the guest is not
    /// off within `grace`.
    pub fn powerdown(&self, grace: Duration) -> Result<PowerOff, VmError> {
        let asked = Instant::now();
        if self.is_running() {
            // A guest still in early boot may ignore ACPI: the kill covers it.
            let _ = self.qmp("system_powerdown", None);
        }
        while asked.elapsed() < grace {
            if !self.is_running() {
                return Ok(PowerOff::Clean(asked.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        Ok(PowerOff::Killed)
    }

    /// SIGKILL to qemu's PID, then reap it.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
        }
        let _ = child.wait();
    }

    /// Keep the console log in `target/vm-logs/` even if the test passes.
    pub fn keep_logs(&self) {
        self.keep_logs.store(true, Ordering::Relaxed);
    }

    /// qemu's own stderr so far.
    pub fn qemu_stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn save_logs(&self) -> Option<PathBuf> {
        let dir = vm_logs_dir();
        std::fs::create_dir_all(&dir).ok()?;
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let base = format!("{}-{stamp}", sanitize(&self.name));
        let log = dir.join(format!("{base}.log"));
        std::fs::copy(&self.console, &log).ok()?;
        let stderr = self.qemu_stderr();
        if !stderr.trim().is_empty() {
            let _ = std::fs::write(dir.join(format!("{base}.qemu-stderr.log")), stderr);
        }
        Some(log)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.kill();
        self.qmp.lock().unwrap_or_else(|e| e.into_inner()).take();
        let failed = std::thread::panicking();
        let keep = failed
            || self.keep_logs.load(Ordering::Relaxed)
            || std::env::var_os("LAB_AGENT_VM_KEEP_LOGS").is_some_and(|v| v != "0");
        if keep {
            match self.save_logs() {
                Some(log) => eprintln!("vm[{}]: console log kept: `{}`", self.name, log.display()),
                None => {
                    eprintln!(
                        "vm[{}]: could not copy the console log; kept `{}`",
                        self.name,
                        self.dir.display()
                    );
                    return;
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn make_run_dir(name: &str) -> Result<PathBuf, VmError> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "lab-agent-vm-{}-{}-{nanos:08x}",
        sanitize(name),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| VmError::io(format!("create `{}`", dir.display()), e))?;
    Ok(dir)
}

/// The NoCloud seed: an ISO9660 volume `cidata` with `user-data` and
/// `meta-data`, attached as a read-only virtio disk.
fn write_seed(dir: &Path, opts: &BootOptions, seed: &Path) -> Result<(), VmError> {
    let seed_dir = dir.join("seed");
    let write = |name: &str, data: &[u8]| {
        let path = seed_dir.join(name);
        std::fs::write(&path, data)
            .map_err(|e| VmError::io(format!("write `{}`", path.display()), e))
    };
    std::fs::create_dir_all(&seed_dir)
        .map_err(|e| VmError::io(format!("create `{}`", seed_dir.display()), e))?;
    let meta = match &opts.meta_data {
        Some(meta) => meta.clone(),
        None => {
            let id = opts
                .instance_id
                .clone()
                .unwrap_or_else(|| format!("{}-{}", sanitize(&opts.name), dir_suffix(dir)));
            format!(
                "instance-id: {id}\nlocal-hostname: {}\n",
                hostname(&opts.name)
            )
        }
    };
    write("user-data", &opts.user_data)?;
    write("meta-data", meta.as_bytes())?;
    run(Command::new("cloud-localds")
        .arg(seed)
        .arg(seed_dir.join("user-data"))
        .arg(seed_dir.join("meta-data")))
}

fn drive_arg(path: &Path, format: &str, extra: &str) -> String {
    // qemu option values escape a comma by doubling it.
    let file = path.display().to_string().replace(',', ",,");
    format!("file={file},if=virtio,format={format},{extra}")
}

fn wait_for_qmp(child: &mut Child, qmp_path: &Path, stderr: &Path) -> Result<Qmp, VmError> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(VmError::QemuStart {
                message: format!("qemu exited at once ({status})"),
                stderr: std::fs::read_to_string(stderr).unwrap_or_default(),
            });
        }
        if qmp_path.exists() {
            if let Ok(qmp) = Qmp::connect(qmp_path) {
                return Ok(qmp);
            }
        }
        if started.elapsed() > Duration::from_secs(20) {
            return Err(VmError::QemuStart {
                message: "its QMP socket did not appear within 20 s".into(),
                stderr: std::fs::read_to_string(stderr).unwrap_or_default(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn free_loopback_port() -> Result<u16, VmError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| VmError::io("find a free loopback port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| VmError::io("find a free loopback port", e))
}

fn run(cmd: &mut Command) -> Result<(), VmError> {
    let what = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| VmError::io(format!("run {what}"), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(VmError::io(
            format!("run {what}"),
            std::io::Error::other(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        ))
    }
}

/// Where kept console logs go: `<cargo target dir>/vm-logs/`. The test binary
/// lives under the target dir, which cargo marks with `CACHEDIR.TAG`.
fn vm_logs_dir() -> PathBuf {
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

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// A valid hostname label from the VM's name.
fn hostname(name: &str) -> String {
    let h: String = sanitize(name).replace('_', "-").chars().take(63).collect();
    let h = h.trim_matches('-');
    if h.is_empty() {
        "labvm".into()
    } else {
        h.to_ascii_lowercase()
    }
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
    fn hostnames_are_valid_labels() {
        assert_eq!(hostname("vm_boot 0"), "vm-boot-0");
        assert_eq!(hostname("--"), "labvm");
        assert_eq!(hostname(&"x".repeat(100)).len(), 63);
    }

    #[test]
    fn drive_paths_escape_commas() {
        assert_eq!(
            drive_arg(Path::new("/tmp/a,b.qcow2"), "qcow2", "cache=unsafe"),
            "file=/tmp/a,,b.qcow2,if=virtio,format=qcow2,cache=unsafe"
        );
    }
}
