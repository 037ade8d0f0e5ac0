//! A sandbox kept with `labctl try --keep`: how to get back in
//! (`--enter DIR`, or `nsenter`), grade it again (`--grade DIR`) and end
//! it (`--stop DIR`); the runner's `lab_runner::kept` does the work.

use super::RunArgs;
use crate::exit::{Exit, Failure};
use crate::grading::{Rule, exit_for, grade_and_print};
use lab_agent_proto::lab::Lab;
use lab_runner::kept::{self, init_pid};
use std::ffi::OsString;
use std::path::Path;

/// After `--keep`: the ways back in and out.
pub fn print_how(dir: &Path) {
    let labctl = super::labctl_name();
    let d = dir.display();
    let nsenter = init_pid(dir).map_or(String::new(), |pid| {
        format!("\n  or: nsenter --target {pid} --mount --uts --ipc --net --pid -- bash -l")
    });
    eprintln!(
        "\nthe sandbox keeps running, with the agent in it (its try dir: `{d}`). Meanwhile:\n  \
         {labctl} try --enter {d}                   a root login shell in it{nsenter}\n  \
         {labctl} try --enter {d} -- COMMAND…      one command in it\n  \
         {labctl} try --grade {d} [--check NAME]    grade it again (the checks as they are now)\n  \
         {labctl} try --stop {d}                    stop it and remove everything"
    );
}

/// `labctl try --enter DIR [-- COMMAND…]`: exits with the command's status.
pub fn enter(dir: &Path, command: &[OsString]) -> Result<Exit, Failure> {
    Ok(Exit::Command(kept::enter(dir, command)?))
}

/// `labctl try --grade DIR [LAB_DIR]`: the kept agent graded with the
/// lab's checks (from `lab`, else the folder it was started from).
pub fn grade(dir: &Path, lab: Option<&Path>, run: &RunArgs) -> Result<Exit, Failure> {
    let kept = kept::agent(dir)?;
    let mut lab = Lab::load(lab.unwrap_or(&kept.lab)).map_err(Failure::lab)?;
    lab.select_checks(&run.checks)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let grading = grade_and_print(
        &kept.client,
        &lab,
        &kept.lab_dir,
        run.json,
        Rule::Ready,
        None::<()>,
    );
    Ok(exit_for(&crate::common::runtime()?.block_on(grading)?))
}

/// `labctl try --stop DIR`.
pub fn stop(dir: &Path) -> Result<Exit, Failure> {
    kept::stop(dir)?;
    Ok(Exit::Success)
}
