//! The keeper's command line: written by the runner ([`keeper_command`])
//! and read back by the runner ([`KeeperArgs::parse`]) in the binary that
//! started the sandbox (`/proc/self/exe`), which only has to call
//! [`run_keeper_if_asked`] first thing in `main`. Both ends are here, so
//! the front end's own parser never sees it.

use super::{Image, NAMESPACES, keeper_main, signal_set};
use nix::sched::unshare;
use nix::sys::signal::{SigmaskHow, Signal, sigprocmask};
use nix::unistd::getppid;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// What the keeper is called on its command line (`labctl __sandbox`): the
/// binary that starts a sandbox (`/proc/self/exe`) must call
/// [`run_keeper_if_asked`] before parsing its own arguments.
pub const KEEPER_VERB: &str = "__sandbox";

/// When this process is a sandbox's keeper (its first argument is
/// [`KEEPER_VERB`]): runs it and never returns. Otherwise returns at once.
pub fn run_keeper_if_asked() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|verb| verb != KEEPER_VERB) {
        return;
    }
    match KeeperArgs::parse(args) {
        Ok(args) => keeper_main(&args),
        Err(e) => {
            eprintln!("labctl sandbox: {e} (this command line is written by `labctl try` only)");
            std::process::exit(125)
        }
    }
}

/// The keeper's command line: `keeper_command` writes it, [`KeeperArgs::parse`]
/// reads it back.
#[derive(Debug)]
pub struct KeeperArgs {
    /// The try dir.
    pub dir: PathBuf,
    /// The agent binary (on the host).
    pub agent: PathBuf,
    /// The agent's arguments.
    pub args: Vec<OsString>,
    /// A VM of a session: its name, its hosts file, and the hold until
    /// its network is wired.
    pub vm: VmOptions,
    /// The guest image whose root file system is the sandbox's
    /// (`--sandbox-image`); `None`: this machine's disks.
    pub image: Option<Image>,
}

/// What a sandbox that is one VM of a session adds (all off for a lab of
/// one VM, whose sandbox is as it always was).
#[derive(Debug, Clone, Default)]
pub struct VmOptions {
    /// The sandbox's hostname (its UTS namespace's): the VM's name.
    pub hostname: Option<String>,
    /// Bind the try dir's `HOSTS_FILE` on `/etc/hosts` inside: the
    /// session's names, written beside the token, never into the overlay
    /// (so it is not one of the lab's changes).
    pub hosts: bool,
    /// Start nothing until SIGUSR1: `labctl` wires the sandbox's network
    /// namespace into the session's switch first, so that a setup finds
    /// the network up. A SIGHUP (`labctl` died) or SIGTERM meanwhile ends
    /// the keeper as it would end a running one.
    pub hold: bool,
}

/// The keeper's command: this very binary (`/proc/self/exe`, so a rebuilt
/// `labctl` does not matter), dying with this thread's process and in its
/// own namespaces from its first instruction.
pub(crate) fn keeper_command(
    dir: &Path,
    agent: &Path,
    agent_args: Vec<OsString>,
    vm: &VmOptions,
    image: Option<&Image>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("/proc/self/exe");
    cmd.arg(KEEPER_VERB)
        .arg("--dir")
        .arg(dir)
        .arg("--agent")
        .arg(agent);
    if let Some(name) = &vm.hostname {
        cmd.arg("--hostname").arg(name);
    }
    if vm.hosts {
        cmd.arg("--hosts");
    }
    if vm.hold {
        cmd.arg("--hold");
    }
    if let Some(image) = image {
        cmd.arg("--image").arg(&image.path);
        cmd.arg("--image-at").arg(format!(
            "{}:{}:{}",
            image.offset,
            image.size,
            image.partition.unwrap_or(0)
        ));
    }
    cmd.arg("--").args(agent_args);
    let parent = nix::unistd::getpid();
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGHUP)?;
            // `labctl` died before the line above: nobody would stop us.
            if getppid() != parent {
                return Err(io::Error::other("labctl exited"));
            }
            unshare(NAMESPACES)?;
            // Blocked before the exec (a mask survives it): a SIGUSR1 that
            // releases a held keeper early waits for its `sigwait`.
            sigprocmask(
                SigmaskHow::SIG_BLOCK,
                Some(&signal_set(&[Signal::SIGUSR1])),
                None,
            )?;
            Ok(())
        });
    }
    cmd
}

