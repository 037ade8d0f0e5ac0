//! Starting a process as `posix_spawn` does — `CLONE_VM|CLONE_VFORK`: the
//! child borrows our memory until it calls `execve` — plus what
//! `posix_spawn` cannot do: become another user, and start inside a given
//! cgroup (`clone3` with `CLONE_INTO_CGROUP`, so not one instruction of the
//! command runs outside it, and no migration is paid for afterwards).
//!
//! Why not `fork` (std's `Command` with `pre_exec`): fork copies the page
//! tables, and both processes then take copy-on-write faults until the
//! child execs. Measured on the benchmark machine (`bench/`, BENCHMARKS.md):
//! fork + setuid cost ~0.6 ms more per `bash --login -c true` than this,
//! which alone is more than the 5 % budget over the local floor
//! (BENCHMARKS.md, "Targets").
//!
//! The child runs on a small stack of its own and, sharing our memory, may
//! only make raw system calls on data prepared here: no allocation, no
//! locks, no libc wrapper that keeps state (musl's `setuid`, for one,
//! synchronises all threads). It reports a failure by writing the errno into
//! memory we share, then exits; `CLONE_VFORK` holds us until it has exec'd
//! or exited, so we read that errno afterwards.
//!
//! `clone3` with a new stack cannot be called through libc (neither musl
//! nor glibc exports a wrapper), so the few instructions that enter the
//! child on its stack are written out per architecture below. Kernels
//! without `clone3` (before 5.3, or a seccomp filter that hides it) get
//! libc's `clone` and no cgroup; [`Spawned::in_cgroup`] says which.

// The child rewrites signal dispositions with the kernel's own `struct
// sigaction` and enters `clone3` in assembly: both are known here only for
// these two architectures (the ones the agent ships for).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "spawn.rs knows the kernel's `struct sigaction` and the clone3 entry only on x86_64 and aarch64: add this architecture's before building"
);

use nix::libc::{self, c_char, c_int, c_long, c_void};
use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The child's stack. Its frames are a few hundred bytes; 32 KiB leaves a
/// wide margin without a guard page.
const STACK: usize = 32 * 1024;

/// What to exec, and how to set the process up first.
#[derive(Debug)]
pub struct Spec<'a> {
    /// `argv[0]` is also the program executed.
    pub argv: &'a [&'a CStr],
    pub envp: &'a [&'a CStr],
    /// Become these fds 0, 1, 2. Each must be >= 3 (see [`above_stdio`]).
    pub stdio: [BorrowedFd<'a>; 3],
    /// setgroups/setgid/setuid, in that order.
    pub ids: Option<Ids<'a>>,
    pub cwd: &'a CStr,
    /// Tried when `cwd` cannot be entered (the home-or-`/` rule of login).
    pub cwd_fallback: Option<&'a CStr>,
    /// A cgroup v2 directory to start the child in.
    pub cgroup: Option<BorrowedFd<'a>>,
    /// `RLIMIT_NPROC` (soft and hard) for the child, set before the user
    /// switch (so `setuid` already checks it).
    pub nproc: Option<u64>,
    /// Set the child's `oom_score_adj` back to 0 (the agent lowered its own).
    pub oom_reset: bool,
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
    /// Started inside [`Spec::cgroup`] (false without `clone3`).
    pub in_cgroup: bool,
}

