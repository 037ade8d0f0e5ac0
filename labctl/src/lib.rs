//! `labctl`: one module per verb. `main` parses the arguments, `run`
//! dispatches to the verb, and the verb returns an [`Exit`] or a
//! [`Failure`], printed with its cause chain and hints on stderr. Each
//! verb turns its clap arguments into a checked `Config` before any work;
//! stdout carries only data (reports, JSON, a command's output), stderr
//! everything else. No verb imports another: what two share has a module
//! named after what it does ([`grading`], [`findings`], [`progress`], …).
//! The codemap is ARCHITECTURE.md's; running a lab is the runner's
//! (`lab_runner`), and the library a backend links knows nothing of either.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub mod agent_disk;
pub mod color;
pub mod common;
pub mod exec;
pub mod exit;
pub mod findings;
pub mod grade;
pub mod grading;
pub mod life;
pub mod lint;
pub mod payload;
pub mod progress;
pub mod report;
pub mod secret;
pub mod session;
pub mod timeline;
pub mod r#try;
pub mod wait;

pub use exit::{Exit, Failure};
// The agent finder and the token generator are the generator's edge
// (`lab-agent-cloudinit`, feature `fs`), shared with the Python package.
pub use lab_agent_cloudinit::{agent_bin, token};

#[derive(Debug, Parser)]
#[command(
    name = "labctl",
    version,
    about = "Build, test and grade lab-agent labs",
    after_help = "Exit status: 0 success, 1 a check failed, 2 usage or lab.toml error, \
                  3 agent unreachable, timed out or not ready, 4 setup failed, 5 a check could \
                  not run (the lab's fault, not the student's), 6 the VM is not the instance \
                  asked for (`grade --instance`: it was reset, nothing was run); `exec` exits \
                  with the command's own status."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait until one or more lab VMs are ready (setup done, cloud-init finished)
    ///
    /// Progress goes to stderr: on a terminal a live line per VM (its state,
    /// setup's last log line or the cloud-init stage running, the time
    /// against the deadline), otherwise a line each time its phase changes.
    /// Once ready, each VM's life is printed on stdout: its instance (id,
    /// boots), where the boot's time went (kernel to agent start, each
    /// cloud-init stage, setup, ready; seconds since boot) and its root disk.
    ///
    /// `--follow` prints each VM's setup log as it grows, above the live
    /// lines, before the verdict (exit statuses unchanged).
    Wait(wait::WaitArgs),
    /// Run a command in a lab VM, like `ssh VM COMMAND`
    Exec(exec::ExecArgs),
    /// Run a lab's checks against a VM and report
    Grade(grade::GradeArgs),
    /// Check a lab without running it: lab.toml, files, shell syntax, payload size
    Lint(lint::LintArgs),
    /// Try a lab: start an agent in a throwaway sandbox of this machine (or a qemu VM: `--vm`), run setup, grade, clean up
    Try(r#try::TryArgs),
    /// Prove a lab's checks: in a fresh sandbox (or VM) each must fail after setup, pass after the solve, and say the same in reverse order
    ///
    /// Setup, grade (every check must fail, unless it says `initially =
    /// "pass"`), the lab's `[solve]` script then each check's `solve`, grade
    /// (every check must pass), grade again in reverse order (the same
    /// verdicts). Prints a row per check and a sentence per broken
    /// expectation. Exit 0 when every expectation holds, 1 when one does
    /// not, 2 for a lab error (a check or solve that could not run), 4 when
    /// setup or the solve failed (with its output's end).
    Test(r#try::test::TestArgs),
    /// Render the cloud-init user-data and the Kubernetes Secret for a lab
    Secret(secret::SecretArgs),
    /// Make the agent's disk, once per cluster: a raw image, its KubeVirt containerDisk and a ConfigMap
    ///
    /// Lab VMs whose Secret is rendered with `labctl secret --agent-from
    /// disk` take their agent from this disk (a containerDisk volume whose
    /// disk has `serial: lab-agent`, or a ConfigMap volume with
    /// `volumeLabel: LAB-AGENT`): their payload pins the agent's SHA-256,
    /// and a VM with another agent on its disk never starts it.
    AgentDisk(agent_disk::AgentDiskArgs),
    /// Where many VMs' preparation time went: count, median, p90 and max per phase
    ///
    /// Reads `/v1/ready` answers as a backend logs them (or `labctl wait
    /// --json` outputs), one JSON document per line or a JSON array, and
    /// prints per phase (kernel to agent start, each cloud-init stage,
    /// setup, kernel to ready) how many VMs had it and its median, p90
    /// and max in seconds. Answers without a timeline (an agent that
    /// predates it) are counted and skipped, with a note.
    Timeline(timeline::TimelineArgs),
}

pub fn main() -> ExitCode {
    // A sandbox's keeper is this binary run by `labctl try` (never returns).
    lab_runner::sandbox::run_keeper_if_asked();
    init_tracing();
    let cli = Cli::parse();
    match run(&cli.command) {
        Ok(exit) => exit.into(),
        Err(failure) if failure.is_broken_pipe() => ExitCode::SUCCESS,
        Err(failure) => {
            failure.print();
            failure.exit.into()
        }
    }
}

/// Runs one verb.
pub fn run(command: &Command) -> Result<Exit, Failure> {
    match command {
        Command::Wait(args) => wait::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Grade(args) => grade::run(args),
        Command::Lint(args) => lint::run(args),
        Command::Try(args) => r#try::run(args),
        Command::AgentDisk(args) => agent_disk::run(args),
        Command::Test(args) => r#try::test::run(args),
        Command::Secret(args) => secret::run(args),
        Command::Timeline(args) => timeline::run(args),
    }
}

/// Logs (`RUST_LOG=labctl=debug,lab_agent_client=debug`) go to stderr; quiet by default.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .try_init();
}