impl KeeperArgs {
    /// The arguments after [`KEEPER_VERB`], as `keeper_command` writes them.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<KeeperArgs, String> {
        let mut args = args.into_iter();
        let (mut dir, mut agent, mut vm) = (None, None, VmOptions::default());
        let (mut image, mut at) = (None, None);
        let value = |flag: &str, v: Option<OsString>| v.ok_or(format!("`{flag}` needs a value"));
        while let Some(arg) = args.next() {
            match arg.to_str() {
                Some("--dir") => dir = Some(PathBuf::from(value("--dir", args.next())?)),
                Some("--agent") => agent = Some(PathBuf::from(value("--agent", args.next())?)),
                Some("--hostname") => {
                    let name = value("--hostname", args.next())?;
                    vm.hostname = Some(name.into_string().map_err(|_| "a hostname is UTF-8")?);
                }
                Some("--hosts") => vm.hosts = true,
                Some("--hold") => vm.hold = true,
                Some("--image") => image = Some(PathBuf::from(value("--image", args.next())?)),
                Some("--image-at") => {
                    let v = value("--image-at", args.next())?;
                    let n: Vec<u64> = v
                        .to_str()
                        .unwrap_or_default()
                        .split(':')
                        .filter_map(|n| n.parse().ok())
                        .collect();
                    let [offset, size, part] = n[..] else {
                        return Err(format!("`--image-at {v:?}` is not OFFSET:SIZE:PARTITION"));
                    };
                    at = Some((offset, size, u32::try_from(part).ok().filter(|p| *p > 0)));
                }
                Some("--") => break,
                _ => return Err(format!("unexpected argument {arg:?}")),
            }
        }
        let image = match (image, at) {
            (Some(path), Some((offset, size, partition))) => Some(Image {
                path,
                offset,
                size,
                partition,
            }),
            (None, None) => None,
            _ => return Err("`--image` and `--image-at` go together".into()),
        };
        Ok(KeeperArgs {
            dir: dir.ok_or("`--dir` is missing")?,
            agent: agent.ok_or("`--agent` is missing")?,
            args: args.collect(),
            vm,
            image,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`keeper_command`] writes, [`KeeperArgs::parse`] reads back.
    #[test]
    fn the_command_line_reads_back() {
        let vm = VmOptions {
            hostname: Some("server".into()),
            hosts: true,
            hold: true,
        };
        let image = Image {
            path: "/img/disk 1.raw".into(),
            offset: 1_048_576,
            size: 3 << 30,
            partition: Some(1),
        };
        let cmd = keeper_command(
            Path::new("/tmp/try x"),
            Path::new("/a/lab-agent"),
            vec!["serve".into(), "--".into(), "--hold".into()],
            &vm,
            Some(&image),
        );
        let mut written: Vec<OsString> = cmd.as_std().get_args().map(OsString::from).collect();
        assert_eq!(written.remove(0), KEEPER_VERB);
        let back = KeeperArgs::parse(written).unwrap();
        assert_eq!(back.dir, Path::new("/tmp/try x"));
        assert_eq!(back.agent, Path::new("/a/lab-agent"));
        assert_eq!(back.args, ["serve", "--", "--hold"]);
        assert_eq!(back.vm.hostname.as_deref(), Some("server"));
        assert!(back.vm.hosts && back.vm.hold);
        assert_eq!(back.image, Some(image));
        let plain =
            KeeperArgs::parse(["--dir", "/d", "--agent", "/a", "--"].map(OsString::from)).unwrap();
        assert!(plain.vm.hostname.is_none() && !plain.vm.hosts && !plain.vm.hold);
        assert!(plain.image.is_none());
        assert!(KeeperArgs::parse(["--agent", "/a"].map(OsString::from)).is_err());
        assert!(KeeperArgs::parse(["--dir"].map(OsString::from)).is_err());
    }
}
