//! The throwaway sandbox of a local `labctl try`: the agent, the lab's
//! setup and every check run in a copy of this machine that nothing
//! written inside outlives, and that cannot outlive `labctl`.
//!
//! Three processes, each the parent of the next:
//! ```text
//! labctl try                 the host's namespaces
//!  └─ labctl __sandbox       the keeper: private mount, UTS, IPC and network
//!      │                     namespaces (unshared before its exec), holds
//!      │                     the overlay mounts; PR_SET_PDEATHSIG = SIGHUP
//!      └─ init (PID 1)       a private PID namespace and a nested mount
//!          │                 namespace pivoted into the overlay; reaps;
//!          │                 PR_SET_PDEATHSIG = SIGKILL
//!          └─ lab-agent serve  the setup, the checks, whatever they start
//! ```
//! When `labctl` dies, however (even `kill -9`), the keeper gets SIGHUP,
//! kills init (the kernel then kills every process of the PID namespace)
//! and removes the try dir; when the keeper dies, init gets SIGKILL. The
//! mounts live only in the keeper's and init's mount namespaces, so they go
//! with the last of their processes: nothing is ever mounted on the host.
//!
//! The root is an overlay of each of the host's disk file systems (the
//! root's and any other, e.g. a separate `/home`) — or, with
//! `--sandbox-image`, of a guest image's root file system, mounted
//! read-only in the keeper's namespace (`image.rs`) — with the upper and work
//! dirs on a tmpfs of the keeper's (overlayfs refuses an upper dir inside
//! its lower one, and a tmpfs upper cannot fill the host's disk for good).
//! `/tmp`, `/var/tmp`, `/run`, `/dev/shm` are fresh tmpfs, `/dev` holds only
//! the harmless device nodes (no disks: a block device cannot be mounted),
//! `/proc` is the PID namespace's own with `/proc/sys` read-only except
//! `/proc/sys/net` (the network namespace's own), `/sys` is read-only, and
//! the bounding set drops `CAP_SYS_MODULE`, `CAP_SYS_RAWIO`, `CAP_SYS_TIME`,
//! `CAP_MKNOD`, `CAP_SYSLOG` and `CAP_DAC_READ_SEARCH`: a lab cannot load a
//! module, set a kernel sysctl or the clock, make a disk's device node or
//! open a host file by handle. It guards the machine against a lab's
//! accidents, not against a hostile lab (root inside keeps
//! `CAP_SYS_ADMIN`): a lab is its author's own code.
//!
//! The try dir is bound at its own path inside (not recursively, so the
//! keeper's tmpfs is not seen from inside): the token, the agent's state
//! dir, the staged `$LAB_DIR` are written straight to the host's copy, never
//! to the overlay, so they are not "changes". The agent binary is bound on
//! `DIR/lab-agent`, whatever file system it lives on.
//!
//! The network namespace has only loopback, up. `labctl` reaches the agent
//! through `NetnsDialer`: a socket is created on a thread that joined the
//! namespace, and a socket keeps the namespace it was created in.

use nix::libc;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, chdir, fork, pivot_root};
use std::ffi::{CString, OsString};
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod cmdline;
mod image;
pub(crate) use cmdline::keeper_command;
pub use cmdline::{KEEPER_VERB, KeeperArgs, VmOptions, run_keeper_if_asked};
pub use image::Image;

/// The namespaces the keeper unshares before its exec (its children are
/// in the new PID namespace; init adds a nested mount namespace).
const NAMESPACES: CloneFlags = CloneFlags::CLONE_NEWNS
    .union(CloneFlags::CLONE_NEWUTS)
    .union(CloneFlags::CLONE_NEWIPC)
    .union(CloneFlags::CLONE_NEWNET)
    .union(CloneFlags::CLONE_NEWPID);

