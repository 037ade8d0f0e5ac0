//! `labctl lint LAB_DIR`: everything about a lab that can be known without
//! running it, every problem in one run. `labctl try` runs the same lint
//! first, so a lab that `labctl secret` would reject never passes `try`.
//!
//! What is checked: the `lab.toml` model (every key, every check), that the
//! files and the setup script it names exist and can be shipped, the shell
//! syntax of the setup script and of each check's `run` (`bash -n`), and
//! the payload's size against the Secret limit, with the agent it would
//! ship.

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
    let findings = lint(&args.lab, args.agent.as_deref());
    let lab = report(&args.lab, &findings)?;
    eprintln!(
        "lint: `{}` has no problems ({} check{})",
        lab.name,
        lab.checks.len(),
        if lab.checks.len() == 1 { "" } else { "s" }
    );
    Ok(Exit::Success)
}
