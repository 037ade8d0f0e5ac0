//! A sandbox kept with `labctl try --keep`: how to get back in
//! (`--enter DIR`, or `nsenter`) and how to end it (`--stop DIR`); the
//! runner's `lab_runner::kept` does both.

use crate::exit::{Exit, Failure};
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
         {labctl} try --stop {d}                    stop it and remove everything"
    );
}

/// `labctl try --enter DIR [-- COMMAND…]`: exits with the command's status.
pub fn enter(dir: &Path, command: &[OsString]) -> Result<Exit, Failure> {
    Ok(Exit::Command(kept::enter(dir, command)?))
}

/// `labctl try --stop DIR`.
pub fn stop(dir: &Path) -> Result<Exit, Failure> {
    kept::stop(dir)?;
    Ok(Exit::Success)
}
