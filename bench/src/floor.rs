//! The floor: the least a local program can do to run the same login shell.
//!
//! A helper process (this binary, `floor-helper`) runs *as the bench user*,
//! in the user's home, and for every sample does one `posix_spawn` of
//! `/bin/bash --login -c true` with the agent's clean login environment,
//! stdin from /dev/null, stdout and stderr to pipes read until EOF, then
//! `waitpid`. It times exactly that and reports the nanoseconds over a pipe,
//! so no IPC is in the number. This is the strictest floor available: no
//! credential switch, no new session, and glibc's posix_spawn shares the
//! parent's memory (`CLONE_VM|CLONE_VFORK`) instead of copying page tables.

use crate::children::{Proc, User, prepare};
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The bench's end of a running helper.
#[derive(Debug)]
pub struct Floor {
    proc: Proc,
    to: ChildStdin,
    from: ChildStdout,
    mode: Mode,
}

/// How the helper starts the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The floor: posix_spawn, the helper already runs as the user.
    PosixSpawn,
    /// Diagnostic: the floor plus `POSIX_SPAWN_SETSID`, the new session
    /// the agent gives every command (API.md, `POST /v1/exec`), which with
    /// the kernel's autogroup scheduling costs the shell a fresh task group.
    PosixSpawnSetsid,
    /// Diagnostic: fork, then setsid/setgroups/setgid/setuid/chdir in the
    /// child, from a root helper (std's `pre_exec`, as lab-agent 0.1 did).
    Fork,
    /// Diagnostic: the same switch in a `clone(CLONE_VM|CLONE_VFORK)` child
    /// with raw system calls (what posix_spawn does, plus the switch).
    Vfork,
    /// Diagnostic: as `Vfork`, but without the new session.
    VforkSameSession,
    /// Diagnostic: `clone3(CLONE_VFORK)` (a fork that waits for the exec),
    /// then the agent's switch: the partner of [`Mode::Clone3Cgroup`].
    Clone3,
    /// Diagnostic: the same with `CLONE_INTO_CGROUP` into a cgroup of its
    /// own, as the agent starts a command where it has a subtree. Paired
    /// with [`Mode::Clone3`], this is the kernel's part of a per-exec
    /// cgroup, with no agent code in it.
    Clone3Cgroup,
    /// Diagnostic: as [`Mode::Clone3Cgroup`], into a cgroup that holds one
    /// idle process throughout, as the agent's pooled cgroups hold their
    /// holder: the shell's start and end do not empty and refill it.
    Clone3CgroupHeld,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::PosixSpawn => "posix_spawn",
            Mode::PosixSpawnSetsid => "posix_spawn-setsid",
            Mode::Fork => "fork",
            Mode::Vfork => "vfork",
            Mode::VforkSameSession => "vfork-same-session",
            Mode::Clone3 => "clone3",
            Mode::Clone3Cgroup => "clone3-cgroup",
            Mode::Clone3CgroupHeld => "clone3-cgroup-held",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        [
            Mode::PosixSpawn,
            Mode::PosixSpawnSetsid,
            Mode::Fork,
            Mode::Vfork,
            Mode::VforkSameSession,
            Mode::Clone3,
            Mode::Clone3Cgroup,
            Mode::Clone3CgroupHeld,
        ]
        .into_iter()
        .find(|m| m.arg() == s)
    }
}

impl Floor {
    pub fn start(user: &User, shell_command: &str, mode: Mode) -> io::Result<Floor> {
        Floor::start_in(user, shell_command, mode, None)
    }

