//! The VM target of `labctl try`: the runner's VM (`lab_runner::vm`: the
//! lab's real payload booted by cloud-init in a qemu guest from a NoCloud
//! seed), driven by the same flow as a local try, with Ctrl-C and SIGTERM
//! watched while it starts and while it runs.
//!
//! # Layout
//! - [`args`]: the VM flags, checked by the runner into a [`VmConfig`].
//! - this file: the VM as a [`Target`], the run, and what `--keep` prints.

pub mod args;

pub use args::{VmArgs, config_from_args};
pub use lab_runner::vm::{
    BOOT_ALLOWANCE, DEFAULT_BOOT_SILENCE, DEFAULT_CPUS, DEFAULT_MEMORY_MIB, VmConfig,
    find_static_agent, guest_arch, kernel_arch,
};

use super::{Config, Target, interruptible_for, labctl_name};
use crate::exit::{Exit, Failure};
use lab_agent_client::{Client, Progress};
use lab_runner::vm::{Stop, VmTarget};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

impl Target for VmTarget {
    fn client(&self) -> Result<Client, Failure> {
        VmTarget::client(self).map_err(Failure::client)
    }
    fn guest_lab_dir(&self) -> &str {
        VmTarget::guest_lab_dir(self)
    }
    fn on_progress(&self, progress: &Progress) -> Option<String> {
        VmTarget::on_progress(self, progress)
    }
    fn on_ready(&self) {
        VmTarget::on_ready(self);
    }
}

/// Boots, waits, grades, reports; stops the VM (or leaves it with `--keep`).
pub fn run(config: &Config, vm: &VmConfig) -> Result<Exit, Failure> {
    let rt = super::common::runtime()?;
    let target = start_interruptibly(&rt, config, vm)?;
    let outcome = rt.block_on(interruptible_for("the VM", async {
        tokio::select! {
            result = super::flow(config, &target) => result,
            e = target.qemu_exited() => Err(e.into()),
            e = target.silent_console(vm.boot_silence) => Err(e.into()),
        }
    }));
    let result = match outcome {
        Ok(result) => result,
        Err(interrupted) => {
            target.stop(Stop::Interrupted);
            return Err(interrupted);
        }
    };
    if config.keep && target.is_running() {
        leave_running(target, config, &result);
        return result;
    }
    target.stop(match &result {
        Ok(Exit::SetupFailed) => Stop::KeepConsole,
        Err(f) if f.exit == Exit::SetupFailed => Stop::KeepConsole,
        Ok(_) => Stop::Discard,
        Err(_) => Stop::ShowConsole,
    });
    result
}

/// [`VmTarget::start`] on a thread of its own while this one watches for
/// Ctrl-C and SIGTERM: a KVM trial can take seconds, and an interrupted
/// start stops its qemu and removes the run dir (it holds the token) like
/// an interrupted wait does.
fn start_interruptibly(
    rt: &tokio::runtime::Runtime,
    config: &Config,
    vm: &VmConfig,
) -> Result<VmTarget, Failure> {
    let cancel = AtomicBool::new(false);
    let cancelled = || cancel.load(Ordering::Relaxed);
    std::thread::scope(|s| {
        let starting = s.spawn(|| {
            VmTarget::start(&config.lab, &config.agent, config.keep, vm, &cancelled)
                .map_err(Failure::from)
        });
        let waited = rt.block_on(interruptible_for("the VM", async {
            while !starting.is_finished() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
        if waited.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        let started = starting
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match waited {
            Ok(()) => started,
            Err(interrupted) => {
                if let Ok(target) = started {
                    target.stop(Stop::Interrupted);
                }
                Err(interrupted)
            }
        }
    })
}

/// `--keep`: leave qemu running (with a `stop.sh`), say how to reach it.
fn leave_running(target: VmTarget, config: &Config, result: &Result<Exit, Failure>) {
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
