//! `labctl try LAB_DIR`: a lab author's whole loop on one machine. Stand
//! up the lab (an agent in a sandbox, on the machine or in a qemu VM; for
//! a session one per VM), wait for its setup with progress, grade, print
//! the report, tear everything down — also on Ctrl-C and on errors. The
//! lab is linted first, as `labctl lint` does. `labctl test` ([`mod@test`]) is
//! the same with the runner's self-test where `try` grades once.
//!
//! Where and how the lab runs, and the checks on the flags, are the
//! runner's ([`lab_runner::trial`]); `flow.rs` waits and grades; this file
//! is the flags, the run (start, watch, keep or stop) and what `--keep`
//! prints.

mod flow;
mod kept;
pub mod test;
pub mod vm;

use super::common;
use super::exit::{Exit, Failure};
use super::findings as inspect;
use lab_runner::systemd;
use lab_runner::trial::{
    Ended, Interrupted, Options, Params, Plan, StartError, Tried, interruptible,
};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Default, clap::Args)]
pub struct TryArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR", required_unless_present_any = ["enter", "stop", "grade"])]
    pub lab: Option<PathBuf>,
    /// List every path the lab changed outside `$LAB_DIR` in the sandbox
    /// (the report always has a one-line summary)
    #[arg(long)]
    pub changes: bool,
    /// Enter a sandbox kept with `--keep` (its try dir): a login shell, or
    /// the COMMAND given after `--`
    #[arg(long, value_name = "DIR", conflicts_with_all = ["stop", "lab", "host"])]
    pub enter: Option<PathBuf>,
    /// Stop a sandbox kept with `--keep` (its try dir) and remove it
    #[arg(long, value_name = "DIR", conflicts_with_all = ["lab", "host"])]
    pub stop: Option<PathBuf>,
    /// Grade a sandbox kept with `--keep` (its try dir) again, with the
    /// lab's checks as they are now (`--check NAME` for some, `--json`)
    #[arg(long, value_name = "DIR", conflicts_with_all = ["enter", "stop", "host", "keep", "sandbox_image", "vm", "kernel"])]
    pub grade: Option<PathBuf>,
    /// With `--enter`: the command to run inside the sandbox
    #[arg(last = true, value_name = "COMMAND", requires = "enter")]
    pub command: Vec<std::ffi::OsString>,
    /// Grade even when setup fails (the exit status stays 4)
    #[arg(long)]
    pub keep_going: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

/// The flags `try` and `test` share: where the lab runs, with what.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct RunArgs {
    /// Run the lab on this machine itself instead of a throwaway sandbox of
    /// it: what the setup (and `test`'s solve) changes stays changed
    #[arg(long)]
    pub host: bool,
    /// The sandbox on this guest image's root file system instead of this
    /// machine's (a raw disk image, e.g. a cloud image converted with
    /// `qemu-img convert -O raw`, or its root file system alone; read-only):
    /// the guest's own users, packages and `/etc`
    #[arg(long, value_name = "IMAGE", conflicts_with_all = ["host", "vm", "kernel"])]
    pub sandbox_image: Option<PathBuf>,
    /// The `lab-agent` binary to run (default: next to `labctl`, the static
    /// build, or built from this source tree; then `PATH`). A VM and
    /// `--sandbox-image` need the static build (`packaging/build-agent.sh`)
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,
    /// Give up waiting for setup after this many seconds (default: the
    /// lab's `[setup].timeout_secs` plus a minute; in a VM, plus 15 minutes
    /// for the boot; at most 86400, a day)
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Print the report as JSON on stdout
    #[arg(long)]
    pub json: bool,
    /// Only the check with this name (repeat for several; `test` still
    /// runs the lab's solve script)
    #[arg(long = "check", value_name = "NAME")]
    pub checks: Vec<String>,
    /// Afterwards (for `test`: after the solve), keep the lab running: a
    /// sandbox is left running after `labctl` exits (`try --enter DIR`,
    /// `--grade DIR`, `--stop DIR`); with `--host`, the agent runs until
    /// Ctrl-C; a VM is left running (it prints how to stop it)
    #[arg(long)]
    pub keep: bool,
    /// LAB_PARAM_KEY for the setup and checks, as `labctl secret --param`
    /// gives it; `VM.KEY=VALUE` for one VM of a session; repeatable
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    #[command(flatten)]
    pub vm: vm::VmArgs,
}

/// A checked `try` or `test`: the runner's [`Plan`] and how to report.
#[derive(Debug)]
pub struct Config {
    pub plan: Plan,
    pub json: bool,
    /// `labctl test`: the solve script's text (`Some(None)`: the lab has
    /// none); `None` for `try`.
    pub test: Option<Option<String>>,
}

impl std::ops::Deref for Config {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        &self.plan
    }
}

impl Config {
    /// `try`'s (`changes`, `keep_going`) or `test`'s flags, checked, and
    /// the lab linted.
    pub fn from_args(
        lab_dir: &Path,
        run: &RunArgs,
        changes: bool,
        keep_going: bool,
    ) -> Result<Config, Failure> {
        let timeout = run
            .timeout
            .map(|secs| common::wait_secs("--timeout", secs, 1))
            .transpose()?;
        let vm = vm::config_from_args(&run.vm)?;
        let opts = Options {
            host: run.host,
            list_changes: changes,
            keep: run.keep,
            keep_going,
            timeout,
            checks: run.checks.clone(),
            agent: run.agent.clone(),
            sandbox_image: run.sandbox_image.clone(),
            params: Params::parse(&run.params)?,
        };
        Plan::check_place(&opts, vm.as_ref())?;
        // Everything `labctl lint` finds, before anything starts: a lab
        // that `labctl secret` would refuse must not pass `try`.
        let budget_agent = vm.as_ref().and(run.agent.as_deref());
        let found = inspect::lint(lab_dir, budget_agent, &opts.params);
        let lab = inspect::report(lab_dir, &found)?;
        Ok(Config {
            plan: Plan::new(lab, opts, vm)?,
            json: run.json,
            test: None,
        })
    }
}

