//! A sandbox kept with `labctl try --keep` ([`crate::LocalAgent::keep_sandbox`]):
//! how to get back in (`--enter DIR`, or `nsenter` into [`init_pid`]), how
//! to grade it again (`--grade DIR`: [`agent`]) and how to end it
//! (`--stop DIR`).

use crate::Error;
use crate::sandbox::{INIT_PID_FILE, KEEPER_PID_FILE, KEEPER_VERB, NetnsDialer};
use lab_agent_client::{Client, ClientBuilder};
use nix::sched::{CloneFlags, setns};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};
use std::ffi::{CString, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long `--stop` waits for the sandbox after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(6);

fn read_pid(path: &Path) -> Option<i32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The PID of the kept sandbox's init, as the host sees it.
pub fn init_pid(dir: &Path) -> Option<i32> {
    read_pid(&dir.join(INIT_PID_FILE))
}

/// The keeper's PID, if that process is still the keeper of `dir` (a PID
/// may have been reused since).
fn live_keeper(dir: &Path) -> Result<Option<Pid>, Error> {
    let Some(pid) = read_pid(&dir.join(KEEPER_PID_FILE)) else {
        return Err(Error::usage(format!(
            "`{}` is not the try dir of a kept sandbox (it has no `{KEEPER_PID_FILE}`)",
            dir.display()
        ))
        .hint("`labctl try --keep` prints the dir to give"));
    };
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let ours = args.contains(&KEEPER_VERB.as_bytes())
        && args.contains(&dir.as_os_str().as_bytes())
        && !is_zombie(pid);
    Ok(ours.then(|| Pid::from_raw(pid)))
}

fn is_zombie(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// The agent of a kept sandbox, to grade it again: a client that reaches
/// it inside the sandbox's network namespace, the lab it was started
/// with, and its `LAB_DIR`.
#[derive(Debug)]
pub struct KeptAgent {
    pub client: Client,
    /// The lab's folder on this machine (its checks as they are now).
    pub lab: PathBuf,
    /// The staged `$LAB_DIR` the setup saw.
    pub lab_dir: String,
}

/// `labctl try --grade DIR`: the kept sandbox's agent.
pub fn agent(dir: &Path) -> Result<KeptAgent, Error> {
    let dir = &absolute(dir)?;
    let keeper = running(dir)?;
    let file = |name: &str| dir.join(name);
    let addr = lab_agent_proto::addr_file::read(&file("addr")).ok_or_else(|| {
        Error::usage(format!(
            "the kept sandbox `{}` has no agent address (`addr`)",
            dir.display()
        ))
    })?;
    let token = lab_agent_proto::token_file::read_token_file(&file("token"))
        .map_err(|e| Error::usage(e.to_string()))?;
    let lab = fs::read_to_string(file("source")).map_err(|e| {
        Error::usage(format!("failed to read `{}`", file("source").display()))
            .with_source(e)
            .hint("a sandbox kept by an older `labctl`: give the lab's folder, `labctl try LAB_DIR --grade DIR`")
    })?;
    let dialer = NetnsDialer::new(keeper.as_raw() as u32).map_err(|e| {
        Error::usage("failed to open the sandbox's network namespace").with_source(e)
    })?;
    let client = ClientBuilder::default()
        .dialer(std::sync::Arc::new(dialer))
        .build(&format!("http://{addr}"), &token)
        .map_err(|e| Error::usage("failed to make a client for the kept agent").with_source(e))?;
    Ok(KeptAgent {
        client,
        lab: PathBuf::from(lab),
        lab_dir: file("lab").to_string_lossy().into_owned(),
    })
}

/// The live keeper of `dir`, else an error saying what to do.
fn running(dir: &Path) -> Result<Pid, Error> {
    live_keeper(dir)?.ok_or_else(|| {
        Error::usage(format!("the sandbox of `{}` is not running", dir.display())).hint(format!(
            "remove what is left with `labctl try --stop {}`",
            dir.display()
        ))
    })
}

/// `labctl try --enter DIR [-- COMMAND…]`: joins the sandbox's namespaces
/// (as `nsenter` does), then forks, so the command is in its PID namespace
/// too; returns its exit status (128 + N when signal N killed it).
pub fn enter(dir: &Path, command: &[OsString]) -> Result<u8, Error> {
    let dir = &absolute(dir)?;
    running(dir)?;
    let init = init_pid(dir)
        .ok_or_else(|| Error::usage(format!("`{}` has no `{INIT_PID_FILE}`", dir.display())))?;
    let mut joined = Vec::new();
    for (ns, flag) in [
        ("ipc", CloneFlags::CLONE_NEWIPC),
        ("uts", CloneFlags::CLONE_NEWUTS),
        ("net", CloneFlags::CLONE_NEWNET),
        ("pid", CloneFlags::CLONE_NEWPID),
        ("mnt", CloneFlags::CLONE_NEWNS),
    ] {
        let path = format!("/proc/{init}/ns/{ns}");
        let f = fs::File::open(&path)
            .map_err(|e| Error::usage(format!("failed to open `{path}`")).with_source(e))?;
        joined.push((f, flag, path));
    }
    // All opened first: once in the mount namespace, `/proc` is the sandbox's.
    for (f, flag, path) in &joined {
        setns(f, *flag)
            .map_err(|e| Error::usage(format!("failed to join `{path}`")).with_source(e))?;
    }
    let argv: Vec<CString> = if command.is_empty() {
        let shell = if Path::new("/bin/bash").exists() {
            "/bin/bash"
        } else {
            "/bin/sh"
        };
        vec![
            CString::new(shell).expect("no NUL"),
            CString::new("-l").expect("no NUL"),
        ]
    } else {
        command
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| Error::usage("the command has a NUL byte"))?
    };
    // SAFETY: `labctl --enter` has started no thread (no runtime); the
    // child only execs.
    match unsafe { fork() }.map_err(|e| Error::usage("failed to fork").with_source(e))? {
        ForkResult::Child => {
            let _ = nix::unistd::chdir("/");
            let e = nix::unistd::execvp(&argv[0], &argv).unwrap_err();
            eprintln!(
                "labctl: failed to run `{}` in the sandbox: {e}",
                argv[0].to_string_lossy()
            );
            std::process::exit(127);
        }
        ForkResult::Parent { child } => loop {
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, code)) => return Ok(code as u8),
                Ok(WaitStatus::Signaled(_, sig, _)) => {
                    return Ok(128 + sig as u8);
                }
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    return Err(Error::usage("failed to wait for the command").with_source(e));
                }
            }
        },
    }
}

/// `labctl try --stop DIR`: SIGTERM to the keeper (the agent stops, the
/// PID namespace ends), SIGKILL after a grace, then the try dir goes.
pub fn stop(dir: &Path) -> Result<(), Error> {
    let dir = &absolute(dir)?;
    if let Some(keeper) = live_keeper(dir)? {
        let _ = kill(keeper, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while live_keeper(dir)?.is_some() {
            if Instant::now() >= deadline {
                eprintln!(
                    "warning: the sandbox did not stop within {}s of SIGTERM; killing it",
                    STOP_GRACE.as_secs()
                );
                let _ = kill(keeper, Signal::SIGKILL);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        while live_keeper(dir)?.is_some() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    fs::remove_dir_all(dir).map_err(|e| {
        Error::usage(format!("failed to remove `{}`", dir.display())).with_source(e)
    })?;
    eprintln!("stopped the sandbox and removed `{}`", dir.display());
    Ok(())
}

/// The keeper's command line names the dir as `labctl try` gave it: an
/// absolute path.
fn absolute(dir: &Path) -> Result<std::path::PathBuf, Error> {
    std::path::absolute(dir)
        .map_err(|e| Error::usage(format!("failed to resolve `{}`", dir.display())).with_source(e))
}