/// Shared between us and the child while it runs on our memory. Only raw
/// pointers: the child must not touch anything that needs a destructor.
struct Shared {
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    stdio: [c_int; 3],
    ids: Option<(*const libc::gid_t, usize, libc::gid_t, libc::uid_t)>,
    cwd: *const c_char,
    cwd_fallback: *const c_char,
    nproc: Option<u64>,
    oom_reset: bool,
    /// The kernel has reset our handlers in the child
    /// (`CLONE_CLEAR_SIGHAND`): it need not ask for each signal.
    handlers_cleared: bool,
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

/// The kernel's `struct clone_args` up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// Linux 5.5+: every signal with a handler starts at its default in the
/// child, as if the child had reset each itself. Without it, the child asks
/// for all 64 signals' dispositions one system call at a time (~15 µs of
/// its start, which `bash --login -c true` as a whole takes ~2.5 ms).
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// Set once a kernel refused [`CLONE_CLEAR_SIGHAND`] (5.3 and 5.4 have
/// `clone3` without it): not asked for again.
static NO_CLEAR_SIGHAND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// `clone3`'s number on both supported architectures (x86_64 and aarch64).
const SYS_CLONE3: i64 = 435;

/// Starts `spec` in a new session. The new process has an empty signal mask
/// and default dispositions for everything we catch and for SIGPIPE (which
/// Rust programs ignore), as std's `Command` gives its children.
pub fn spawn(spec: &Spec<'_>) -> io::Result<Spawned> {
    spawn_as(
        spec,
        !NO_CLEAR_SIGHAND.load(std::sync::atomic::Ordering::Relaxed),
    )
}

/// [`spawn`], asking the kernel to reset our handlers or not.
fn spawn_as(spec: &Spec<'_>, clear_sighand: bool) -> io::Result<Spawned> {
    if spec.argv.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "argv is empty"));
    }
    if spec.stdio.iter().any(|fd| fd.as_raw_fd() <= 2) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a stdio source is itself one of fds 0-2 (use above_stdio)",
        ));
    }
    // The null-terminated arrays execve reads, built here so that no caller
    // can hand it an unterminated one.
    let argv: Vec<*const c_char> = spec
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let envp: Vec<*const c_char> = spec
        .envp
        .iter()
        .map(|e| e.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let mut shared = Shared {
        path: spec.argv[0].as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        stdio: spec.stdio.map(|fd| fd.as_raw_fd()),
        ids: spec
            .ids
            .map(|i| (i.groups.as_ptr(), i.groups.len(), i.gid, i.uid)),
        cwd: spec.cwd.as_ptr(),
        cwd_fallback: spec.cwd_fallback.map_or(std::ptr::null(), |c| c.as_ptr()),
        nproc: spec.nproc,
        oom_reset: spec.oom_reset,
        handlers_cleared: false,
        errno: 0,
    };
    let mut stack = MaybeUninit::<[u8; STACK]>::uninit();
    let mut pidfd: c_int = -1;
    let arg = (&mut shared as *mut Shared).cast::<c_void>();
    // SAFETY: every signal is blocked around the clone — with the raw
    // system call and all 64 bits, as both libcs' posix_spawn do, since
    // `sigfillset` leaves libc's internal signals out — so no handler can
    // run in the child while it shares our memory. The child reads
    // `shared` (and writes `errno`) and uses `stack`, which outlive it:
    // CLONE_VFORK suspends us until it execs or exits.
    let (pid, in_cgroup) = unsafe {
        let all: u64 = !0;
        let mut old: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as c_long,
            &all as *const u64,
            &mut old as *mut u64,
            8 as c_long,
        );
        let base = stack.as_mut_ptr() as *mut u8;
        let mut result = clone3(spec.cgroup, base, &mut pidfd, arg, clear_sighand);
        if result == Err(libc::ENOSYS) {
            result = clone_legacy(base, &mut pidfd, arg).map(|pid| (pid, false));
        }
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as c_long,
            &old as *const u64,
            std::ptr::null_mut::<u64>(),
            8 as c_long,
        );
        result.map_err(io::Error::from_raw_os_error)?
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
    drop((argv, envp));
    Ok(Spawned {
        pid,
        pidfd,
        in_cgroup,
    })
}