/// In the try dir: an empty dir on the host; in the keeper's namespace a
/// tmpfs with `root/` (the sandbox's root), `upperN/` and `workN/`.
pub(crate) const MOUNT_DIR: &str = "sandbox";
/// In the try dir: an empty file the agent binary is bound on, inside.
pub(crate) const AGENT_FILE: &str = "lab-agent";
/// In the try dir: the keeper's PID (written by `labctl`).
pub(crate) const KEEPER_PID_FILE: &str = "sandbox.pid";
/// In the try dir: init's PID as the host sees it (written by the keeper).
pub(crate) const INIT_PID_FILE: &str = "init.pid";
/// In the try dir: one line per overlay, `N<TAB>MOUNTPOINT[<TAB>LOWER]`
/// (the keeper's; `LOWER`, in its namespace, when not `MOUNTPOINT`).
pub(crate) const LAYERS_FILE: &str = "layers";
/// In the try dir: the hosts file bound on `/etc/hosts` inside
/// ([`VmOptions::hosts`]).
pub(crate) const HOSTS_FILE: &str = "hosts";
/// In the try dir: written by the keeper once it no longer dies with
/// `labctl` (`--keep`).
pub(crate) const KEPT_FILE: &str = "kept";

/// Capabilities init drops from the bounding set before the agent's exec:
/// what would reach the host's kernel or disks from inside.
/// `CAP_DAC_READ_SEARCH` too: its `open_by_handle_at` opens any file of a
/// host file system by handle, past every mount (Docker drops it for that).
/// (`linux/capability.h`: `CAP_DAC_READ_SEARCH` 2, `CAP_SYS_MODULE` 16,
/// `CAP_SYS_RAWIO` 17, `CAP_SYS_TIME` 25, `CAP_MKNOD` 27, `CAP_SYSLOG` 34.)
const DROPPED_CAPS: [libc::c_ulong; 6] = [2, 16, 17, 25, 27, 34];

/// Mount points never carried into the sandbox as overlays: those get
/// fresh mounts of their own, or none.
const PRIVATE_TREES: [&str; 6] = ["/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp"];

/// File systems that hold no files of the machine's own (virtual, or
/// memory that a tmpfs of the sandbox replaces).
const VIRTUAL_FS: [&str; 22] = [
    "proc",
    "sysfs",
    "tmpfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "mqueue",
    "debugfs",
    "tracefs",
    "securityfs",
    "pstore",
    "bpf",
    "configfs",
    "fusectl",
    "hugetlbfs",
    "autofs",
    "binfmt_misc",
    "efivarfs",
    "rpc_pipefs",
    "nsfs",
    "ramfs",
];

/// Whether this process runs as root, as building a sandbox needs
/// (namespaces, mounts) and running a lab's setup and checks in it does.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Opens the agent's connections inside the keeper's network namespace.
#[derive(Debug, Clone)]
pub(crate) struct NetnsDialer {
    netns: Arc<OwnedFd>,
}

impl NetnsDialer {
    /// The network namespace of process `keeper`.
    pub(crate) fn new(keeper: u32) -> io::Result<NetnsDialer> {
        let file = fs::File::open(format!("/proc/{keeper}/ns/net"))?;
        Ok(NetnsDialer {
            netns: Arc::new(file.into()),
        })
    }
}

impl lab_agent_client::Dialer for NetnsDialer {
    fn dial(&self, host: &str, port: u16) -> lab_agent_client::Dialing {
        let netns = self.netns.clone();
        let host = host.to_owned();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread of its own: `setns` moves the calling thread for good,
        // and a runtime's thread must stay in the host's namespace.
        let spawned = std::thread::Builder::new()
            .name("sandbox-dial".into())
            .spawn(move || {
                let connected = setns(&*netns, CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from)
                    .and_then(|()| std::net::TcpStream::connect((host.as_str(), port)))
                    .and_then(|s| s.set_nonblocking(true).map(|()| s));
                let _ = tx.send(connected);
            });
        Box::pin(async move {
            spawned?;
            let stream = rx
                .await
                .map_err(|_| io::Error::other("the sandbox's dialing thread died"))??;
            tokio::net::TcpStream::from_std(stream)
        })
    }
}