pub fn run(args: &TryArgs) -> Result<Exit, Failure> {
    match (&args.enter, &args.stop, &args.grade, &args.lab) {
        (Some(dir), ..) => kept::enter(dir, &args.command),
        (_, Some(dir), ..) => kept::stop(dir),
        (.., Some(dir), lab) => kept::grade(dir, lab.as_deref(), &args.run),
        (.., Some(lab)) => {
            let config = Config::from_args(lab, &args.run, args.changes, args.keep_going)?;
            run_config(config)
        }
        _ => unreachable!("clap requires LAB_DIR here"),
    }
}

/// Runs a checked config where it asks (one VM or a session; a sandbox,
/// the machine or qemu): `try`'s and `test`'s. Stops it at the end, or
/// leaves it running with `--keep`.
fn run_config(config: Config) -> Result<Exit, Failure> {
    let one = config.lab.vms.is_empty();
    if config.vm.is_none() && !config.sandbox {
        eprintln!(
            "warning: `--host`: the lab's setup runs on this machine itself, as root; what it \
             changes stays changed"
        );
    } else if let (None, Some(what)) = (&config.vm, systemd::mentioned(&config.lab)) {
        eprintln!(
            "note: {what} `systemctl`; the sandbox runs no systemd: if that fails here, try \
             the lab {} with `--vm IMAGE`",
            if one { "in a VM" } else { "on VMs" }
        );
    }
    if let (None, Some(note)) = (
        &config.vm,
        lab_runner::inspect::root_note(&config.lab, None),
    ) {
        eprintln!("{note}");
    }
    let rt = common::runtime()?;
    let tried = Tried::start(&rt, &config).map_err(|e| match e {
        StartError::Failed(e) => Failure::from(e),
        StartError::Interrupted(i) => interrupted(config.what(), i),
    })?;
    let silence = config.vm.as_ref().map_or(Duration::MAX, |v| v.boot_silence);
    // A session's VM that ended the run: a failed guest keeps its console.
    let culprit = RefCell::new(None);
    let outcome = rt.block_on(interruptible(async {
        tokio::select! {
            result = flow::flow(&config, &tried, &culprit) => result,
            (vm, e) = tried.gone(silence) => {
                *culprit.borrow_mut() = vm;
                Err(e.into())
            }
        }
    }));
    let (result, ended) = match outcome {
        Ok(Ok(Exit::SetupFailed)) => (Ok(Exit::SetupFailed), Ended::SetupFailed),
        Ok(Ok(exit)) => (Ok(exit), Ended::Done),
        Ok(Err(f)) if f.exit == Exit::SetupFailed => (Err(f), Ended::SetupFailed),
        Ok(Err(f)) => (Err(f), Ended::Failed),
        Err(i) => (Err(interrupted(tried.what(), i)), Ended::Interrupted),
    };
    let tried = match tried {
        _ if !config.keep || ended == Ended::Interrupted => tried,
        Tried::Vm(vm) if vm.is_running() => {
            vm::leave_running(*vm, &config, &result);
            return result;
        }
        Tried::Vms(vms) => {
            vm::leave_session_running(vms.leave_running());
            return result;
        }
        Tried::Local(agent) if config.sandbox && result.is_ok() => {
            let dir = agent.dir().to_owned();
            rt.block_on(agent.keep_sandbox())?;
            kept::print_how(&dir);
            return result;
        }
        Tried::Local(mut agent) => {
            // The grading outcome stands; Ctrl-C now just ends the session.
            keep_running(&config, &agent);
            let _ = rt.block_on(interruptible(std::future::pending::<()>()));
            rt.block_on(agent.stop());
            return result;
        }
        // A VM whose qemu is gone: stopped as without `--keep`.
        other => other,
    };
    rt.block_on(tried.finish(ended, culprit.into_inner().as_deref()));
    result
}

/// `--keep`: say how to reach the agent, for the author to poke at it.
fn keep_running(config: &Config, agent: &lab_runner::LocalAgent) {
    let (labctl, conn) = (labctl_name(), conn(agent.url(), &agent.token_file()));
    eprintln!(
        "\nthe agent keeps running; press Ctrl-C to stop it and clean up. Meanwhile, e.g.:\n  \
         {labctl} exec {conn} [--user USER] -- COMMAND\n  \
         {labctl} grade {} {conn} --lab-dir {}",
        config.lab.dir.display(),
        agent.guest_lab_dir()
    );
}

/// The name `labctl` was run as, for commands it prints.
fn labctl_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "labctl".to_owned())
}

/// `--url URL --token-file FILE`: how a printed command reaches an agent.
fn conn(url: &str, token_file: &std::path::Path) -> String {
    format!("--url {url} --token-file {}", token_file.display())
}

/// The failure a signal means (`target`: what the cleanup stopped).
fn interrupted(target: &str, i: Interrupted) -> Failure {
    let what = format!(
        "interrupted by {}: stopped {target} and removed its files",
        i.signal
    );
    Failure::new(Exit::Interrupted(i.code), what)
}