    /// `cgroup`: where [`Mode::Clone3Cgroup`] starts each shell.
    pub fn start_in(
        user: &User,
        shell_command: &str,
        mode: Mode,
        cgroup: Option<&std::path::Path>,
    ) -> io::Result<Floor> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.arg("floor-helper")
            .arg(mode.arg())
            .arg(shell_command)
            .env_clear()
            .envs(user.login_env())
            .current_dir(&user.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if !matches!(mode, Mode::PosixSpawn | Mode::PosixSpawnSetsid) {
            // Runs as root and switches in the child, as the agent does.
            cmd.env(
                "BENCH_IDS",
                format!(
                    "{} {} {}",
                    user.uid,
                    user.gid,
                    user.groups
                        .iter()
                        .map(|g| g.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            );
        }
        if let Some(cg) = cgroup {
            cmd.env("BENCH_CGROUP", cg);
        }
        let as_user = matches!(mode, Mode::PosixSpawn | Mode::PosixSpawnSetsid);
        prepare(&mut cmd, as_user.then_some(user));
        let mut proc = Proc::spawn(cmd, "the floor helper")?;
        let to = proc.child.stdin.take().expect("piped");
        let from = proc.child.stdout.take().expect("piped");
        Ok(Floor {
            proc,
            to,
            from,
            mode,
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn sample(&mut self) -> io::Result<Duration> {
        self.to.write_all(b"g")?;
        let mut buf = [0u8; 8];
        self.from.read_exact(&mut buf).map_err(|e| {
            let _ = self.proc.check_alive();
            io::Error::other(format!("the floor helper stopped answering: {e}"))
        })?;
        match u64::from_le_bytes(buf) {
            u64::MAX => Err(io::Error::other(
                "the floor helper's shell failed (see its stderr above)",
            )),
            ns => Ok(Duration::from_nanos(ns)),
        }
    }
}

/// `lab-agent-bench floor-helper MODE COMMAND`: one spawn per byte on stdin.
pub fn helper_main(mode: Mode, command: &str) -> io::Result<()> {
    let argv_owned: Vec<CString> = ["/bin/bash", "--login", "-c", command]
        .iter()
        .map(|s| CString::new(*s).map_err(io::Error::other))
        .collect::<io::Result<_>>()?;
    let env_owned: Vec<CString> = std::env::vars()
        .filter(|(k, _)| k != "BENCH_IDS" && k != "BENCH_CGROUP")
        .map(|(k, v)| CString::new(format!("{k}={v}")).map_err(io::Error::other))
        .collect::<io::Result<_>>()?;
    let mut argv: Vec<*mut libc::c_char> =
        argv_owned.iter().map(|s| s.as_ptr() as *mut _).collect();
    argv.push(std::ptr::null_mut());
    let mut envp: Vec<*mut libc::c_char> = env_owned.iter().map(|s| s.as_ptr() as *mut _).collect();
    envp.push(std::ptr::null_mut());
    let ids = std::env::var("BENCH_IDS")
        .ok()
        .map(|s| parse_ids(&s))
        .transpose()?;
    let home = CString::new(std::env::var("HOME").unwrap_or_else(|_| "/".into()))
        .map_err(io::Error::other)?;
    let cgroup = match (mode, std::env::var_os("BENCH_CGROUP")) {
        (Mode::Clone3Cgroup | Mode::Clone3CgroupHeld, Some(p)) => Some(std::fs::File::open(p)?),
        (Mode::Clone3Cgroup | Mode::Clone3CgroupHeld, None) => {
            return Err(io::Error::other("BENCH_CGROUP is not set"));
        }
        _ => None,
    };
    if let (Mode::Clone3CgroupHeld, Some(cg)) = (mode, &cgroup) {
        hold(std::os::fd::AsRawFd::as_raw_fd(cg))?;
    }

    let mut stdin = io::stdin().lock();
    let mut stdout = io::stdout().lock();
    let mut go = [0u8; 1];
    while stdin.read(&mut go)? == 1 {
        let r = match (mode, &ids) {
            (Mode::PosixSpawn, _) => spawn_once(&argv, &envp, false),
            (Mode::PosixSpawnSetsid, _) => spawn_once(&argv, &envp, true),
            (Mode::Fork, Some(ids)) => fork_once(command, ids, &home),
            (Mode::Vfork, Some(ids)) => vfork_once(&argv, &envp, ids, &home, false),
            (Mode::VforkSameSession, Some(ids)) => vfork_once(&argv, &envp, ids, &home, true),
            (Mode::Clone3 | Mode::Clone3Cgroup | Mode::Clone3CgroupHeld, Some(ids)) => {
                let cg = cgroup.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
                clone3_once(&argv, &envp, ids, &home, cg)
            }
            (_, None) => Err(io::Error::other("BENCH_IDS is not set")),
        };
        let ns = match r {
            Ok((d, 0)) => d.as_nanos() as u64,
            Ok((_, status)) => {
                eprintln!("floor-helper: the shell exited with wait status {status}");
                u64::MAX
            }
            Err(e) => {
                eprintln!("floor-helper: {e}");
                u64::MAX
            }
        };
        stdout.write_all(&ns.to_le_bytes())?;
        stdout.flush()?;
    }
    Ok(())
}

/// `uid gid g1,g2,…`
#[derive(Debug)]
struct Ids {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

fn parse_ids(s: &str) -> io::Result<Ids> {
    let bad = || io::Error::other(format!("bad BENCH_IDS {s:?}"));
    let mut it = s.split(' ');
    let uid = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let gid = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let groups = it
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|g| !g.is_empty())
        .map(|g| g.parse().map_err(|_| bad()))
        .collect::<io::Result<_>>()?;
    Ok(Ids { uid, gid, groups })
}

/// What lab-agent 0.1 did: std's Command with a `pre_exec` (so fork).
fn fork_once(command: &str, ids: &Ids, home: &CString) -> io::Result<(Duration, libc::c_int)> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let started = Instant::now();
    let mut c = Command::new("/bin/bash");
    c.args(["--login", "-c", command])
        .env_clear()
        .envs(std::env::vars().filter(|(k, _)| k != "BENCH_IDS"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let groups = ids.groups.clone();
    let (gid, uid) = (ids.gid, ids.uid);
    let home = home.clone();
    // SAFETY: async-signal-safe calls on data prepared before the fork.
    unsafe {
        c.pre_exec(move || {
            if libc::setsid() < 0
                || libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
                || libc::chdir(home.as_ptr()) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = c.output()?;
    Ok((started.elapsed(), out.status.into_raw()))
}

struct VforkArgs<'a> {
    argv: &'a [*mut libc::c_char],
    envp: &'a [*mut libc::c_char],
    ids: &'a Ids,
    home: &'a CString,
    stdin: libc::c_int,
    stdout: libc::c_int,
    stderr: libc::c_int,
    errno: libc::c_int,
    no_setsid: bool,
}

extern "C" fn vfork_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the parent is suspended until we exec or exit; only raw
    // system calls, no libc state (which we share with the parent).
    unsafe {
        let a = &mut *(arg as *mut VforkArgs<'_>);
        let sys = |r: libc::c_long| r >= 0;
        let ok = (a.no_setsid || sys(libc::syscall(libc::SYS_setsid)))
            && sys(libc::syscall(
                libc::SYS_setgroups,
                a.ids.groups.len(),
                a.ids.groups.as_ptr(),
            ))
            && sys(libc::syscall(libc::SYS_setgid, a.ids.gid))
            && sys(libc::syscall(libc::SYS_setuid, a.ids.uid))
            && sys(libc::syscall(libc::SYS_chdir, a.home.as_ptr()))
            && sys(libc::syscall(libc::SYS_dup2, a.stdin, 0))
            && sys(libc::syscall(libc::SYS_dup2, a.stdout, 1))
            && sys(libc::syscall(libc::SYS_dup2, a.stderr, 2))
            && sys(libc::syscall(
                libc::SYS_execve,
                a.argv[0],
                a.argv.as_ptr(),
                a.envp.as_ptr(),
            ));
        if !ok {
            a.errno = *libc::__errno_location();
        }
        libc::syscall(libc::SYS_exit, 127);
    }
    127
}

fn vfork_once(
    argv: &[*mut libc::c_char],
    envp: &[*mut libc::c_char],
    ids: &Ids,
    home: &CString,
    no_setsid: bool,
) -> io::Result<(Duration, libc::c_int)> {
    let started = Instant::now();
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // SAFETY: plain open of /dev/null.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let mut args = VforkArgs {
        argv,
        envp,
        ids,
        home,
        stdin: null,
        stdout: out_w,
        stderr: err_w,
        errno: 0,
        no_setsid,
    };
    let mut stack = vec![0u8; 64 * 1024];
    // SAFETY: the child runs on its own stack and the parent waits for it
    // to exec or exit (CLONE_VFORK) before `args` or `stack` go away.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(stack.len());
        let pid = libc::clone(
            vfork_child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut args as *mut VforkArgs<'_>).cast(),
        );
        libc::close(out_w);
        libc::close(err_w);
        libc::close(null);
        pid
    };
    let started_ok = if pid < 0 {
        Err(io::Error::last_os_error())
    } else if args.errno != 0 {
        Err(io::Error::from_raw_os_error(args.errno))
    } else {
        Ok(pid)
    };
    collect(started, started_ok, out_r, err_r)
}

/// After a spawn (`pid`, or why it failed): reads both pipes to EOF and
/// reaps the child; the sample's time and wait status. Closes the pipes
/// either way.
fn collect(
    started: Instant,
    pid: io::Result<libc::pid_t>,
    out_r: libc::c_int,
    err_r: libc::c_int,
) -> io::Result<(Duration, libc::c_int)> {
    let pid = match pid {
        Ok(pid) => pid,
        Err(e) => {
            // SAFETY: our descriptors.
            unsafe {
                libc::close(out_r);
                libc::close(err_r);
            }
            return Err(e);
        }
    };
    drain(out_r, err_r)?;
    let mut status = 0;
    // SAFETY: waiting for our child.
    if unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((started.elapsed(), status))
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Starts an idle process in the cgroup `dir` that lives as long as this
/// helper (`PR_SET_PDEATHSIG`), as the agent's holder does.
fn hold(dir: libc::c_int) -> io::Result<()> {
    // SAFETY: integers only; zero is "not used" for every field.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = libc::SIGCHLD as u64;
    args.cgroup = dir as u64;
    // SAFETY: a fork-like clone3 of this single-threaded helper; the child
    // makes raw system calls only and never returns.
    let pid = unsafe {
        let pid = libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        );
        if pid == 0 {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            loop {
                libc::pause();
            }
        }
        pid
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `clone3` without `CLONE_VM`: the child has its own copy of memory (as
/// after `fork`), so it may return from the system call and run the same
/// raw calls as [`vfork_child`]; `CLONE_VFORK` still holds the parent
/// until it has exec'd, as the agent's spawn does. A failure in the child
/// shows as exit status 127.
fn clone3_once(
    argv: &[*mut libc::c_char],
    envp: &[*mut libc::c_char],
    ids: &Ids,
    home: &CString,
    cgroup: Option<libc::c_int>,
) -> io::Result<(Duration, libc::c_int)> {
    let started = Instant::now();
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // SAFETY: plain open of /dev/null.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // SAFETY: integers only; zero is "not used" for every field.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = libc::CLONE_VFORK as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
    }
    // SAFETY: a fork-like clone3 (no CLONE_VM, no new stack); the child
    // makes only raw system calls on its copy of our memory, then execs or
    // exits.
    let pid = unsafe {
        let pid = libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        );
        if pid == 0 {
            let sys = |r: libc::c_long| r >= 0;
            let _ = sys(libc::syscall(libc::SYS_setsid))
                && sys(libc::syscall(
                    libc::SYS_setgroups,
                    ids.groups.len(),
                    ids.groups.as_ptr(),
                ))
                && sys(libc::syscall(libc::SYS_setgid, ids.gid))
                && sys(libc::syscall(libc::SYS_setuid, ids.uid))
                && sys(libc::syscall(libc::SYS_chdir, home.as_ptr()))
                && sys(libc::syscall(libc::SYS_dup2, null, 0))
                && sys(libc::syscall(libc::SYS_dup2, out_w, 1))
                && sys(libc::syscall(libc::SYS_dup2, err_w, 2))
                && sys(libc::syscall(
                    libc::SYS_execve,
                    argv[0],
                    argv.as_ptr(),
                    envp.as_ptr(),
                ));
            libc::syscall(libc::SYS_exit, 127);
        }
        libc::close(out_w);
        libc::close(err_w);
        libc::close(null);
        pid
    };
    let pid = if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid as libc::pid_t)
    };
    collect(started, pid, out_r, err_r)
}

fn spawn_once(
    argv: &[*mut libc::c_char],
    envp: &[*mut libc::c_char],
    setsid: bool,
) -> io::Result<(Duration, libc::c_int)> {
    let started = Instant::now();
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: file actions and argv/envp are valid for the call; the pipe
    // ends are ours and closed below.
    let rc = unsafe {
        let mut fa: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawn_file_actions_init(&mut fa);
        libc::posix_spawn_file_actions_addopen(
            &mut fa,
            0,
            c"/dev/null".as_ptr(),
            libc::O_RDONLY,
            0,
        );
        libc::posix_spawn_file_actions_adddup2(&mut fa, out_w, 1);
        libc::posix_spawn_file_actions_adddup2(&mut fa, err_w, 2);
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        if setsid {
            libc::posix_spawnattr_setflags(&mut attr, libc::POSIX_SPAWN_SETSID as libc::c_short);
        }
        let rc = libc::posix_spawn(&mut pid, argv[0], &fa, &attr, argv.as_ptr(), envp.as_ptr());
        libc::posix_spawnattr_destroy(&mut attr);
        libc::posix_spawn_file_actions_destroy(&mut fa);
        libc::close(out_w);
        libc::close(err_w);
        rc
    };
    let pid = if rc != 0 {
        Err(io::Error::from_raw_os_error(rc))
    } else {
        Ok(pid)
    };
    collect(started, pid, out_r, err_r)
}

/// Reads both pipes until EOF on each (what a caller capturing output does).
fn drain(a: libc::c_int, b: libc::c_int) -> io::Result<()> {
    let mut fds = [
        libc::pollfd {
            fd: a,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let mut open = 2;
    let mut buf = [0u8; 16 * 1024];
    while open > 0 {
        // SAFETY: two valid pollfds.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            return Err(io::Error::last_os_error());
        }
        for p in fds.iter_mut() {
            if p.fd >= 0 && p.revents != 0 {
                // SAFETY: reading into a local buffer from our pipe.
                let n = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    // SAFETY: closing our pipe end once.
                    unsafe { libc::close(p.fd) };
                    p.fd = -1;
                    open -= 1;
                }
            }
        }
    }
    Ok(())
}

fn pipe() -> io::Result<(libc::c_int, libc::c_int)> {
    let mut fds = [0; 2];
    // SAFETY: two-element array for pipe2.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}