/// `labctl __sandbox`: the keeper. Never returns.
pub fn keeper_main(args: &KeeperArgs) -> ! {
    let code = match keeper(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("labctl sandbox: {e}");
            let _ = remove_try_dir(&args.dir);
            125
        }
    };
    std::process::exit(code)
}

/// The set of `signals`, for blocking them and then waiting for them
/// synchronously (`sigwait`), the way the keeper and init take theirs.
fn signal_set(signals: &[Signal]) -> SigSet {
    let mut set = SigSet::empty();
    for &s in signals {
        set.add(s);
    }
    set
}

fn keeper(args: &KeeperArgs) -> Result<i32, String> {
    let dir = &args.dir;
    let signals = signal_set(&[
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ]);
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&signals), None)
        .map_err(|e| format!("failed to block signals: {e}"))?;

    let root = prepare_root(dir, &args.agent, args.image.as_ref())?;
    if args.vm.hosts {
        // A bind follows a symlink, which here would resolve on the host.
        let hosts = root.join("etc/hosts");
        if !fs::symlink_metadata(&hosts).is_ok_and(|m| m.is_file()) {
            return Err(format!(
                "`/etc/hosts` is not a regular file on this machine: a session's sandboxes \
                 bind their hosts file on it (`{}`)",
                hosts.display()
            ));
        }
        bind(&dir.join(HOSTS_FILE), &hosts, MsFlags::empty())?;
    }
    if let Some(name) = &args.vm.hostname {
        // The keeper's own UTS namespace, which init and the agent share.
        nix::unistd::sethostname(name)
            .map_err(|e| format!("failed to set the hostname `{name}`: {e}"))?;
    }
    if args.vm.hold {
        loop {
            match signals
                .wait()
                .map_err(|e| format!("failed to wait for signals: {e}"))?
            {
                Signal::SIGUSR1 => break,
                signal @ (Signal::SIGHUP | Signal::SIGTERM) => {
                    let _ = remove_try_dir(dir);
                    return Ok(128 + signal as i32);
                }
                _ => {}
            }
        }
    }
    // Init learns that the keeper died before its parent-death signal was
    // set from this pipe's end: the keeper holds the only writer.
    let (alive_r, alive_w) =
        nix::unistd::pipe().map_err(|e| format!("failed to make a pipe: {e}"))?;
    // SAFETY: the keeper is single-threaded (no runtime, no other thread).
    let init = match unsafe { fork() }.map_err(|e| format!("failed to fork: {e}"))? {
        ForkResult::Child => {
            drop(alive_w);
            let e = init_main(&root, dir, &args.args, alive_r);
            eprintln!("labctl sandbox: {e}");
            std::process::exit(125);
        }
        ForkResult::Parent { child } => child,
    };
    drop(alive_r);
    // Kept open (not close-on-exec matters not: the keeper never execs).
    let _alive_w = alive_w;
    write(&dir.join(INIT_PID_FILE), &init.to_string())?;

    loop {
        let signal = signals
            .wait()
            .map_err(|e| format!("failed to wait for signals: {e}"))?;
        match signal {
            Signal::SIGCHLD => loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(pid, code)) if pid == init => return Ok(code),
                    Ok(WaitStatus::Signaled(pid, sig, _)) if pid == init => {
                        return Ok(128 + sig as i32);
                    }
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => {}
                }
            },
            Signal::SIGTERM => {
                let _ = kill(init, Signal::SIGTERM);
            }
            Signal::SIGHUP => {
                // `labctl` is gone: nobody else will clean up.
                let _ = kill(init, Signal::SIGKILL);
                let _ = waitpid(init, None);
                let _ = remove_try_dir(dir);
                return Ok(129);
            }
            Signal::SIGUSR2 => {
                nix::sys::prctl::set_pdeathsig(None)
                    .map_err(|e| format!("failed to outlive labctl: {e}"))?;
                write(&dir.join(KEPT_FILE), "")?;
            }
            // Ctrl-C is `labctl`'s to handle; it stops us in order.
            _ => {}
        }
    }
}

