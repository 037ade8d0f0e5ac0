//! The local target of `labctl try`: a `lab-agent serve` on loopback,
//! running the lab's setup itself, in the throwaway sandbox of
//! [`crate::sandbox`] (or, with `--host`, on this machine itself), with
//! everything it needs in one temp dir that goes away afterwards:
//!
//! ```text
//! /tmp/labctl-try-XXXX/   0711: others may pass (checks run as `student`)
//!   token                 0600, fresh 32 random bytes
//!   addr                  written by the agent once it listens
//!   agent.log             the agent's (and the sandbox keeper's) stdout and stderr
//!   state/                the agent's setup.json and setup.log
//!   setup/<script>        a copy of the lab's setup script, 0755 (a lab without
//!                         one: `lab-agent setup` records "succeeded" first)
//!   lab/                  the staged `[files].source`: setup's and checks' $LAB_DIR
//!   env                   LAB_VM, LAB_VMS, LAB_PARAM_*, when the lab has any
//!   source                the lab's folder (`labctl try --grade DIR` reads it)
//!   sandbox/ lab-agent    the sandbox's mount points; sandbox.pid, init.pid,
//!   sandbox.pid …         layers, kept: see `sandbox/mod.rs`
//! ```

use crate::Error;
use crate::changes::{self, Changes};
use crate::sandbox;
use lab_agent_client::{Client, ClientBuilder};
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_proto::addr_file;
use lab_agent_proto::lab::Lab;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long the agent gets to bind and write its address.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the agent gets to exit after SIGTERM before its group is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
const AGENT_NAME: &str = "lab-agent";

/// A running local agent and its temp dir. Dropping it kills the agent's
/// process group and removes the dir; [`LocalAgent::stop`] does it politely.
#[derive(Debug)]
pub struct LocalAgent {
    dir: TempDir,
    child: Option<tokio::process::Child>,
    url: String,
    token: String,
    /// In a sandbox: the keeper's PID and the way into its network.
    sandbox: Option<(u32, sandbox::NetnsDialer)>,
    /// One VM of a session: its name.
    vm: Option<String>,
}

/// One VM of a session, as [`LocalAgent::launch`] starts it (see
/// [`crate::session`]).
#[derive(Debug)]
pub(crate) struct SessionVm {
    /// Its name: the sandbox's hostname.
    pub(crate) name: String,
    /// The session's `/etc/hosts`: every VM's name and address.
    pub(crate) hosts: String,
}

impl LocalAgent {
    /// Stages `lab`, writes a token and starts `agent` (any build) in a
    /// sandbox of this machine (of `image`'s root file system, when given),
    /// or on the machine itself when `in_sandbox` is false; returns once the
    /// agent listens (its setup runs on).
    pub async fn start(
        lab: &Lab,
        agent: &Path,
        in_sandbox: bool,
        image: Option<&sandbox::Image>,
    ) -> Result<LocalAgent, Error> {
        let mut started = LocalAgent::launch(lab, agent, in_sandbox, image, None)?;
        started.listening().await?;
        Ok(started)
    }

    /// [`LocalAgent::start`] up to the agent's start: with `vm` (one VM of
    /// a session, always in a sandbox), its sandbox is named and held
    /// until [`LocalAgent::release`], and nothing runs in it yet.
    pub(crate) fn launch(
        lab: &Lab,
        agent: &Path,
        in_sandbox: bool,
        image: Option<&sandbox::Image>,
        vm: Option<&SessionVm>,
    ) -> Result<LocalAgent, Error> {
        let dir = TempDir::new()?;
        let io = |what: &str, path: &Path, e: std::io::Error| {
            Error::usage(format!("failed to {what} `{}`", path.display())).with_source(e)
        };

        let token = new_token()?;
        let token_path = dir.path.join("token");
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&token_path)
            .and_then(|mut f| f.write_all(token.as_bytes()))
            .map_err(|e| io("write", &token_path, e))?;

        // For `labctl try --grade DIR`: the lab whose checks to run.
        let source = dir.path.join("source");
        let lab_dir = std::path::absolute(&lab.dir).unwrap_or_else(|_| lab.dir.clone());
        fs::write(&source, lab_dir.as_os_str().as_encoded_bytes())
            .map_err(|e| io("write", &source, e))?;
        let state = dir.path.join("state");
        fs::create_dir(&state).map_err(|e| io("create", &state, e))?;
        let staged = dir.path.join("lab");
        stage_files(lab, &staged)?;

