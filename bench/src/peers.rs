//! Starting the programs under test on loopback: lab-agent, OpenSSH's sshd
//! (temp host and client keys, key auth only) and qemu-guest-agent.

use crate::children::{Proc, User, prepare};
use lab_agent_proto::addr_file;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A running `lab-agent serve`.
#[derive(Debug)]
pub struct Agent {
    pub proc: Proc,
    pub addr: SocketAddr,
}

/// What an agent instance watches.
#[derive(Debug, Clone)]
pub struct AgentOpts<'a> {
    pub name: &'a str,
    pub state_dir: &'a Path,
    /// `None`: `--no-cloud-init`.
    pub cloud_init_dir: Option<&'a Path>,
    /// Pin to this CPU with taskset.
    pub cpu: Option<u32>,
    /// `--cgroup PATH`: a cgroup per exec (`None`: the default, `auto`,
    /// which is none where the bench runs outside a delegated unit).
    pub cgroup: Option<&'a Path>,
}

/// A temp sub-cgroup of this machine's cgroup2 mount, for an agent's
/// `--cgroup`: the bench's agents run in whatever cgroup the bench does
/// (the root one on a lab VM's shell), where `--cgroup auto` gives none, so
/// the per-exec cgroup path is measured only in one made for it. Removed
/// on drop, with the exec cgroups the agent left in it.
#[derive(Debug)]
pub struct BenchCgroup(PathBuf);