/// Removes the try dir from the keeper's namespace: its own tmpfs first.
fn remove_try_dir(dir: &Path) -> io::Result<()> {
    let _ = umount2(&dir.join(MOUNT_DIR), MntFlags::MNT_DETACH);
    fs::remove_dir_all(dir)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("failed to write `{}`: {e}", path.display()))
}

fn mount_err(what: &str, target: &Path, e: nix::Error) -> String {
    format!("failed to mount {what} on `{}`: {e}", target.display())
}

fn mkdir(path: &Path, mode: u32) -> Result<(), String> {
    fs::create_dir_all(path)
        .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(mode)))
        .map_err(|e| format!("failed to create `{}`: {e}", path.display()))
}

fn tmpfs(target: &Path, mode: &str) -> Result<(), String> {
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(format!("mode={mode}").as_str()),
    )
    .map_err(|e| mount_err("a tmpfs", target, e))
}

fn bind(source: &Path, target: &Path, flags: MsFlags) -> Result<(), String> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | flags,
        None::<&str>,
    )
    .map_err(|e| {
        format!(
            "failed to bind `{}` on `{}`: {e}",
            source.display(),
            target.display()
        )
    })
}

fn remount_ro(target: &Path) -> Result<(), String> {
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(|e| format!("failed to make `{}` read-only: {e}", target.display()))
}

/// `host` (absolute) under `root`.
fn inside(root: &Path, host: &Path) -> PathBuf {
    root.join(host.strip_prefix("/").unwrap_or(host))
}

/// The keeper's mounts: the overlays (of this machine's disks, or of
/// `image`'s root file system), the private trees, the try dir. Returns
/// the sandbox's root.
fn prepare_root(dir: &Path, agent: &Path, image: Option<&Image>) -> Result<PathBuf, String> {
    // Nothing mounted from here on may reach the host's namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("failed to make the mounts private: {e}"))?;
    let top = dir.join(MOUNT_DIR);
    tmpfs(&top, "0700")?;
    let root = top.join("root");
    mkdir(&root, 0o755)?;

    // (the machine's path, the lower dir): `/` is the image's root, or
    // the machine's with each of its other disks.
    let mut layers = Vec::new();
    if let Some(image) = image {
        let lower = top.join("image");
        mkdir(&lower, 0o755)?;
        image::mount_image(image, &lower)?;
        layers.push((PathBuf::from("/"), lower));
    } else {
        layers.push((PathBuf::from("/"), PathBuf::from("/")));
        layers.extend(host_disk_mounts(dir).into_iter().map(|m| (m.clone(), m)));
    }
    // An image's device nodes are not the sandbox's to open.
    let flags = match image {
        Some(_) => MsFlags::MS_NODEV,
        None => MsFlags::empty(),
    };
    let mut written = Vec::new();
    for (i, (path, lower)) in layers.iter().enumerate() {
        let (upper, work) = (top.join(format!("upper{i}")), top.join(format!("work{i}")));
        mkdir(&upper, 0o755)?;
        mkdir(&work, 0o700)?;
        let target = inside(&root, path);
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        );
        match mount(
            Some("overlay"),
            &target,
            Some("overlay"),
            flags,
            Some(opts.as_str()),
        ) {
            // The lower dir too when it is not the machine's own path.
            Ok(()) if path == lower => written.push(format!("{i}\t{}\n", path.display())),
            Ok(()) => written.push(format!("{i}\t{}\t{}\n", path.display(), lower.display())),
            Err(e) if i == 0 => return Err(mount_err("an overlay of `/`", &target, e)),
            // A file system overlayfs cannot stack on (a FUSE mount, NFS
            // without the features): seen, never written.
            Err(e) => {
                eprintln!(
                    "labctl sandbox: `{}` is read-only inside (no overlay on it: {e})",
                    lower.display()
                );
                if bind(lower, &target, MsFlags::empty()).is_ok() {
                    let _ = remount_ro(&target);
                }
            }
        }
    }
    write(&dir.join(LAYERS_FILE), &written.concat())?;

    for (path, mode) in [("tmp", "1777"), ("var/tmp", "1777"), ("run", "0755")] {
        let target = root.join(path);
        if target.is_dir() {
            tmpfs(&target, mode)?;
        }
    }
    mkdir(&root.join("run/lock"), 0o1777)?;
    prepare_dev(&root.join("dev"))?;
    let sys = root.join("sys");
    let ro = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if mount(Some("sysfs"), &sys, Some("sysfs"), ro, None::<&str>).is_err() {
        bind(Path::new("/sys"), &sys, MsFlags::MS_REC)?;
        remount_ro(&sys)?;
    }

    // The try dir, at its own path; not recursive, so `MOUNT_DIR` is the
    // host's empty dir inside.
    let inner = inside(&root, dir);
    mkdir(&inner, 0o711)?;
    bind(dir, &inner, MsFlags::empty())?;
    bind(agent, &inner.join(AGENT_FILE), MsFlags::empty())?;
    Ok(root)
}

