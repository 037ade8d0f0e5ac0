//! `labctl try` and `labctl test` of a lab of several VMs (`[[vms]]`): the
//! runner's `Tried` starts a sandbox per VM on a private switch, or
//! with `--vm IMAGE` a qemu guest per VM on a private network (names
//! resolving, setups at the same time); this file waits for the session
//! as one (the first VM that fails ends it, named), then grades it as one
//! (each check on its VM, one report under each VM's heading) or runs the
//! self-test on it, and prints what each VM's lab changed.

use super::test::print_self_test;
use super::{Config, labctl_name, print_systemd_hints};
use crate::exit::{Exit, Failure};
use crate::grading::exit_for;
use crate::progress::{WaitDisplay, print_setup_log};
use crate::session::{print_report, session_failure};
use lab_agent_client::Session;
use lab_runner::selftest::{self, VmAgent};
use lab_runner::trial::Tried;
use lab_runner::vm::LeftRunning;
use lab_runner::{changes, systemd};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// `--keep --vm`: each guest left running, and how to reach and stop them.
pub(super) fn leave_running((stop, left): (PathBuf, Vec<(String, LeftRunning)>)) {
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

/// Waits for the session, then grades it or runs the self-test on it.
pub(super) async fn flow(
    config: &Config,
    vms: &Tried,
    culprit: &RefCell<Option<String>>,
) -> Result<Exit, Failure> {
    let session = vms.session().map_err(Failure::client)?;
    let names: Vec<&str> = session.vms().map(|(n, _)| n).collect();
    eprintln!(
        "waiting for the setups of VMs {} (at the same time)",
        names.join(", ")
    );
    let started = Instant::now();
    let mut display = WaitDisplay::new(names.iter().map(|n| format!("VM {n}")).collect())
        .with_limit(config.timeout);
    let waited = session
        .wait_ready_with(started + config.timeout, |vm, p| {
            let not_up = vms.vm(vm).and_then(|t| t.on_progress(p));
            if let Some(i) = names.iter().position(|n| *n == vm) {
                display.update_with(i, p, not_up);
            }
        })
        .await;
    display.clear();
    drop(display);
    if let Err(e) = waited {
        *culprit.borrow_mut() = e.vm().map(str::to_owned);
        if let (Some(vm), Some(error)) = (e.vm(), e.error()) {
            print_setup_log(error);
            let tail = error
                .ready_response()
                .and_then(|r| r.setup.log_tail.as_deref());
            for hint in systemd::hints(tail.unwrap_or_default()) {
                eprintln!("{hint}");
            }
            if !error.is_setup_failed() {
                if let Some(target) = vms.vm(vm) {
                    target.explain_wait_failure();
                }
            }
        }
        return Err(session_failure(e));
    }
    for (vm, _) in session.vms() {
        if let Some(target) = vms.vm(vm) {
            target.on_ready();
        }
    }
    eprintln!(
        "every VM is ready ({} s)",
        started.elapsed().as_secs_f32().round()
    );
    if let Some(script) = &config.test {
        return self_test(config, vms, &session, script.as_deref(), started).await;
    }
    // What each setup changed (before the checks run).
    let mut by_vm: BTreeMap<String, changes::Changes> = BTreeMap::new();
    for (vm, c) in vms.changes() {
        match c {
            Ok(c) => {
                by_vm.insert(vm, c);
            }
            Err(e) => eprintln!(
                "warning: VM `{vm}`: {}",
                Failure::from(e).render(false).trim_end()
            ),
        }
    }
    // `--json`: the report's members, then `changes`, by VM.
    #[derive(serde::Serialize)]
    struct Extra<'a> {
        changes: &'a BTreeMap<String, changes::Changes>,
    }
    eprintln!(
        "grading `{}` ({} check{}) on VMs {}",
        config.lab.name,
        config.lab.checks.len(),
        if config.lab.checks.len() == 1 {
            ""
        } else {
            "s"
        },
        names.join(", ")
    );
    let report = session
        .grade(&config.lab, None)
        .await
        .map_err(session_failure)?;
    print_report(&report, config.json, Some(Extra { changes: &by_vm }));
    if !config.json {
        for (vm, c) in &by_vm {
            println!("{vm}: {}", c.summary());
            if config.list_changes {
                print!("{}", c.listing());
            }
        }
        if !config.list_changes && by_vm.values().any(|c| c.files() > 0) {
            println!("(`--changes` lists them)");
        }
    }
    print_systemd_hints(&report);
    Ok(exit_for(&report))
}

/// `labctl test`'s phases on the session: each check's solve on its VM.
async fn self_test(
    config: &Config,
    vms: &Tried,
    session: &Session,
    solve_script: Option<&str>,
    started: Instant,
) -> Result<Exit, Failure> {
    let setup_ms = started.elapsed().as_millis().try_into().unwrap_or(u64::MAX);
    let agents: Vec<VmAgent> = session
        .vms()
        .map(|(vm, client)| VmAgent {
            vm,
            client,
            lab_dir: vms.vm(vm).map_or("", |a| a.guest_lab_dir()),
        })
        .collect();
    let test = selftest::run_session(&agents, &config.lab, solve_script, setup_ms)
        .await
        .map_err(session_failure)?;
    Ok(print_self_test(config, &test))
}
