//! `labctl test LAB_DIR`: proves a lab's checks before students meet it.
//! The same targets and wait as `try` (a fresh sandbox, `--host` or
//! `--vm`), then the runner's self-test ([`lab_runner::selftest`]): grade
//! (each check must fail unless `initially = "pass"`), solve, grade (each
//! must pass), grade in reverse order (the same). This file is the command
//! line and the printing; the phases and their rules are the runner's.

use super::{Config, RunArgs, run_config};
use crate::exit::{Exit, Failure};
use lab_runner::selftest::{self, Verdict};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
}

pub fn run(args: &TestArgs) -> Result<Exit, Failure> {
    let mut config = Config::from_args(&args.lab, &args.run, false, false)?;
    config.test = Some(selftest::load_solve_script(&config.lab)?);
    run_config(config)
}

/// Prints a self-test (the table, or `--json`); the exit status it means.
pub(super) fn print_self_test(config: &Config, test: &selftest::SelfTest) -> Exit {
    if config.json {
        println!("{}", test.json());
    } else {
        print!("{}", test.render(config.sandbox));
    }
    match test.verdict() {
        Verdict::Holds => Exit::Success,
        Verdict::Broken => Exit::CheckFailed,
        Verdict::LabError => Exit::Usage,
        Verdict::SolveFailed => Exit::SetupFailed,
    }
}