/// `clone3(CLONE_VM|CLONE_VFORK|CLONE_PIDFD|CLONE_CLEAR_SIGHAND
/// [|CLONE_INTO_CGROUP])` with the child entering [`child`] on `stack`.
/// Returns the pid and whether the cgroup was applied, or the errno.
///
/// # Safety
/// Signals must be blocked; `stack` must hold [`STACK`] bytes and, like
/// `arg` (a [`Shared`]), stay valid until the child has exec'd or exited.
unsafe fn clone3(
    cgroup: Option<BorrowedFd<'_>>,
    stack: *mut u8,
    pidfd: &mut c_int,
    arg: *mut c_void,
    clear: bool,
) -> Result<(libc::pid_t, bool), c_int> {
    // SAFETY: no child runs yet; it reads this once it does.
    unsafe { (*arg.cast::<Shared>()).handlers_cleared = clear };
    let mut result = unsafe { clone3_with(cgroup, stack, pidfd, arg, clear) };
    if clear && result == Err(libc::EINVAL) {
        // Perhaps the flag (5.3, 5.4); an EINVAL for another reason comes
        // back again without it.
        unsafe { (*arg.cast::<Shared>()).handlers_cleared = false };
        result = unsafe { clone3_with(cgroup, stack, pidfd, arg, false) };
        if result.is_ok() {
            NO_CLEAR_SIGHAND.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    result
}

/// # Safety
/// As [`clone3`].
unsafe fn clone3_with(
    cgroup: Option<BorrowedFd<'_>>,
    stack: *mut u8,
    pidfd: &mut c_int,
    arg: *mut c_void,
    clear_sighand: bool,
) -> Result<(libc::pid_t, bool), c_int> {
    let mut args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64,
        pidfd: pidfd as *mut c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        // The kernel takes the lowest address and the size; the top it
        // computes must be 16-byte aligned, as both ABIs want at a call.
        stack: (stack as u64 + 15) & !15,
        stack_size: (STACK as u64 - 16) & !15,
        ..CloneArgs::default()
    };
    if clear_sighand {
        args.flags |= CLONE_CLEAR_SIGHAND;
    }
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    let entry = child as extern "C" fn(*mut c_void) -> c_int as usize;
    // SAFETY: per this function's contract.
    let ret = unsafe { raw_clone3(&mut args, entry, arg) };
    if ret < 0 {
        return Err(-ret as c_int);
    }
    Ok((ret as libc::pid_t, cgroup.is_some()))
}

/// The system call itself. In the child (return value 0, now on the new
/// stack) it calls `entry(arg)` and exits with its result; it never returns
/// there, so the compiler's view of the stack does not matter to it.
#[cfg(target_arch = "x86_64")]
unsafe fn raw_clone3(args: &mut CloneArgs, entry: usize, arg: *mut c_void) -> i64 {
    let ret: i64;
    // SAFETY: see `clone3`; r12/r13 survive `syscall` (only rcx and r11
    // are clobbered), so the child finds `entry` and `arg` in them.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, 60", // SYS_exit
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") SYS_CLONE3 => ret,
            in("rdi") args as *mut CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") entry,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
unsafe fn raw_clone3(args: &mut CloneArgs, entry: usize, arg: *mut c_void) -> i64 {
    let ret: i64;
    // SAFETY: see `clone3`; `svc` preserves every register but x0.
    unsafe {
        std::arch::asm!(
            "svc #0",
            "cbnz x0, 2f",
            "mov x29, xzr",
            "mov x30, xzr",
            "mov x0, x10",
            "blr x9",
            "mov x8, #93", // SYS_exit
            "svc #0",
            "brk #1",
            "2:",
            in("x8") SYS_CLONE3,
            inlateout("x0") args as *mut CloneArgs as i64 => ret,
            in("x1") std::mem::size_of::<CloneArgs>(),
            in("x9") entry,
            in("x10") arg,
            options(nostack),
        );
    }
    ret
}

/// libc's `clone` for kernels without `clone3`: the same child, no cgroup.
///
/// # Safety
/// As [`clone3`].
unsafe fn clone_legacy(
    stack: *mut u8,
    pidfd: &mut c_int,
    arg: *mut c_void,
) -> Result<libc::pid_t, c_int> {
    // SAFETY: per this function's contract.
    unsafe {
        let top = stack.add(STACK);
        let top = top.sub(top as usize % 16);
        let call = |flags: c_int, pidfd: *mut c_int| {
            let pid = libc::clone(
                child,
                top.cast(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | flags,
                arg,
                pidfd,
                std::ptr::null_mut::<c_void>(),
                std::ptr::null_mut::<libc::pid_t>(),
            );
            if pid < 0 {
                Err(*libc::__errno_location())
            } else {
                Ok(pid)
            }
        };
        match call(libc::CLONE_PIDFD, pidfd as *mut c_int) {
            // No kernel refuses the flag (before 5.2 it is an ignored bit),
            // but a user-mode emulator does: qemu-user 7.2, which runs the
            // aarch64 agent's test suite on x86_64 (tests/tests/arm64.rs),
            // also lacks clone3. Without a pidfd the exit is polled for, as
            // on kernels before 5.2.
            Err(libc::EINVAL) => call(0, std::ptr::null_mut()),
            result => result,
        }
    }
}

/// The child: raw system calls only (see the module docs).
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Shared`, alive while we run.
    let shared = unsafe { &mut *(arg as *mut Shared) };
    let errno = setup_and_exec(shared);
    shared.errno = if errno == 0 { libc::EINVAL } else { errno };
    // SAFETY: leaves this process (not the parent, which is a separate
    // thread group) without running any exit handler.
    unsafe { libc::syscall(libc::SYS_exit, 127 as c_long) };
    127
}

/// Returns only on failure, with the errno.
fn setup_and_exec(s: &Shared) -> c_int {
    // Read errno where libc's `syscall` left it: std's `last_os_error`
    // does more than this child may (and it runs on a guard-less stack).
    // SAFETY: the calling thread's errno slot, a plain int.
    let fail = || unsafe { *libc::__errno_location() };
    // SAFETY: plain system calls on pointers the parent keeps alive and
    // unchanged while we run.
    unsafe {
        // Our handlers are our business: default for anything we catch,
        // and SIGPIPE back to default. (Ignored signals stay ignored, as
        // across any exec.)
        let dfl = KernelSigaction {
            handler: 0,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        let set_default = |sig: c_int| {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig as c_long,
                &dfl as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                8 as c_long,
            )
        };
        if s.handlers_cleared {
            // The handlers were reset by the kernel at the clone; SIGPIPE,
            // ignored (by Rust), is the one left.
            set_default(libc::SIGPIPE);
        } else {
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
                    set_default(sig);
                }
            }
        }
        // Own session, hence own process group: a timeout can kill the
        // whole tree, and the command has no controlling terminal.
        if libc::syscall(libc::SYS_setsid) < 0 {
            return fail();
        }
        // Back to the normal OOM badness, before the user switch (our own
        // /proc file, writable while we are root). Errors are ignored: the
        // only ones are no /proc or no permission (an agent not run as
        // root, which could not lower its own either), and a command must
        // not fail for it — it then keeps the agent's value, as before.
        if s.oom_reset {
            let fd = libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD as c_long,
                c"/proc/self/oom_score_adj".as_ptr(),
                (libc::O_WRONLY | libc::O_CLOEXEC) as c_long,
            );
            if fd >= 0 {
                libc::syscall(libc::SYS_write, fd, c"0".as_ptr(), 1 as c_long);
                libc::syscall(libc::SYS_close, fd);
            }
        }
        // Before setuid: the kernel then marks a user already over it, and
        // the exec fails (EAGAIN) instead of starting one more.
        if let Some(n) = s.nproc {
            let lim = [n, n];
            if libc::syscall(
                libc::SYS_prlimit64,
                0 as c_long,
                libc::RLIMIT_NPROC as c_long,
                lim.as_ptr(),
                std::ptr::null_mut::<u64>(),
            ) != 0
            {
                return fail();
            }
        }
        if let Some((groups, n, gid, uid)) = s.ids
            && (libc::syscall(libc::SYS_setgroups, n as c_long, groups) != 0
                || libc::syscall(libc::SYS_setgid, gid as c_long) != 0
                || libc::syscall(libc::SYS_setuid, uid as c_long) != 0)
        {
            return fail();
        }
        // After dropping privileges, so a directory the user may not enter
        // is an error rather than a root-granted favour.
        if libc::syscall(libc::SYS_chdir, s.cwd) != 0 {
            let e = fail();
            if s.cwd_fallback.is_null() || libc::syscall(libc::SYS_chdir, s.cwd_fallback) != 0 {
                return e;
            }
        }
        for (to, &from) in s.stdio.iter().enumerate() {
            if libc::syscall(libc::SYS_dup3, from as c_long, to as c_long, 0 as c_long) < 0 {
                return fail();
            }
        }
        // Nothing else: the agent's own descriptors are close-on-exec, but
        // one it inherited without the flag (from whatever started it, when
        // that is not systemd) would reach the command. Best effort: a
        // kernel before 5.9 has no close_range, and only such a descriptor
        // leaks there.
        libc::syscall(
            libc::SYS_close_range,
            3 as c_long,
            c_long::from(u32::MAX),
            0 as c_long,
        );
        let empty: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as c_long,
            &empty as *const u64,
            std::ptr::null_mut::<u64>(),
            8 as c_long,
        );
        libc::syscall(libc::SYS_execve, s.path, s.argv, s.envp);
        fail()
    }
}

/// `fd` itself when it is above 0–2, else a close-on-exec duplicate that
/// is (so that setting up the child's 0–2 cannot clobber another source).
pub fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    /// The dispositions and mask a child execs with, by either way of
    /// resetting our handlers: from `/proc/self/status` of a shell.
    fn child_signals(clear_sighand: bool) -> String {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let w = above_stdio(w).unwrap();
        let null = nix::fcntl::open(
            c"/dev/null",
            nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        let null = above_stdio(null).unwrap();
        let argv = [
            c"/bin/sh",
            c"-c",
            c"grep -E '^Sig(Blk|Ign)' /proc/self/status",
        ];
        let spec = Spec {
            argv: &argv,
            envp: &[],
            stdio: [null.as_fd(), w.as_fd(), null.as_fd()],
            ids: None,
            cwd: c"/",
            cwd_fallback: None,
            cgroup: None,
            nproc: None,
            oom_reset: false,
        };
        let child = spawn_as(&spec, clear_sighand).unwrap();
        // Our copy of the write end, or the read below never ends.
        drop(w);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(child.pid, &mut status, 0) };
        assert_eq!(status, 0, "{out}");
        out
    }

    /// Both ways give what std's `Command` gives a child: nothing blocked,
    /// SIGPIPE not ignored (this test binary ignores it, as every Rust
    /// program does).
    #[test]
    fn a_child_starts_with_default_signals_either_way() {
        let pipe_bit = 1u64 << (libc::SIGPIPE - 1);
        for clear in [true, false] {
            let out = child_signals(clear);
            let field = |name: &str| {
                let line = out.lines().find(|l| l.starts_with(name)).unwrap();
                u64::from_str_radix(line.rsplit('\t').next().unwrap(), 16).unwrap()
            };
            assert_eq!(field("SigBlk:"), 0, "clear_sighand {clear}: {out}");
            assert_eq!(
                field("SigIgn:") & pipe_bit,
                0,
                "clear_sighand {clear}: {out}"
            );
        }
    }

    /// Linux 5.5 and later take `CLONE_CLEAR_SIGHAND` (the child then makes
    /// one `rt_sigaction` instead of ~70); an older kernel's refusal is
    /// remembered, and its children reset the handlers themselves.
    #[test]
    fn the_kernel_resets_the_handlers_where_it_can() {
        let release = nix::sys::utsname::uname().unwrap();
        let release = release.release().to_string_lossy().into_owned();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        child_signals(true);
        let refused = NO_CLEAR_SIGHAND.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(refused, (major, minor) < (5, 5), "Linux {release}");
    }
}
