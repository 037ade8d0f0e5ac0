//! `labctl try --vm`: the VM flags ([`args`], checked by the runner into
//! a `VmConfig`) and what `--keep` prints; the VM itself is the runner's
//! (`lab_runner::vm`, started by `lab_runner::trial`).

pub mod args;

pub use args::{VmArgs, config_from_args};

use super::{Config, labctl_name};
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
    let (pid, url) = (left.pid, &left.url);
    let labctl = labctl_name();
    let conn = format!("--url {url} --token-file {}", left.token_file.display());
    let mut text = format!(
        "\nthe VM keeps running (qemu pid {pid}); `{labctl}` is done with it. Reach it with, e.g.:\n  \
         {labctl} exec {conn} [--user USER] -- COMMAND\n  \
         {labctl} grade {} {conn}\n",
        config.lab.dir.display()
    );
    if matches!(result, Err(f) if f.exit == Exit::SetupFailed) {
        text.push_str(&format!(
            "  {labctl} exec {conn} -- cat /var/lib/lab-agent/setup.log\n"
        ));
    }
    text.push_str(&format!(
        "serial console log: `{}` (root is logged in on the serial console)\n",
        left.console.display()
    ));
    match &left.stop_written {
        Ok(()) => text.push_str(&format!(
            "stop it and remove its files with:\n  sh {}\n",
            left.stop.display()
        )),
        Err(e) => text.push_str(&format!(
            "stop it with `kill {pid}`, then remove `{}` (failed to write `{}`: {e})\n",
            left.dir.display(),
            left.stop.display()
        )),
    }
    eprint!("{text}");
}

/// `--keep --vm`: each guest left running, and how to reach and stop them.
pub(in crate::r#try) fn leave_session_running((stop, left): (PathBuf, Vec<(String, LeftRunning)>)) {
    let labctl = labctl_name();
    let mut text = String::from("\nthe session's VMs keep running. Reach each with, e.g.:\n");
    for (vm, l) in &left {
        text.push_str(&format!(
            "  {vm} (qemu pid {}): {labctl} exec --url {} --token-file {} -- COMMAND\n",
            l.pid,
            l.url,
            l.token_file.display()
        ));
    }
    text.push_str(&format!(
        "stop them all and remove their files with:\n  sh {}\n",
        stop.display()
    ));
    eprint!("{text}");
}
