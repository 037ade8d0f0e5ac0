//! Every process the benchmark starts, and making sure none outlives it.
//!
//! Three layers, because a benchmark that leaves an sshd listening on a
//! shared machine is worse than no benchmark:
//! - [`Proc`] kills (SIGTERM, then SIGKILL) and reaps its process on drop;
//! - each child gets `PR_SET_PDEATHSIG(SIGKILL)`, so it dies with us even
//!   when we are SIGKILLed;
//! - SIGINT/SIGTERM/SIGHUP and the time limit go to one thread that kills
//!   everything still registered, removes the work dir and exits.
//!
//! Children must be spawned from the main thread: the death signal fires
//! when the *thread* that forked them exits.

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static WORK_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// A user to run a child as: ids and supplementary groups, resolved once.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<libc::gid_t>,
    pub home: PathBuf,
    pub shell: PathBuf,
}

impl User {
    pub fn lookup(name: &str) -> io::Result<User> {
        let cname = CString::new(name).map_err(io::Error::other)?;
        // SAFETY: getpwnam returns a pointer into static storage or null; we
        // copy what we need before any other passwd call (single-threaded at
        // this point of the program).
        let pw = unsafe { libc::getpwnam(cname.as_ptr()) };
        if pw.is_null() {
            return Err(io::Error::other(format!(
                "no user `{name}`: bench/run.sh creates it (or pass --user)"
            )));
        }
        // SAFETY: non-null passwd entry from getpwnam.
        let (uid, gid, home, shell) = unsafe {
            let pw = &*pw;
            let s = |p: *const libc::c_char| {
                PathBuf::from(std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
            };
            (pw.pw_uid, pw.pw_gid, s(pw.pw_dir), s(pw.pw_shell))
        };
        let mut groups = vec![0 as libc::gid_t; 64];
        let mut n = groups.len() as libc::c_int;
        // SAFETY: buffer of n entries; n is updated to the count.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc < 0 {
            return Err(io::Error::other(format!(
                "user `{name}` has too many groups"
            )));
        }
        groups.truncate(n as usize);
        Ok(User {
            name: name.to_owned(),
            uid,
            gid,
            groups,
            home,
            shell,
        })
    }

    /// The clean login environment lab-agent gives its commands (API.md),
    /// so that every variant's shell starts from the same place.
    pub fn login_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HOME", self.home.display().to_string()),
            ("USER", self.name.clone()),
            ("LOGNAME", self.name.clone()),
            ("SHELL", self.shell.display().to_string()),
            ("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/games".to_owned()),
        ]
    }
}

/// Makes `cmd` die with us and, when `user` is given, run as that user.
pub fn prepare(cmd: &mut Command, user: Option<&User>) {
    let creds = user.map(|u| (u.groups.clone(), u.gid, u.uid));
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe system calls on data prepared before
    // the fork.
    unsafe {
        cmd.pre_exec(move || {
            if let Some((groups, gid, uid)) = &creds {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            // After the credential change, which would clear it.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// A registered child process, killed and reaped on drop.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    name: String,
}

impl Proc {
    /// Spawns `cmd` (already [`prepare`]d) and registers it.
    pub fn spawn(mut cmd: Command, name: &str) -> io::Result<Proc> {
        let child = cmd
            .spawn()
            .map_err(|e| io::Error::other(format!("failed to start {name}: {e}")))?;
        lock(&RUNNING).push(child.id());
        Ok(Proc {
            child,
            name: name.to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the process has already exited (it should be serving).
    pub fn check_alive(&mut self) -> io::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(io::Error::other(format!(
                "{} exited unexpectedly: {status}",
                self.name
            ))),
        }
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        let pid = self.child.id() as libc::pid_t;
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: plain kill(2) on our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let until = Instant::now() + grace;
            while Instant::now() < until {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        lock(&RUNNING).retain(|&p| p != pid as u32);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// Where the temp files live; removed by [`emergency_exit`] too.
pub fn set_work_dir(dir: PathBuf) {
    *lock(&WORK_DIR) = Some(dir);
}

/// Blocks SIGINT/SIGTERM/SIGHUP in this (the main) thread and every thread
/// started later, and starts the thread that handles them and the time
/// limit. Call first, before any thread or child exists. (Children get an
/// empty signal mask: std resets it before exec.)
pub fn install_guard(time_limit: Duration) {
    // SAFETY: sigset manipulation on a local set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::spawn(move || {
        let mut sig: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals.
        unsafe { libc::sigwait(&set, &mut sig) };
        emergency_exit(&format!("signal {sig}: stopping"), 130);
    });
    std::thread::spawn(move || {
        std::thread::sleep(time_limit);
        emergency_exit(
            &format!(
                "time limit of {} s reached: stopping (raise it with --time-limit)",
                time_limit.as_secs()
            ),
            124,
        );
    });
}

/// Kills every registered child, removes the work dir, exits.
pub fn emergency_exit(why: &str, code: i32) -> ! {
    eprintln!("bench: {why}");
    let pids: Vec<u32> = lock(&RUNNING).clone();
    for &p in &pids {
        // SAFETY: kill(2); a pid we started and have not reaped.
        unsafe { libc::kill(p as libc::pid_t, libc::SIGTERM) };
    }
    std::thread::sleep(Duration::from_millis(300));
    for &p in &pids {
        // SAFETY: as above; then reap it, so nothing is left even as a zombie.
        unsafe {
            libc::kill(p as libc::pid_t, libc::SIGKILL);
            libc::waitpid(p as libc::pid_t, std::ptr::null_mut(), 0);
        }
    }
    if let Some(dir) = lock(&WORK_DIR).take() {
        let _ = std::fs::remove_dir_all(dir);
    }
    std::process::exit(code)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