/// The host's mounts of disk file systems other than `/`, in mount order
/// (the last mount on a path is the one seen).
fn host_disk_mounts(dir: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out: Vec<PathBuf> = Vec::new();
    for line in info.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mountpoint), Some(fstype)) = (fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        let mountpoint = PathBuf::from(unescape_mountinfo(mountpoint));
        let private = PRIVATE_TREES.iter().any(|t| mountpoint.starts_with(t))
            || mountpoint.starts_with(dir)
            || mountpoint == Path::new("/");
        if private || VIRTUAL_FS.contains(fstype) {
            out.retain(|m| !m.starts_with(&mountpoint));
            continue;
        }
        // A later mount on the same path, or above it, hides the earlier.
        out.retain(|m| !m.starts_with(&mountpoint));
        out.push(mountpoint);
    }
    out
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    std::os::unix::ffi::OsStringExt::from_vec(out)
}

/// A `/dev` of harmless nodes, as bubblewrap's `--dev`: no disk, no
/// console, no memory.
fn prepare_dev(dev: &Path) -> Result<(), String> {
    tmpfs(dev, "0755")?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let target = dev.join(node);
        fs::write(&target, "")
            .map_err(|e| format!("failed to create `{}`: {e}", target.display()))?;
        bind(&Path::new("/dev").join(node), &target, MsFlags::empty())?;
    }
    let pts = dev.join("pts");
    mkdir(&pts, 0o755)?;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .map_err(|e| mount_err("devpts", &pts, e))?;
    let shm = dev.join("shm");
    mkdir(&shm, 0o1777)?;
    tmpfs(&shm, "1777")?;
    for (link, to) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(to, dev.join(link))
            .map_err(|e| format!("failed to create `{}`: {e}", dev.join(link).display()))?;
    }
    Ok(())
}

