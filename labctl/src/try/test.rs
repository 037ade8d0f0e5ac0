//! `labctl test LAB_DIR`: proves a lab's checks before students meet it.
//! The same targets and wait as `try` (a fresh sandbox, `--host` or
//! `--vm`), then the runner's self-test ([`lab_runner::selftest`]): grade
//! (each check must fail unless `initially = "pass"`), solve, grade (each
//! must pass), grade in reverse order (the same). This file is the command
//! line and the printing; the phases and their rules are the runner's.

use super::{Config, TryArgs, run_config};
use crate::exit::{Exit, Failure};
use lab_runner::selftest::{self, Verdict};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab: PathBuf,
    /// Test on this machine itself instead of a throwaway sandbox of it:
    /// what setup and solve change stays changed
    #[arg(long)]
    pub host: bool,
    /// The `lab-agent` binary to run (as for `labctl try`)
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,
    /// Give up waiting for setup after this many seconds (as for `labctl try`)
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Print one JSON object on stdout: each check's results per phase, its
    /// problems, the timings
    #[arg(long)]
    pub json: bool,
    /// Test only the check with this name (repeat for several); the lab's
    /// solve script still runs
    #[arg(long = "check", value_name = "NAME")]
    pub checks: Vec<String>,
    #[command(flatten)]
    pub vm: super::vm::VmArgs,
}

pub fn run(args: &TestArgs) -> Result<Exit, Failure> {
    let mut config = Config::from_args(&TryArgs {
        lab: Some(args.lab.clone()),
        host: args.host,
        agent: args.agent.clone(),
        timeout: args.timeout,
        json: args.json,
        checks: args.checks.clone(),
        vm: args.vm.clone(),
        ..TryArgs::default()
    })?;
    config.test = Some(selftest::load_solve_script(&config.lab)?);
    run_config(config)
}

/// Prints a self-test (the table, or `--json`); the exit status it means.
pub(super) fn print_self_test(config: &Config, test: &selftest::SelfTest) -> Exit {
    if config.json {
        println!("{}", test.json());
    } else {
        print!("{}", test.render());
    }
    match test.verdict() {
        Verdict::Holds => Exit::Success,
        Verdict::Broken => Exit::CheckFailed,
        Verdict::LabError => Exit::Usage,
        Verdict::SolveFailed => Exit::SetupFailed,
    }
}
