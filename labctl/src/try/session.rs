//! `labctl try` and `labctl test` of a lab of several VMs (`[[vms]]`): the
//! runner's `LocalSession` starts one sandbox per VM on a private network
//! (names resolving, setups at the same time); this file waits for the
//! session as one (the first VM that fails ends it, named), then grades it
//! as one (each check on its VM, one report under each VM's heading) or
//! runs the self-test on it, and prints what each VM's lab changed.

use super::test::print_self_test;
use super::{Config, interruptible_for, print_systemd_hints};
use crate::exit::{Exit, Failure};
use crate::grading::exit_for;
use crate::progress::{WaitDisplay, print_setup_log};
use crate::session::{print_report, session_failure};
use lab_agent_client::Session;
use lab_runner::selftest::{self, VmAgent};
use lab_runner::{LocalSession, changes, systemd};
use std::collections::BTreeMap;
use std::time::Instant;

const WHAT: &str = "the session's sandboxes";

/// Starts the session, runs `try`'s (or `test`'s) flow on it, stops it.
pub(super) fn run(config: &Config) -> Result<Exit, Failure> {
    if let Some(what) = systemd::mentioned(&config.lab) {
        eprintln!(
            "note: {what} `systemctl`; the sandbox runs no systemd: if that fails here, the \
             lab must be tried on VMs"
        );
    }
    let rt = crate::common::runtime()?;
    rt.block_on(async {
        let vms =
            interruptible_for(WHAT, LocalSession::start(&config.lab, &config.agent)).await??;
        let outcome = interruptible_for(WHAT, flow(config, &vms)).await;
        vms.stop().await;
        outcome?
    })
}

async fn flow(config: &Config, vms: &LocalSession) -> Result<Exit, Failure> {
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
            if let Some(i) = names.iter().position(|n| *n == vm) {
                display.update(i, p);
            }
        })
        .await;
    display.clear();
    drop(display);
    if let Err(e) = waited {
        if let (Some(vm), Some(error)) = (e.vm(), e.error()) {
            print_setup_log(error);
            let tail = error
                .ready_response()
                .and_then(|r| r.setup.log_tail.as_deref());
            for hint in systemd::hints(tail.unwrap_or_default()) {
                eprintln!("{hint}");
            }
            if !error.is_setup_failed() {
                if let Some(agent) = vms.vm(vm) {
                    agent.print_log_tail();
                }
            }
        }
        return Err(session_failure(e));
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
    vms: &LocalSession,
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