/// PID 1 of the sandbox: finishes the root, starts the agent, reaps, and
/// ends with the agent (which ends everything in the PID namespace).
/// Returns only on an error.
fn init_main(root: &Path, dir: &Path, agent_args: &[OsString], alive: OwnedFd) -> String {
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        return format!("failed to set the parent-death signal: {e}");
    }
    // The keeper died already (its PID is not visible from here, so
    // `getppid` cannot tell): its end of the pipe is closed.
    let mut poll = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&alive),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    if unsafe { libc::poll(&mut poll, 1, 0) } != 0 {
        std::process::exit(125);
    }
    drop(alive);
    if let Err(e) = enter_root(root) {
        return e;
    }
    if let Err(e) = loopback_up() {
        return format!("failed to bring up loopback: {e}");
    }
    for cap in DROPPED_CAPS {
        // SAFETY: a plain prctl; a capability this kernel lacks is EINVAL.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    let agent = dir.join(AGENT_FILE);
    let argv: Vec<CString> = std::iter::once(CString::new("lab-agent").expect("no NUL"))
        .chain(
            agent_args
                .iter()
                .filter_map(|a| CString::new(a.as_bytes()).ok()),
        )
        .collect();
    let Ok(agent_c) = CString::new(agent.as_os_str().as_bytes()) else {
        return "the agent's path has a NUL byte".into();
    };
    let signals = signal_set(&[
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ]);
    // SAFETY: init is single-threaded.
    let agent_pid = match unsafe { fork() } {
        Err(e) => return format!("failed to fork: {e}"),
        Ok(ForkResult::Child) => {
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
            let e = nix::unistd::execv(&agent_c, &argv).unwrap_err();
            eprintln!("labctl sandbox: failed to run the agent: {e}");
            std::process::exit(127);
        }
        Ok(ForkResult::Parent { child }) => child,
    };
    loop {
        let Ok(signal) = signals.wait() else {
            continue;
        };
        match signal {
            Signal::SIGCHLD => loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(pid, code)) if pid == agent_pid => {
                        std::process::exit(code)
                    }
                    Ok(WaitStatus::Signaled(pid, sig, _)) if pid == agent_pid => {
                        std::process::exit(128 + sig as i32)
                    }
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => {}
                }
            },
            _ => {
                let _ = kill(agent_pid, Signal::SIGTERM);
            }
        }
    }
}

/// A mount namespace of init's own (the keeper keeps the full view, for
/// `labctl` to read the upper dirs), `/proc`, then the pivot.
fn enter_root(root: &Path) -> Result<(), String> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("failed to unshare the mounts: {e}"))?;
    let proc = root.join("proc");
    mount(
        Some("proc"),
        &proc,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| mount_err("proc", &proc, e))?;
    // Kernel-wide sysctls are read-only; the network namespace's own stay
    // writable (bound after the read-only one, or it would hide them).
    let sys = proc.join("sys");
    bind(&sys, &sys, MsFlags::empty())?;
    remount_ro(&sys)?;
    // A bind copies its source's read-only flag: made writable again.
    let net = sys.join("net");
    bind(&net, &net, MsFlags::empty())?;
    mount(
        None::<&str>,
        &net,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT,
        None::<&str>,
    )
    .map_err(|e| format!("failed to make `{}` writable: {e}", net.display()))?;
    let sysrq = proc.join("sysrq-trigger");
    if sysrq.exists() {
        bind(Path::new("/dev/null"), &sysrq, MsFlags::empty())?;
    }
    chdir(root).map_err(|e| format!("failed to enter `{}`: {e}", root.display()))?;
    pivot_root(".", ".").map_err(|e| format!("failed to pivot into the sandbox: {e}"))?;
    umount2(".", MntFlags::MNT_DETACH)
        .map_err(|e| format!("failed to detach the host's root: {e}"))?;
    chdir("/").map_err(|e| format!("failed to enter `/`: {e}"))?;
    Ok(())
}

/// `ip link set lo up`, by ioctl.
fn loopback_up() -> io::Result<()> {
    // SAFETY: plain system calls on a socket this function owns; `ifreq`
    // is zeroed, then named.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        let mut result = Ok(());
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            result = Err(io::Error::last_os_error());
        } else {
            ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr) < 0 {
                result = Err(io::Error::last_os_error());
            }
        }
        libc::close(fd);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(
            unescape_mountinfo("/mnt/a\\040b\\011c"),
            OsString::from("/mnt/a b\tc")
        );
        assert_eq!(unescape_mountinfo("/plain\\"), OsString::from("/plain\\"));
    }

    #[test]
    fn only_disks_outside_the_private_trees_are_layers() {
        // Whatever this machine mounts: never `/`, a virtual file system,
        // or anything under the trees the sandbox replaces.
        for m in host_disk_mounts(Path::new("/nonexistent/try")) {
            assert_ne!(m, Path::new("/"));
            assert!(!PRIVATE_TREES.iter().any(|t| m.starts_with(t)), "{m:?}");
        }
    }
}