        let addr_file = dir.path.join("addr");
        let log_path = dir.path.join("agent.log");
        let log = fs::File::create(&log_path).map_err(|e| io("create", &log_path, e))?;
        let log2 = log.try_clone().map_err(|e| io("open", &log_path, e))?;

        let script = match lab.setup_script_path() {
            Some(src) => {
                let setup_dir = dir.path.join("setup");
                fs::create_dir(&setup_dir).map_err(|e| io("create", &setup_dir, e))?;
                let name = src.file_name().expect("a script path has a file name");
                let dst = setup_dir.join(name);
                fs::copy(&src, &dst).map_err(|e| io("copy the setup script to", &dst, e))?;
                set_mode(&dst, 0o755)?;
                Some(dst)
            }
            None => {
                // Nothing to set up: record that as a lab VM does (`lab-agent
                // setup` without a script), so the agent is ready at once and
                // never reports a setup script running that does not exist.
                record_no_setup(agent, &state, &log)?;
                None
            }
        };

        let on_vm = vm.map_or(String::new(), |v| format!(" (VM `{}`)", v.name));
        eprintln!(
            "staged `{}`{on_vm} in `{}`; starting `{}`",
            lab.name,
            staged.display(),
            agent.display()
        );
        let mut args = addr_file::serve_args(
            addr_file::LOOPBACK_ANY_PORT,
            &addr_file,
            &token_path,
            &state,
        );
        args.push("--no-cloud-init".into());
        if let Some(script) = &script {
            args.extend([
                "--run-setup".into(),
                script.into(),
                "--setup-timeout".into(),
                lab.setup_timeout_secs().to_string().into(),
            ]);
        }
        args.extend(["--lab-dir".into(), staged.into()]);
        let mut options = sandbox::VmOptions::default();
        if !lab.vm_env.is_empty() {
            // What the payload's `/etc/lab-agent/env` is in a VM: its
            // `LAB_VM`, `LAB_VMS` and parameters, for the setup and every
            // command.
            let env_path = dir.path.join("env");
            let vars = lab.vm_env.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&env_path)
                .and_then(|mut f| f.write_all(&lab_agent_proto::guest::render_env_file(vars)))
                .map_err(|e| io("write", &env_path, e))?;
            args.extend(["--env-file".into(), env_path.into()]);
        }
        if let Some(vm) = vm {
            let hosts = dir.path.join(sandbox::HOSTS_FILE);
            fs::write(&hosts, &vm.hosts).map_err(|e| io("write", &hosts, e))?;
            set_mode(&hosts, 0o644)?;
            options = sandbox::VmOptions {
                hostname: Some(vm.name.clone()),
                hosts: true,
                hold: true,
            };
        }
        let in_sandbox = in_sandbox || vm.is_some();
        let mut cmd = if in_sandbox {
            let mounts = dir.path.join(sandbox::MOUNT_DIR);
            fs::create_dir(&mounts).map_err(|e| io("create", &mounts, e))?;
            let agent_file = dir.path.join(sandbox::AGENT_FILE);
            fs::write(&agent_file, "").map_err(|e| io("create", &agent_file, e))?;
            sandbox::keeper_command(&dir.path, agent, args, &options, image)
        } else {
            let mut cmd = tokio::process::Command::new(agent);
            cmd.args(args);
            cmd
        };
        cmd.stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Its own process group: Ctrl-C reaches labctl alone, which
            // stops the agent in order, and a final kill of the group
            // catches whatever the agent left behind.
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| {
            Error::usage(format!("failed to start `{}`", agent.display())).with_source(e)
        })?;
        let sandbox = match child.id().filter(|_| in_sandbox) {
            Some(pid) => {
                let pid_file = dir.path.join(sandbox::KEEPER_PID_FILE);
                fs::write(&pid_file, pid.to_string()).map_err(|e| io("write", &pid_file, e))?;
                let dialer = sandbox::NetnsDialer::new(pid).map_err(|e| {
                    Error::usage("failed to open the sandbox's network namespace").with_source(e)
                })?;
                Some((pid, dialer))
            }
            None => None,
        };
        Ok(LocalAgent {
            dir,
            child: Some(child),
            url: String::new(),
            token,
            sandbox,
            vm: vm.map(|v| v.name.clone()),
        })
    }

    /// The sandbox keeper's PID, where there is one.
    pub(crate) fn keeper(&self) -> Option<u32> {
        self.sandbox.as_ref().map(|(pid, _)| *pid)
    }

    /// Lets a sandbox held at [`LocalAgent::launch`] start its agent.
    pub(crate) fn release(&self) {
        if let Some(pid) = self.keeper() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGUSR1);
        }
    }

    /// Waits until the launched agent listens.
    pub(crate) async fn listening(&mut self) -> Result<(), Error> {
        let addr = self.await_addr(&self.dir.path.join("addr")).await?;
        self.url = format!("http://{addr}");
        match (&self.vm, &self.sandbox) {
            (Some(vm), _) => eprintln!(
                "VM `{vm}`: agent listening on {} inside its sandbox",
                self.url
            ),
            (None, Some(_)) => eprintln!("agent listening on {} inside the sandbox", self.url),
            (None, None) => eprintln!("agent listening on {}", self.url),
        }
        Ok(())
    }

    /// Polls for the address file, watching that the agent (or its
    /// sandbox) is still alive: [`addr_file::wait`]'s loop, on the runtime's
    /// timer and with the failures `try` explains.
    async fn await_addr(&mut self, addr_file: &Path) -> Result<String, Error> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(addr) = addr_file::read(addr_file) {
                return Ok(addr.to_string());
            }
            let child = self.child.as_mut().expect("started");
            if let Ok(Some(status)) = child.try_wait() {
                self.print_log_tail();
                if self.sandbox.is_some() {
                    // The keeper reports its own failures (exit 125).
                    return Err(Error::unreachable(format!(
                        "the sandbox or the agent in it exited at start ({status})"
                    ))
                    .hint(
                        "its log is above; where the sandbox cannot be built (no overlayfs, \
                           no mount namespaces), `--host` runs the lab on this machine itself \
                           and `--vm IMAGE` in a VM",
                    ));
                }
                return Err(Error::unreachable(format!(
                    "`lab-agent serve` exited at start ({status})"
                ))
                .hint("its log is above; `lab-agent serve --help` lists the flags it takes"));
            }
            if Instant::now() >= deadline {
                self.print_log_tail();
                return Err(Error::unreachable(format!(
                    "`lab-agent serve` did not write its address to `{}` within {}s",
                    addr_file.display(),
                    START_TIMEOUT.as_secs()
                ))
                .hint("is this a lab-agent that knows `--addr-file`? Pass a current one with `--agent`"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A client for the agent. Checks may take as long as their timeout;
    /// the client adds its own margin on top.
    pub fn client(&self) -> Result<Client, lab_agent_client::Error> {
        let mut builder = ClientBuilder::default().long_poll(Duration::from_secs(2));
        if let Some((_, dialer)) = &self.sandbox {
            builder = builder.dialer(std::sync::Arc::new(dialer.clone()));
        }
        builder.build(&self.url, &self.token)
    }

    /// The try dir.
    pub fn dir(&self) -> &Path {
        &self.dir.path
    }

    /// What the lab changed in the sandbox; `None` on the host.
    pub fn changes(&self) -> Option<Result<Changes, Error>> {
        let (keeper, _) = self.sandbox.as_ref()?;
        Some(changes::collect(*keeper, &self.dir.path).map_err(|e| {
            Error::usage("failed to read what the lab changed in the sandbox").with_source(e)
        }))
    }

    /// `--keep` in a sandbox: the keeper no longer dies with `labctl`, and
    /// neither the sandbox nor the try dir goes when this is dropped.
    /// `labctl try --stop DIR` ends it.
    pub async fn keep_sandbox(mut self) -> Result<(), Error> {
        let Some((keeper, _)) = self.sandbox else {
            return Err(Error::usage("not a sandbox"));
        };
        let kept = self.dir.path.join(sandbox::KEPT_FILE);
        let _ = kill(Pid::from_raw(keeper as i32), Signal::SIGUSR2);
        let deadline = Instant::now() + START_TIMEOUT;
        while !kept.exists() {
            if Instant::now() >= deadline {
                return Err(Error::unreachable(
                    "the sandbox did not confirm that it outlives labctl",
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Dropped, the child would be killed (`kill_on_drop`).
        std::mem::forget(self.child.take());
        self.dir.keep();
        Ok(())
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn token_file(&self) -> PathBuf {
        self.dir.path.join("token")
    }

    /// Setup's and the checks' `LAB_DIR`: the staged copy.
    pub fn guest_lab_dir(&self) -> &str {
        &self.dir.staged
    }

    /// Prints the end of the agent's own log (start-up errors, crashes).
    pub fn print_log_tail(&self) {
        let log = fs::read_to_string(self.dir.path.join("agent.log")).unwrap_or_default();
        let lines: Vec<&str> = log.trim_end().lines().collect();
        if lines.is_empty() {
            return;
        }
        eprintln!("agent log (last lines):");
        for l in &lines[lines.len().saturating_sub(20)..] {
            eprintln!("  │ {l}");
        }
    }

    /// SIGTERM, up to `STOP_GRACE` to exit, then SIGKILL to the whole
    /// process group; then the temp dir goes.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                let pid = Pid::from_raw(pid as i32);
                let _ = kill(pid, Signal::SIGTERM);
                if tokio::time::timeout(STOP_GRACE, child.wait())
                    .await
                    .is_err()
                {
                    eprintln!(
                        "warning: the agent did not stop within {}s of SIGTERM; killing it",
                        STOP_GRACE.as_secs()
                    );
                }
                let _ = killpg(pid, Signal::SIGKILL);
                let _ = child.wait().await;
            }
        }
        self.dir.remove();
    }
}

impl Drop for LocalAgent {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            if let Some(pid) = child.id() {
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }
}

/// The temp dir; removed on drop.
#[derive(Debug)]
struct TempDir {
    /// Removes the dir (if `remove` has not) when dropped; `None` once kept.
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    staged: String,
}

impl TempDir {
    fn new() -> Result<TempDir, Error> {
        let dir = crate::tempdir::create("labctl-try", 0o711)
            .map_err(|e| Error::usage("failed to create a temp dir").with_source(e))?;
        let path = dir.path().to_owned();
        // Passable by others (checks may run as another user), whatever the umask.
        set_mode(&path, 0o711)?;
        Ok(TempDir {
            staged: path.join("lab").to_string_lossy().into_owned(),
            path,
            dir: Some(dir),
        })
    }

    fn keep(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = d.keep();
        }
    }

    fn remove(&self) {
        if self.dir.is_some() && self.path.exists() {
            if let Err(e) = fs::remove_dir_all(&self.path) {
                eprintln!("warning: failed to remove `{}`: {e}", self.path.display());
            }
        }
    }
}

/// Copies `[files].source` to `staged`, keeping each file's mode.
fn stage_files(lab: &Lab, staged: &Path) -> Result<(), Error> {
    let files = lab.collect_files()?;
    let io = |path: &Path, e: std::io::Error| {
        Error::usage(format!("failed to stage `{}`", path.display())).with_source(e)
    };
    fs::create_dir(staged).map_err(|e| io(staged, e))?;
    set_mode(staged, 0o755)?;
    for f in files {
        let dst = staged.join(&f.path);
        if let Some(parent) = dst.parent() {
            if !parent.exists() {
                fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
        }
        fs::write(&dst, &f.contents).map_err(|e| io(&dst, e))?;
        set_mode(&dst, f.mode)?;
    }
    // Folders made by create_dir_all follow the umask; make them passable.
    for entry in walk_dirs(staged) {
        set_mode(&entry, 0o755)?;
    }
    Ok(())
}

fn walk_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(root) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(e.path());
                out.extend(walk_dirs(&e.path()));
            }
        }
    }
    out
}

