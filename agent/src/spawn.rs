//! Starting a process as `posix_spawn` does — `clone(CLONE_VM|CLONE_VFORK)`:
//! the child borrows our memory until it calls `execve` — plus what
//! `posix_spawn` cannot do: become another user.
//!
//! Why not `fork` (std's `Command` with `pre_exec`): fork copies the page
//! tables, and both processes then take copy-on-write faults until the
//! child execs. Measured on the benchmark machine (`bench/`, BENCHMARKS.md):
//! fork + setuid cost ~0.6 ms more per `bash --login -c true` than this,
//! which alone is more than SPEC §7's 5 % budget over the local floor.
//!
//! The child runs on a small stack of its own and, sharing our memory, may
//! only make raw system calls on data prepared here: no allocation, no
//! locks, no libc wrapper that keeps state (musl's `setuid`, for one,
//! synchronises all threads). It reports a failure by writing the errno into
//! memory we share, then exits; `CLONE_VFORK` holds us until it has exec'd
//! or exited, so we read that errno afterwards.

use nix::libc::{self, c_char, c_int, c_long, c_void};
use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The child's stack. Its frames are a few hundred bytes; 32 KiB leaves a
/// wide margin without a guard page.
const STACK: usize = 32 * 1024;

/// What to exec, and how to set the process up first.
#[derive(Debug)]
pub struct Spec<'a> {
    pub path: &'a CStr,
    /// Null-terminated.
    pub argv: &'a [*const c_char],
    /// Null-terminated.
    pub envp: &'a [*const c_char],
    /// Become these fds 0, 1, 2. Each must be >= 3 (see [`above_stdio`]).
    pub stdio: [RawFd; 3],
    /// setgroups/setgid/setuid, in that order.
    pub ids: Option<Ids<'a>>,
    pub cwd: &'a CStr,
    /// Tried when `cwd` cannot be entered (the home-or-`/` rule of login).
    pub cwd_fallback: Option<&'a CStr>,
}

#[derive(Debug, Clone, Copy)]
pub struct Ids<'a> {
    pub groups: &'a [libc::gid_t],
    pub gid: libc::gid_t,
    pub uid: libc::uid_t,
}

#[derive(Debug)]
pub struct Spawned {
    pub pid: libc::pid_t,
    /// Readable once the child has exited. `None` on kernels before 5.2.
    pub pidfd: Option<OwnedFd>,
}

/// Shared between us and the child while it runs on our memory.
struct Shared<'a> {
    spec: &'a Spec<'a>,
    errno: c_int,
}

/// The kernel's `struct sigaction` (x86_64 and arm64 alike).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Starts `spec` in a new session. The new process has an empty signal mask
/// and default dispositions for everything we catch and for SIGPIPE (which
/// Rust programs ignore), as std's `Command` gives its children.
pub fn spawn(spec: &Spec<'_>) -> io::Result<Spawned> {
    debug_assert!(spec.argv.last().is_some_and(|p| p.is_null()));
    debug_assert!(spec.envp.last().is_some_and(|p| p.is_null()));
    debug_assert!(spec.stdio.iter().all(|&fd| fd > 2));
    let mut shared = Shared { spec, errno: 0 };
    let mut stack = MaybeUninit::<[u8; STACK]>::uninit();
    let mut pidfd: c_int = -1;
    // SAFETY: every signal is blocked around the clone, so no handler of
    // ours can run in the child while it shares our memory; the child only
    // reads `shared` (and writes `errno`) and uses `stack`, both of which
    // outlive it because CLONE_VFORK suspends us until it execs or exits.
    let pid = unsafe {
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
        let top = (stack.as_mut_ptr() as *mut u8).add(STACK);
        let top = top.sub(top as usize % 16);
        let pid = libc::clone(
            child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
            (&mut shared as *mut Shared<'_>).cast(),
            &mut pidfd as *mut c_int,
            std::ptr::null_mut::<c_void>(),
            std::ptr::null_mut::<libc::pid_t>(),
        );
        let clone_errno = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_errno);
        }
        pid
    };
    // SAFETY: on success the kernel stored a new descriptor (kernels that
    // do not know CLONE_PIDFD ignore it and leave -1).
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    if shared.errno != 0 {
        // The child exited without exec'ing: reap it and report why.
        let mut status = 0;
        // SAFETY: our own, already exited child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(shared.errno));
    }
    Ok(Spawned { pid, pidfd })
}

/// The child: raw system calls only (see the module docs).
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Shared`, alive while we run.
    let shared = unsafe { &mut *(arg as *mut Shared<'_>) };
    let errno = setup_and_exec(shared.spec);
    shared.errno = if errno == 0 { libc::EINVAL } else { errno };
    // SAFETY: leaves this process (not the parent, which is a separate
    // thread group) without running any exit handler.
    unsafe { libc::syscall(libc::SYS_exit, 127 as c_long) };
    127
}

/// Returns only on failure, with the errno.
fn setup_and_exec(spec: &Spec<'_>) -> c_int {
    let fail = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY: plain system calls on pointers into `spec`, which the parent
    // keeps alive and unchanged.
    unsafe {
        // Our handlers are our business: default for anything we catch,
        // and SIGPIPE back to default. (Ignored signals stay ignored, as
        // across any exec.)
        for sig in 1..=64 as c_int {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old = MaybeUninit::<KernelSigaction>::zeroed();
            if libc::syscall(
                libc::SYS_rt_sigaction,
                sig as c_long,
                std::ptr::null::<KernelSigaction>(),
                old.as_mut_ptr(),
                8 as c_long,
            ) != 0
            {
                continue;
            }
            let handler = old.assume_init().handler;
            if handler > 1 || (sig == libc::SIGPIPE && handler == 1) {
                let dfl = KernelSigaction {
                    handler: 0,
                    flags: 0,
                    restorer: 0,
                    mask: 0,
                };
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig as c_long,
                    &dfl as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8 as c_long,
                );
            }
        }
        // Own session, hence own process group: a timeout can kill the
        // whole tree, and the command has no controlling terminal.
        if libc::syscall(libc::SYS_setsid) < 0 {
            return fail();
        }
        if let Some(ids) = spec.ids {
            if libc::syscall(
                libc::SYS_setgroups,
                ids.groups.len() as c_long,
                ids.groups.as_ptr(),
            ) != 0
                || libc::syscall(libc::SYS_setgid, ids.gid as c_long) != 0
                || libc::syscall(libc::SYS_setuid, ids.uid as c_long) != 0
            {
                return fail();
            }
        }
        // After dropping privileges, so a directory the user may not enter
        // is an error rather than a root-granted favour.
        if libc::syscall(libc::SYS_chdir, spec.cwd.as_ptr()) != 0 {
            let e = fail();
            match spec.cwd_fallback {
                Some(dir) if libc::syscall(libc::SYS_chdir, dir.as_ptr()) == 0 => {}
                _ => return e,
            }
        }
        for (to, &from) in spec.stdio.iter().enumerate() {
            if libc::syscall(libc::SYS_dup3, from as c_long, to as c_long, 0 as c_long) < 0 {
                return fail();
            }
        }
        let empty: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as c_long,
            &empty as *const u64,
            std::ptr::null_mut::<u64>(),
            8 as c_long,
        );
        libc::syscall(
            libc::SYS_execve,
            spec.path.as_ptr(),
            spec.argv.as_ptr(),
            spec.envp.as_ptr(),
        );
        fail()
    }
}

/// `fd` itself when it is above 0–2, else a close-on-exec duplicate that
/// is (so that setting up the child's 0–2 cannot clobber another source).
pub fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we then own.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}
