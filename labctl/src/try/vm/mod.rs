//! `labctl try --vm`: the VM flags ([`args`], checked by the runner into
//! a `VmConfig`) and what `--keep` prints; the VM itself is the runner's
//! (`lab_runner::vm`, started by `lab_runner::trial`).

pub mod args;

pub use args::{VmArgs, config_from_args};

use super::{Config, conn, labctl_name};
use crate::exit::{Exit, Failure};
use lab_runner::vm::{LeftRunning, VmTarget};
use std::path::PathBuf;

/// `--keep`: leave qemu running (with a `stop.sh`), say how to reach it.
pub(in crate::r#try) fn leave_running(
    target: VmTarget,
    config: &Config,
    result: &Result<Exit, Failure>,
) {
    let left = target.leave_running();
    let (pid, labctl) = (left.pid, labctl_name());
    let conn = conn(&left.url, &left.token_file);
    eprintln!(
        "\nthe VM keeps running (qemu pid {pid}); `{labctl}` is done with it. Reach it with, e.g.:\n  \
         {labctl} exec {conn} [--user USER] -- COMMAND\n  \
         {labctl} grade {} {conn}",
        config.lab.dir.display()
    );
    if matches!(result, Err(f) if f.exit == Exit::SetupFailed) {
        eprintln!("  {labctl} exec {conn} -- cat /var/lib/lab-agent/setup.log");
    }
    let console = left.console.display();
    eprintln!("serial console log: `{console}` (root is logged in on the serial console)");
    let (dir, stop) = (left.dir.display(), left.stop.display());
    match &left.stop_written {
        Ok(()) => eprintln!("stop it and remove its files with:\n  sh {stop}"),
        Err(e) => eprintln!(
            "stop it with `kill {pid}`, then remove `{dir}` (failed to write `{stop}`: {e})"
        ),
    }
}

/// `--keep --vm`: each guest left running, and how to reach and stop them.
pub(in crate::r#try) fn leave_session_running((stop, left): (PathBuf, Vec<(String, LeftRunning)>)) {
    let labctl = labctl_name();
    eprintln!("\nthe session's VMs keep running. Reach each with, e.g.:");
    for (vm, l) in &left {
        let (pid, conn) = (l.pid, conn(&l.url, &l.token_file));
        eprintln!("  {vm} (qemu pid {pid}): {labctl} exec {conn} -- COMMAND");
    }
    eprintln!(
        "stop them all and remove their files with:\n  sh {}",
        stop.display()
    );
}
