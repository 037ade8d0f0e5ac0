//! `labctl try LAB_DIR`: a lab author's whole loop on one machine. Stand
//! up an agent with the lab, wait for its setup (with progress), grade the
//! checks, print the report, tear everything down — also on Ctrl-C and on
//! errors.
//!
//! Before anything starts, the lab is linted ([`crate::findings`], as `labctl
//! lint` does) and, for a local try, the user must be root: setup and checks
//! run as root (and as other users) on this machine.
//!
//! `labctl test` ([`test`]) is the same flow on the same targets, with the
//! runner's self-test (`lab_runner::selftest`) where `try` grades once.
//!
//! Where the agent runs is a *target*; this module is the flow, the same
//! for every target ([`Target`]):
//! - [`local`]: `lab-agent serve --no-cloud-init --run-setup` on loopback,
//!   with the lab staged in a temp dir, inside a throwaway [`sandbox`] of
//!   this machine (the default; [`changes`] reads what the lab changed
//!   there), or on the machine itself (`--host`).
//! - [`vm`]: a qemu guest (`--vm IMAGE`, or `--kernel/--initrd/--rootfs`)
//!   booted with the payload `labctl secret` renders, on a NoCloud seed, as
//!   in production; the agent is reached through a loopback port forward.

mod kept;
mod session;
pub mod test;
pub mod vm;

use super::common;
use super::exit::{Exit, Failure};
use super::findings as inspect;
use super::grading::{Rule, exit_for, grade_and_print_with, select_checks};
use super::progress::{print_setup_log, wait_with_display_hooked};
use lab_agent_client::{Client, Progress};
use lab_agent_proto::lab::Lab;
use lab_runner::{changes, local, systemd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct TryArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR", required_unless_present_any = ["enter", "stop"])]
    pub lab: Option<PathBuf>,
    /// Run the lab on this machine itself instead of a throwaway sandbox of
    /// it: what the setup changes stays changed
    #[arg(long)]
    pub host: bool,
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
    /// With `--enter`: the command to run inside the sandbox
    #[arg(last = true, value_name = "COMMAND", requires = "enter")]
    pub command: Vec<std::ffi::OsString>,
    /// The `lab-agent` binary to run (default: next to `labctl`, the static
    /// build, or built from this source tree; then `PATH`). A VM needs the
    /// static build (`packaging/build-agent.sh`)
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,
    /// Grade even when setup fails (the exit status stays 4)
    #[arg(long)]
    pub keep_going: bool,
    /// Give up waiting for setup after this many seconds (default: the
    /// lab's `[setup].timeout_secs` plus a minute; in a VM, plus 15 minutes
    /// for the boot; at most 86400, a day)
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Print the grade report as JSON on stdout
    #[arg(long)]
    pub json: bool,
    /// Grade only the check with this name (repeat for several)
    #[arg(long = "check", value_name = "NAME")]
    pub checks: Vec<String>,
    /// After grading, keep the lab running: a sandbox is left running after
    /// `labctl` exits (enter it with `--enter DIR`, end it with `--stop
    /// DIR`); with `--host`, the agent runs until Ctrl-C; a VM is left
    /// running after `labctl` exits (it prints how to stop it)
    #[arg(long)]
    pub keep: bool,
    #[command(flatten)]
    pub vm: vm::VmArgs,
}

#[derive(Debug)]
pub struct Config {
    pub lab: Lab,
    /// The agent binary: any build locally, the static one for a VM.
    pub agent: PathBuf,
    pub keep_going: bool,
    pub timeout: Duration,
    pub json: bool,
    pub keep: bool,
    /// `Some`: try the lab in a VM, not on this machine.
    pub vm: Option<vm::VmConfig>,
    /// Locally: in a sandbox of this machine (not `--host`).
    pub sandbox: bool,
    /// `--changes`: list what the lab changed in the sandbox.
    pub list_changes: bool,
    /// `labctl test`: the solve script's text (`Some(None)`: the lab has
    /// none); `None` for `try`.
    pub test: Option<Option<String>>,
}

