//! `labctl try LAB_DIR`: a lab author's whole loop on one machine. Stand
//! up an agent with the lab, wait for its setup (with progress), grade the
//! checks, print the report, tear everything down — also on Ctrl-C and on
//! errors.
//!
//! Where the agent runs is a *target*; this module is the flow, the same
//! for every target:
//! - [`local`]: `lab-agent serve --no-cloud-init --run-setup` on loopback,
//!   with the lab staged in a temp dir (the default).
//! - a `vm` target (`--vm IMAGE`: qemu booting the generated user-data, as
//!   in production) is not built yet; it will be a sibling of `local`
//!   yielding the same URL, token and guest `LAB_DIR`.

pub mod local;

use super::common;
use super::exit::{Exit, Failure};
use super::grade::{exit_for, grade_and_print};
use super::wait::{print_setup_log, wait_with_display};
use lab_agent_proto::lab::Lab;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct TryArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab: PathBuf,
    /// The `lab-agent` binary to run (default: next to `labctl`, the static
    /// build, or built from this source tree; then `PATH`)
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,
    /// Grade even when setup fails (the exit status stays 4)
    #[arg(long)]
    pub keep_going: bool,
    /// Give up waiting for setup after this many seconds (default: the
    /// lab's `[setup].timeout_secs` plus a minute)
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Print the grade report as JSON on stdout
    #[arg(long)]
    pub json: bool,
    /// After grading, keep the agent running until Ctrl-C, to try commands
    /// and grade again with `labctl exec` and `labctl grade`
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug)]
pub struct Config {
    pub lab: Lab,
    pub agent: PathBuf,
    pub keep_going: bool,
    pub timeout: Duration,
    pub json: bool,
    pub keep: bool,
}

impl Config {
    pub fn from_args(args: &TryArgs) -> Result<Config, Failure> {
        let lab = Lab::load(&args.lab).map_err(Failure::lab)?;
        // Refuse symlinks and the like now, before anything starts.
        lab.collect_files().map_err(Failure::lab)?;
        let timeout = match args.timeout {
            Some(0) => return Err(Failure::usage("`--timeout` must be at least 1 second")),
            Some(s) => Duration::from_secs(s),
            None => Duration::from_secs(lab.setup_timeout_secs() + 60),
        };
        let agent = local::find_agent(args.agent.as_deref())?;
        Ok(Config {
            lab,
            agent,
            keep_going: args.keep_going,
            timeout,
            json: args.json,
            keep: args.keep,
        })
    }
}

pub fn run(args: &TryArgs) -> Result<Exit, Failure> {
    let config = Config::from_args(args)?;
    let rt = common::runtime()?;
    rt.block_on(async {
        let mut agent = interruptible(local::LocalAgent::start(&config)).await??;
        let outcome = interruptible(flow(&config, &agent)).await;
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
async fn flow(config: &Config, agent: &local::LocalAgent) -> Result<Exit, Failure> {
    let client = agent.client()?;
    let script = config
        .lab
        .setup
        .as_ref()
        .and_then(|s| s.script.as_ref())
        .map_or("(no setup script)".to_owned(), |s| {
            format!("`{}`", s.display())
        });
    eprintln!("waiting for setup {script} to finish");
    let outcome = wait_with_display(
        std::slice::from_ref(&client),
        Instant::now() + config.timeout,
    )
    .await
    .pop()
    .expect("one outcome per client");
    let mut setup_failed = false;
    if let Err(e) = outcome.result {
        print_setup_log(&e);
        if !e.is_setup_failed() {
            agent.print_log_tail();
        }
        let failure = Failure::client(e);
        if !(failure.exit == Exit::SetupFailed && config.keep_going) {
            return Err(failure);
        }
        failure.print();
        eprintln!("grading anyway (`--keep-going`)");
        setup_failed = true;
    }
    let report = grade_and_print(&client, &config.lab, agent.guest_lab_dir(), config.json).await?;
    Ok(if setup_failed {
        Exit::SetupFailed
    } else {
        exit_for(&report)
    })
}

/// `--keep`: say how to reach the agent, for the author to poke at it.
fn keep_running(config: &Config, agent: &local::LocalAgent) {
    let labctl = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "labctl".to_owned());
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

/// Runs `work` unless SIGINT or SIGTERM comes first; then the caller's
/// cleanup runs and `labctl` exits 130 (143).
async fn interruptible<T>(work: impl Future<Output = T>) -> Result<T, Failure> {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return Ok(work.await);
    };
    tokio::select! {
        out = work => Ok(out),
        _ = int.recv() => Err(interrupted("Ctrl-C", 130)),
        _ = term.recv() => Err(interrupted("SIGTERM", 143)),
    }
}

fn interrupted(what: &str, code: u8) -> Failure {
    Failure::new(
        Exit::Interrupted(code),
        format!("interrupted by {what}: stopped the agent and removed its files"),
    )
}