/// `lab-agent setup --state-dir STATE` without a script: records a setup
/// that succeeded, as cloud-init's `runcmd` does for a lab without one.
fn record_no_setup(agent: &Path, state: &Path, log: &fs::File) -> Result<(), Error> {
    let clone = |f: &fs::File| f.try_clone().map(Stdio::from);
    let status = std::process::Command::new(agent)
        .arg("setup")
        .arg("--state-dir")
        .arg(state)
        .stdin(Stdio::null())
        .stdout(clone(log).unwrap_or_else(|_| Stdio::null()))
        .stderr(clone(log).unwrap_or_else(|_| Stdio::null()))
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(Error::usage(format!(
            "`{} setup` (recording that there is no setup script) failed: {s}",
            agent.display()
        ))),
        Err(e) => {
            Err(Error::usage(format!("failed to start `{}`", agent.display())).with_source(e))
        }
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| {
        Error::usage(format!("failed to set the mode of `{}`", path.display())).with_source(e)
    })
}

fn new_token() -> Result<String, Error> {
    lab_agent_cloudinit::token::generate().map_err(|e| {
        Error::usage("failed to get random bytes for a token").with_source(e.to_string())
    })
}

/// The agent to run. `--agent` or `$LAB_AGENT_BIN` when given; else
/// [`agent_bin`]'s places (next to `labctl`, the static build); else, when
/// `labctl` runs from a cargo build dir of this workspace, the agent built
/// there, building it if need be (`cargo build -p lab-agent`, so that
/// `cargo run -p labctl -- try LAB` works from a
/// fresh clone); else this source tree's `target/`, else `PATH`. Local mode
/// runs the agent here, so any build will do.
pub fn find_agent(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    let given = explicit
        .map(|p| (p.to_owned(), format!("`--agent {}`", p.display())))
        .or_else(|| {
            std::env::var_os("LAB_AGENT_BIN").map(|p| {
                let p = PathBuf::from(p);
                let shown = format!("`LAB_AGENT_BIN={}`", p.display());
                (p, shown)
            })
        });
    if let Some((path, shown)) = given {
        if !path.is_file() {
            return Err(Error::usage(format!("{shown} is not a file")));
        }
        return Ok(agent_bin::find(Some(&path), Linkage::Any)?);
    }
    let not_found = match agent_bin::find(None, Linkage::Any) {
        Ok(p) => {
            if let Some(w) = agent_bin::stale_warning(&p) {
                eprintln!("warning: {w}");
            }
            return Ok(p);
        }
        Err(e) => e,
    };
    let workspace = source_workspace();
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_owned));
    if let (Some(ws), Some(dir)) = (&workspace, &exe_dir) {
        if let Some(built) = build_agent(ws, dir)? {
            return Ok(built);
        }
    }
    let mut others: Vec<PathBuf> = Vec::new();
    if let Some(ws) = &workspace {
        for profile in ["release", "debug"] {
            others.push(ws.join("target").join(profile).join(AGENT_NAME));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        others.extend(std::env::split_paths(&path).map(|d| d.join(AGENT_NAME)));
    }
    if let Some(p) = others.into_iter().find(|p| p.is_file()) {
        return Ok(p);
    }
    Err(not_found.into())
}