impl Config {
    pub fn from_args(args: &TryArgs) -> Result<Config, Failure> {
        let timeout = args
            .timeout
            .map(|secs| common::wait_secs("--timeout", secs, 1))
            .transpose()?;
        let vm = vm::config_from_args(&args.vm)?;
        let lab_dir = args.lab.as_deref().expect("clap requires LAB_DIR here");
        if vm.is_some() && args.host {
            return Err(Failure::usage("`--host` and `--vm` exclude each other"));
        }
        if args.changes && (vm.is_some() || args.host) {
            return Err(Failure::usage(
                "`--changes` reads the sandbox of a local try: drop `--host`/`--vm`",
            ));
        }
        if vm.is_none() && !lab_runner::sandbox::is_root() {
            return Err(Failure::usage(
                "`labctl try` builds its sandbox of this machine with namespaces and mounts, \
                 and runs the lab's setup and checks in it as root and as the lab's users, \
                 and this user is not root",
            )
            .hint("run as root, or use `--vm IMAGE` to try the lab in a VM"));
        }
        // Everything `labctl lint` finds, before anything starts: a lab
        // that `labctl secret` would refuse must not pass `try`.
        let budget_agent = vm.as_ref().and(args.agent.as_deref());
        let mut lab = inspect::report(lab_dir, &inspect::lint(lab_dir, budget_agent))?;
        if !lab.vms.is_empty() {
            session_args(&lab, &args.vm, args)?;
        }
        select_checks(&mut lab, &args.checks)?;
        let timeout = match timeout {
            Some(t) => t,
            // A VM must boot first: minutes under software emulation.
            None if vm.is_some() => {
                Duration::from_secs(lab.setup_timeout_secs()).saturating_add(vm::BOOT_ALLOWANCE)
            }
            None => Duration::from_secs(lab.setup_timeout_secs() + 60),
        };
        let agent = match &vm {
            Some(v) => vm::find_static_agent(args.agent.as_deref(), v.arch)?,
            None => local::find_agent(args.agent.as_deref())?,
        };
        Ok(Config {
            lab,
            agent,
            keep_going: args.keep_going,
            timeout,
            json: args.json,
            keep: args.keep,
            sandbox: vm.is_none() && !args.host,
            list_changes: args.changes,
            vm,
            test: None,
        })
    }
}

/// A lab of several VMs is tried in the sandbox, one per VM: what that
/// does not do yet is refused, saying what does.
fn session_args(lab: &Lab, vm: &vm::VmArgs, args: &TryArgs) -> Result<(), Failure> {
    let vms = lab.vm_names().join(", ");
    let refuse = |what: &str| {
        Failure::usage(format!(
            "lab `{}` has several VMs ({vms}): {what}",
            lab.name
        ))
    };
    if vm::config_from_args(vm)?.is_some() {
        return Err(refuse(
            "`--vm IMAGE` boots one VM, and a guest per VM of a session is not built yet",
        )
        .hint("leave out `--vm`: `labctl try` runs each VM in a sandbox of its own, on a private network"));
    }
    if args.host {
        return Err(
            refuse("`--host` would run every VM's setup on this one machine")
                .hint("leave out `--host`: each VM gets a sandbox of its own"),
        );
    }
    if args.keep {
        return Err(refuse(
            "`--keep` keeps the sandbox of a lab of one VM only, for now",
        ));
    }
    if args.keep_going {
        return Err(refuse(
            "`--keep-going` grades one VM whose setup failed; a session is graded only when every VM is ready",
        ));
    }
    Ok(())
}

/// What [`flow`] needs from wherever the agent runs.
trait Target {
    /// A client for the agent, with its token.
    fn client(&self) -> Result<Client, Failure>;
    /// The checks' `LAB_DIR` where the agent runs.
    fn guest_lab_dir(&self) -> &str;
    /// Sees every progress report of the wait; returns what to show while
    /// the agent does not answer (default: why it cannot be reached).
    fn on_progress(&self, _progress: &Progress) -> Option<String> {
        None
    }
    /// The wait ended with the agent ready.
    fn on_ready(&self) {}
    /// The wait failed for another reason than a failed setup: show what
    /// helps (the agent's own log, a console).
    fn explain_wait_failure(&self) {}
    /// What the lab changed, where the target can tell (a sandbox).
    fn changes(&self) -> Option<Result<changes::Changes, Failure>> {
        None
    }
}

impl Target for local::LocalAgent {
    fn client(&self) -> Result<Client, Failure> {
        local::LocalAgent::client(self).map_err(Failure::client)
    }
    fn guest_lab_dir(&self) -> &str {
        local::LocalAgent::guest_lab_dir(self)
    }
    fn explain_wait_failure(&self) {
        self.print_log_tail();
    }
    fn changes(&self) -> Option<Result<changes::Changes, Failure>> {
        local::LocalAgent::changes(self).map(|r| r.map_err(Failure::from))
    }
}

pub fn run(args: &TryArgs) -> Result<Exit, Failure> {
    if let Some(dir) = &args.enter {
        return kept::enter(dir, &args.command);
    }
    if let Some(dir) = &args.stop {
        return kept::stop(dir);
    }
    run_config(Config::from_args(args)?)
}

/// Runs a checked config on its target: `try`'s and `test`'s.
fn run_config(config: Config) -> Result<Exit, Failure> {
    if let Some(vm) = &config.vm {
        return vm::run(&config, vm);
    }
    if !config.lab.vms.is_empty() {
        return session::run(&config);
    }
    if !config.sandbox {
        eprintln!(
            "warning: `--host`: the lab's setup runs on this machine itself, as root; what it \
             changes stays changed"
        );
    } else if let Some(what) = systemd::mentioned(&config.lab) {
        eprintln!(
            "note: {what} `systemctl`; the sandbox runs no systemd: if that fails here, try \
             the lab in a VM with `--vm IMAGE`"
        );
    }
    let rt = common::runtime()?;
    rt.block_on(async {
        let mut agent = interruptible(local::LocalAgent::start(
            &config.lab,
            &config.agent,
            config.sandbox,
        ))
        .await??;
        let outcome = interruptible(flow(&config, &agent)).await;
        if config.keep && config.sandbox && matches!(outcome, Ok(Ok(_))) {
            let dir = agent.dir().to_owned();
            agent.keep_sandbox().await?;
            kept::print_how(&dir);
            return outcome?;
        }
        if config.keep && outcome.is_ok() {
            // The grading outcome stands; Ctrl-C now just ends the session.
            keep_running(&config, &agent);
            let _ = interruptible(std::future::pending::<()>()).await;
        }
        agent.stop().await;
        outcome?
    })
}

