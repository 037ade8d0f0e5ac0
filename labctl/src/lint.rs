//! `labctl lint LAB_DIR`: everything about a lab that can be known without
//! running it, every problem in one run (what is checked:
//! [`lab_runner::inspect`]). `labctl try` and `labctl test` run the same
//! lint first, so a lab that `labctl secret` would reject never passes them.

use super::exit::{Exit, Failure};
use super::findings::{lint, report};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct LintArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab: PathBuf,
    /// The static `lab-agent` the payload would ship, for its size (default:
    /// as `labctl secret` finds it)
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,
}

pub fn run(args: &LintArgs) -> Result<Exit, Failure> {
    let findings = lint(&args.lab, args.agent.as_deref(), &Default::default());
    let lab = report(&args.lab, &findings)?;
    eprintln!(
        "lint: `{}` has no problems ({} check{})",
        lab.name,
        lab.checks.len(),
        if lab.checks.len() == 1 { "" } else { "s" }
    );
    Ok(Exit::Success)
}