/// This crate's workspace, if its sources are still where they were built.
fn source_workspace() -> Option<PathBuf> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_owned();
    (ws.join("Cargo.toml").is_file() && ws.join("agent/Cargo.toml").is_file()).then_some(ws)
}

/// Builds the agent into `exe_dir` when that is a cargo profile dir
/// (`…/debug`, `…/release`) of workspace `ws`; `None` when it is not.
fn build_agent(ws: &Path, exe_dir: &Path) -> Result<Option<PathBuf>, Error> {
    let profile = match exe_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => None,
        Some("release") => Some("--release"),
        _ => return Ok(None),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(&cargo);
    cmd.args(["build", "-p", "lab-agent"]).current_dir(ws);
    if let Some(p) = profile {
        cmd.arg(p);
    }
    let shown = format!(
        "cargo build -p lab-agent{}",
        profile.map_or(String::new(), |p| format!(" {p}"))
    );
    eprintln!("`lab-agent` is not built yet; building it: `{shown}`");
    // cargo's progress goes to stderr; keep our stdout for data.
    let status = cmd
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| Error::usage(format!("failed to run `{shown}`")).with_source(e))?;
    if !status.success() {
        return Err(Error::usage(format!("`{shown}` failed ({status})"))
            .hint("pass a built agent with `--agent PATH`"));
    }
    let built = exe_dir.join(AGENT_NAME);
    Ok(built.is_file().then_some(built))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn an_explicit_agent_must_exist() {
        let err = find_agent(Some(Path::new("/nonexistent/lab-agent"))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Usage);
        assert!(
            err.to_string()
                .contains("`--agent /nonexistent/lab-agent` is not a file")
        );
    }

    #[test]
    fn temp_dirs_are_passable_and_removed() {
        let d = TempDir::new().unwrap();
        let p = d.path.clone();
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o711);
        drop(d);
        assert!(!p.exists());
    }
}
