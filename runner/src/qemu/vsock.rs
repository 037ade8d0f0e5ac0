//! A guest's virtio-vsock device: qemu's `vhost-user-vsock-pci`, its
//! device model a process of its own, rust-vmm's `vhost-device-vsock`
//! (crates.io), which needs no kernel module on the host (qemu's
//! `vhost-vsock-pci` needs `vhost_vsock` and `/dev/vhost-vsock`, which a
//! host that is itself a VM seldom has) and exposes the guest's vsock as
//! a hybrid vsock socket in the run dir: a client writes `CONNECT PORT\n`
//! and gets `OK PORT\n` and the guest's port (`vsock+unix://…?port=8899`).
//!
//! vhost-user puts the guest's memory in the backend's hands: it must be
//! shared, so a machine with a vsock device has its RAM in a `memfd`
//! (`-object memory-backend-memfd,share=on`), on either accelerator.
//!
//! Where the backend comes from ([`find_backend`]): `$LAB_AGENT_VHOST_DEVICE_VSOCK`,
//! else `vhost-device-vsock` on `PATH` (`cargo install vhost-device-vsock`),
//! else the lab-agent cache, where `tests/vhost-vsock.sh` installs it
//! (`cargo install --root`, nothing system-wide).

use super::argv::RunPaths;
use super::{QemuError, spawn};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable naming the backend's program.
pub const ENV: &str = "LAB_AGENT_VHOST_DEVICE_VSOCK";
/// The program's name.
pub const PROGRAM: &str = "vhost-device-vsock";
/// The guest's CID: every guest has a backend of its own, so the CID is
/// unique where it matters (in its backend), as with Firecracker.
pub const GUEST_CID: u32 = 3;
/// How long the backend gets to open its vhost-user socket.
const SOCKET_WITHIN: Duration = Duration::from_secs(10);

/// The backend's program, if there is one (see the module's doc); `Err`
/// when `$LAB_AGENT_VHOST_DEVICE_VSOCK` names no file.
pub fn find_backend() -> Result<Option<PathBuf>, QemuError> {
    if let Some(p) = std::env::var_os(ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(Some(p))
        } else {
            Err(QemuError::Missing(format!(
                "`{ENV}={}` is not a file: point it at `{PROGRAM}`",
                p.display()
            )))
        };
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(PROGRAM));
    let cached = cache_root().map(|c| c.join("vhost-device-vsock/bin").join(PROGRAM));
    Ok(on_path.chain(cached).find(|p| p.is_file()))
}

/// `$LAB_AGENT_CACHE`, else `$XDG_CACHE_HOME/lab-agent`, else
/// `~/.cache/lab-agent` (the rule of the project's scripts).
fn cache_root() -> Option<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("LAB_AGENT_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("lab-agent")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/lab-agent")))
}

/// What a person is told when there is no backend: the guest boots
/// without a vsock device.
pub fn missing_note() -> String {
    format!(
        "no `{PROGRAM}` (on PATH, in `${ENV}` or the lab-agent cache): the guest gets no vsock \
         device, its agent is reached over TCP only (install it: `cargo install {PROGRAM}`)"
    )
}

/// Starts `program` for the machine in `paths`' run dir and waits for its
/// vhost-user socket. Unless `detached`, it dies with this process.
pub(crate) fn start_backend(
    program: &Path,
    paths: &RunPaths,
    detached: bool,
) -> Result<Child, QemuError> {
    // A machine started again in the same dir (after a KVM trial) finds
    // the last one's sockets: the backend would refuse to bind them.
    for s in [&paths.vhost_user, &paths.vsock] {
        let _ = std::fs::remove_file(s);
    }
    let log = std::fs::File::create(&paths.vsock_log)
        .map_err(|e| QemuError::io(format!("create `{}`", paths.vsock_log.display()), e))?;
    let mut cmd = Command::new(program);
    cmd.arg("--guest-cid")
        .arg(GUEST_CID.to_string())
        .arg("--socket")
        .arg(&paths.vhost_user)
        .arg("--uds-path")
        .arg(&paths.vsock)
        .stdin(Stdio::null())
        .stdout(
            log.try_clone()
                .map_err(|e| QemuError::io("open the vsock log", e))?,
        )
        .stderr(log);
    let mut child = spawn::spawn(cmd, detached)
        .map_err(|e| QemuError::Missing(format!("cannot run `{}`: {e}", program.display())))?;
    let started = Instant::now();
    while !paths.vhost_user.exists() {
        let log = || std::fs::read_to_string(&paths.vsock_log).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            return Err(QemuError::QemuStart {
                message: format!("`{PROGRAM}` exited at once ({status})"),
                stderr: log(),
            });
        }
        if started.elapsed() > SOCKET_WITHIN {
            let _ = child.kill();
            let _ = child.wait();
            return Err(QemuError::QemuStart {
                message: format!("`{PROGRAM}` opened no socket within {SOCKET_WITHIN:?}"),
                stderr: log(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

/// qemu's arguments for the device: the guest's RAM shared (`memfd`), the
/// vhost-user socket, the PCI device.
pub(crate) fn qemu_args(paths: &RunPaths, memory_mib: u32) -> Vec<String> {
    let socket = paths.vhost_user.display().to_string().replace(',', ",,");
    vec![
        "-object".into(),
        format!("memory-backend-memfd,id=mem0,size={memory_mib}M,share=on"),
        "-machine".into(),
        "memory-backend=mem0".into(),
        "-chardev".into(),
        format!("socket,id=vsock0,path={socket}"),
        "-device".into(),
        "vhost-user-vsock-pci,chardev=vsock0".into(),
    ]
}