/// Wait for setup, grade, report: the part every target shares.
async fn flow(config: &Config, target: &dyn Target) -> Result<Exit, Failure> {
    let client = target.client()?;
    match config.lab.setup.as_ref().and_then(|s| s.script.as_ref()) {
        Some(script) => eprintln!("waiting for setup `{}` to finish", script.display()),
        None => eprintln!("no setup script: waiting for the agent to be ready"),
    }
    let started = Instant::now();
    let outcome = wait_with_display_hooked(
        std::slice::from_ref(&client),
        Instant::now() + config.timeout,
        &mut |_, p| target.on_progress(p),
    )
    .await
    .pop()
    .expect("one outcome per client");
    let mut setup_failed = false;
    match outcome.result {
        Ok(_) => target.on_ready(),
        Err(e) => {
            print_setup_log(&e);
            if config.sandbox {
                let tail = e.ready_response().and_then(|r| r.setup.log_tail.as_deref());
                for hint in systemd::hints(tail.unwrap_or_default()) {
                    eprintln!("{hint}");
                }
            }
            if !e.is_setup_failed() {
                target.explain_wait_failure();
            }
            let failure = Failure::client(e);
            if !(failure.exit == Exit::SetupFailed && config.keep_going) {
                return Err(failure);
            }
            failure.print();
            eprintln!("grading anyway (`--keep-going`)");
            setup_failed = true;
        }
    }
    if let Some(script) = &config.test {
        return test::after_setup(config, target, &client, script.as_deref(), started).await;
    }
    // What the setup changed (before the checks run).
    let changes = match target.changes() {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            eprintln!("warning: {}", e.render(false).trim_end());
            None
        }
        None => None,
    };
    // `--json`: the report's members, then `changes`.
    #[derive(serde::Serialize)]
    struct Extra<'a> {
        changes: &'a changes::Changes,
    }
    let extra = changes.as_ref().map(|changes| Extra { changes });
    let report = grade_and_print_with(
        &client,
        &config.lab,
        target.guest_lab_dir(),
        config.json,
        // Waited above, and `--keep-going` grades a failed setup: this flow
        // keeps its own rule.
        Rule::Unchecked,
        extra,
    )
    .await?;
    if let Some(c) = &changes {
        if !config.json {
            println!("{}", c.summary());
            if config.list_changes {
                print!("{}", c.listing());
            } else if c.files() > 0 {
                println!("(`--changes` lists them)");
            }
        }
    }
    if config.sandbox {
        print_systemd_hints(&report);
    }
    Ok(if setup_failed {
        Exit::SetupFailed
    } else {
        exit_for(&report)
    })
}

/// `--keep`: say how to reach the agent, for the author to poke at it.
/// Each hint once, for what the failed checks printed that says systemd
/// is missing (a sandbox has no init): the one place both flows print them.
fn print_systemd_hints(report: &lab_agent_client::GradeReport) {
    let mut hints: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| !matches!(c.status, lab_agent_client::CheckStatus::Passed))
        .flat_map(|c| [systemd::hints(&c.stdout), systemd::hints(&c.stderr)])
        .flatten()
        .collect();
    hints.sort_unstable();
    hints.dedup();
    for hint in hints {
        eprintln!("{hint}");
    }
}

fn keep_running(config: &Config, agent: &local::LocalAgent) {
    let labctl = labctl_name();
    let conn = format!(
        "--url {} --token-file {}",
        agent.url(),
        agent.token_file().display()
    );
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

/// Runs `work` unless SIGINT or SIGTERM comes first; then the caller's
/// cleanup runs and `labctl` exits 130 (143).
async fn interruptible<T>(work: impl Future<Output = T>) -> Result<T, Failure> {
    interruptible_for("the agent", work).await
}

/// [`interruptible`], for a target that is not a local agent (`what` is
/// what the cleanup stops: "the VM").
async fn interruptible_for<T>(what: &str, work: impl Future<Output = T>) -> Result<T, Failure> {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    // Each on its own: a signal that cannot be watched (SIGINT is ignored in
    // a shell's background job) must not leave the other one caught and
    // then unheard, which would swallow it.
    async fn arrived(signal: &mut Option<Signal>) {
        match signal {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::select! {
        out = work => Ok(out),
        () = arrived(&mut int) => Err(interrupted(what, "Ctrl-C", 130)),
        () = arrived(&mut term) => Err(interrupted(what, "SIGTERM", 143)),
    }
}

fn interrupted(target: &str, signal: &str, code: u8) -> Failure {
    Failure::new(
        Exit::Interrupted(code),
        format!("interrupted by {signal}: stopped {target} and removed its files"),
    )
}