impl BenchCgroup {
    /// `Err`: why there is none (printed; the variant is skipped).
    pub fn create(tag: &str) -> Result<BenchCgroup, String> {
        let info = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("failed to read /proc/self/mountinfo: {e}"))?;
        let mount = info
            .lines()
            .find_map(|l| {
                let (pre, post) = l.split_once(" - ")?;
                if post.split_whitespace().next()? != "cgroup2" {
                    return None;
                }
                Some(PathBuf::from(pre.split_whitespace().nth(4)?))
            })
            .ok_or("no cgroup2 mount")?;
        let dir = mount.join(format!("lab-agent-bench-{tag}-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| {
            format!(
                "the cgroup2 mount is not writable (`mkdir {}`: {e})",
                dir.display()
            )
        })?;
        Ok(BenchCgroup(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for BenchCgroup {
    fn drop(&mut self) {
        if let Ok(dir) = std::fs::read_dir(&self.0) {
            for child in dir
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            {
                let child = child.path();
                let _ = std::fs::write(child.join("cgroup.kill"), "1");
                for _ in 0..100 {
                    if std::fs::remove_dir(&child).is_ok() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        // Processes in it directly: a diagnostic's idle holder, which dies
        // with its helper, perhaps not yet.
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        let mut removed = std::fs::remove_dir(&self.0);
        for _ in 0..100 {
            if removed.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            removed = std::fs::remove_dir(&self.0);
        }
        if let Err(e) = removed {
            eprintln!("bench: failed to remove `{}`: {e}", self.0.display());
        }
    }
}

pub fn start_agent(bin: &Path, work: &Path, token: &Path, o: AgentOpts<'_>) -> io::Result<Agent> {
    let addr_file = work.join(format!("{}.addr", o.name));
    let log = work.join(format!("{}.log", o.name));
    let _ = std::fs::remove_file(&addr_file);
    let mut args =
        addr_file::serve_args(addr_file::LOOPBACK_ANY_PORT, &addr_file, token, o.state_dir);
    args.extend(["--shutdown-grace".into(), "1".into()]);
    if let Some(cg) = o.cgroup {
        args.push("--cgroup".into());
        args.push(cg.into());
    }
    match o.cloud_init_dir {
        None => args.push("--no-cloud-init".into()),
        Some(d) => {
            args.push("--cloud-init-dir".into());
            args.push(d.into());
        }
    }
    let mut cmd = match o.cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu.to_string()).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?);
    prepare(&mut cmd, None);
    let mut proc = Proc::spawn(cmd, &format!("lab-agent ({})", o.name))?;
    let addr = addr_file::wait(&addr_file, &mut proc.child, Duration::from_secs(10))
        .map_err(|e| io::Error::other(format!("{e} ({}); its log: {}", o.name, tail(&log))))?;
    Ok(Agent { proc, addr })
}

/// An sshd on a free loopback port that lets one user in with one key.
#[derive(Debug)]
pub struct Sshd {
    proc: Proc,
    pub port: u16,
    dir: PathBuf,
    user: String,
    created_privsep_dir: bool,
}

impl Sshd {
    pub fn start(work: &Path, user: &User) -> io::Result<Sshd> {
        let dir = work.join("ssh");
        std::fs::create_dir_all(&dir)?;
        for key in ["host_key", "client_key"] {
            run(Command::new("ssh-keygen")
                .args([
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "lab-agent-bench",
                    "-f",
                ])
                .arg(dir.join(key)))?;
        }
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys"))?;
        std::fs::set_permissions(
            dir.join("authorized_keys"),
            std::fs::Permissions::from_mode(0o644),
        )?;
        let port = free_port()?;
        // Everything not needed for key auth is off, PAM included: each
        // session then costs sshd the least it can, which favours sshd.
        let config = format!(
            "Port {port}\n\
             ListenAddress 127.0.0.1\n\
             HostKey {d}/host_key\n\
             PidFile none\n\
             AuthorizedKeysFile {d}/authorized_keys\n\
             StrictModes no\n\
             UsePAM no\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             PermitRootLogin no\n\
             AllowUsers {u}\n\
             PrintMotd no\n\
             PrintLastLog no\n\
             UseDNS no\n\
             X11Forwarding no\n\
             AllowTcpForwarding no\n\
             MaxSessions 100\n\
             MaxStartups 100:30:200\n",
            d = dir.display(),
            u = user.name,
        );
        std::fs::write(dir.join("sshd_config"), config)?;
        // sshd insists on its privilege separation directory.
        let privsep = Path::new("/run/sshd");
        let created_privsep_dir = !privsep.exists();
        if created_privsep_dir {
            std::fs::create_dir_all(privsep)?;
            std::fs::set_permissions(privsep, std::fs::Permissions::from_mode(0o755))?;
        }
        let mut cmd = Command::new("/usr/sbin/sshd");
        cmd.arg("-D")
            .arg("-f")
            .arg(dir.join("sshd_config"))
            .arg("-E")
            .arg(dir.join("sshd.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        prepare(&mut cmd, None);
        let mut proc = Proc::spawn(cmd, "sshd")?;
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            proc.check_alive().map_err(|e| {
                io::Error::other(format!("{e}; its log: {}", tail(&dir.join("sshd.log"))))
            })?;
            if Instant::now() > until {
                return Err(io::Error::other("sshd did not listen within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Sshd {
            proc,
            port,
            dir,
            user: user.name.clone(),
            created_privsep_dir,
        })
    }

    /// sshd's session processes (children of the listener) right now.
    pub fn sessions(&self) -> usize {
        let pid = self.proc.pid();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .map(|s| s.split_whitespace().count())
            .unwrap_or(0)
    }

    /// `ssh … user@127.0.0.1 REMOTE`; `mux` is a ControlMaster socket.
    pub fn ssh(&self, mux: Option<&Path>, remote: &str) -> Command {
        let mut c = Command::new("ssh");
        c.args(["-F", "none", "-n", "-T", "-o", "BatchMode=yes"])
            .args(["-o", "StrictHostKeyChecking=no"])
            .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
            .arg("-i")
            .arg(self.dir.join("client_key"))
            .arg("-p")
            .arg(self.port.to_string());
        match mux {
            None => c.args(["-o", "ControlMaster=no", "-o", "ControlPath=none"]),
            Some(p) => c
                .args(["-o", "ControlMaster=no", "-o"])
                .arg(format!("ControlPath={}", p.display())),
        };
        c.arg(format!("{}@127.0.0.1", self.user)).arg(remote);
        c.stdin(Stdio::null());
        c
    }

    /// A multiplexing master connection; clients pass its socket to `ssh`.
    pub fn start_master(&self) -> io::Result<(Proc, PathBuf)> {
        let sock = self.dir.join("mux.sock");
        let mut cmd = Command::new("ssh");
        cmd.args(["-F", "none", "-N", "-T", "-o", "BatchMode=yes"])
            .args(["-o", "StrictHostKeyChecking=no"])
            .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
            .args(["-o", "ControlMaster=yes", "-o", "ControlPersist=no"])
            .arg("-o")
            .arg(format!("ControlPath={}", sock.display()))
            .arg("-i")
            .arg(self.dir.join("client_key"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg(format!("{}@127.0.0.1", self.user))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        prepare(&mut cmd, None);
        let mut proc = Proc::spawn(cmd, "the ssh ControlMaster")?;
        let until = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            proc.check_alive()?;
            if Instant::now() > until {
                return Err(io::Error::other("the ssh ControlMaster did not come up"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok((proc, sock))
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        if self.created_privsep_dir {
            let _ = std::fs::remove_dir("/run/sshd");
        }
    }
}

/// qemu-ga listening on a unix socket, running as the bench user.
#[derive(Debug)]
pub struct QemuGa {
    _proc: Proc,
    pub socket: PathBuf,
}

impl QemuGa {
    /// Runs qemu-ga itself as `user`, in the user's home and with the same
    /// clean login environment the agent gives its commands, so what
    /// `guest-exec` starts is the same shell as everywhere else without a
    /// `runuser` in between (which would cost qemu-ga a PAM session).
    pub fn start(work: &Path, user: &User) -> io::Result<QemuGa> {
        let dir = work.join("qga");
        std::fs::create_dir_all(dir.join("state"))?;
        for d in [dir.clone(), dir.join("state")] {
            std::os::unix::fs::chown(&d, Some(user.uid), Some(user.gid))?;
        }
        let socket = dir.join("qga.sock");
        let mut cmd = Command::new("/usr/sbin/qemu-ga");
        cmd.args(["-m", "unix-listen", "-p"])
            .arg(&socket)
            .arg("-t")
            .arg(dir.join("state"))
            .env_clear()
            .envs(user.login_env())
            .current_dir(&user.home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("qemu-ga.log"))?);
        prepare(&mut cmd, Some(user));
        let mut proc = Proc::spawn(cmd, "qemu-ga")?;
        let until = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&socket).is_err() {
            proc.check_alive().map_err(|e| {
                io::Error::other(format!("{e}; its log: {}", tail(&dir.join("qemu-ga.log"))))
            })?;
            if Instant::now() > until {
                return Err(io::Error::other("qemu-ga did not listen within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(QemuGa {
            _proc: proc,
            socket,
        })
    }
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Runs a setup command to completion; its failure is an error with output.
pub fn run(cmd: &mut Command) -> io::Result<std::process::Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::other(format!("failed to run {cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

/// The last lines of a log, for an error message.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
