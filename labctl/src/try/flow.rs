//! What `try` and `test` do on a started lab, of one VM or a session (a
//! session of one, to the runner's [`Tried::session`]): wait for every
//! setup at once (the first VM that fails ends it, named), then the
//! runner's self-test (`test`) or a grade (`try`: for one VM each check as
//! it ends, for a session one report under each VM's heading), and what
//! the setups changed.

use super::Config;
use super::test::print_self_test;
use crate::common::human_duration;
use crate::exit::{Exit, Failure};
use crate::grading::{Rule, exit_for, grade_and_print};
use crate::progress::{print_setup_log, wait_session};
use crate::session::{grade_and_print as grade_session, session_failure};
use lab_agent_client::SessionError;
use lab_runner::selftest::{self, VmAgent};
use lab_runner::trial::Tried;
use lab_runner::{changes::Changes, systemd};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;

/// Waits for the lab, then grades it or runs the self-test on it. The VM
/// that ended it, if one did, goes to `culprit`.
pub(super) async fn flow(
    config: &Config,
    tried: &Tried,
    culprit: &RefCell<Option<String>>,
) -> Result<Exit, Failure> {
    let one = tried.one().is_some();
    // One VM's errors stand as they are; a session's are led by its VM.
    let fail = |e: SessionError| match e {
        SessionError::Vm { error, .. } if one => Failure::client(*error),
        e => session_failure(e),
    };
    let session = tried.session().map_err(Failure::client)?;
    let names: Vec<&str> = session.vms().map(|(n, _)| n).collect();
    let labels = if one {
        match config.lab.setup.as_ref().and_then(|s| s.script.as_ref()) {
            Some(script) => eprintln!("waiting for setup `{}` to finish", script.display()),
            None => eprintln!("no setup script: waiting for the agent to be ready"),
        }
        session.vms().map(|(_, c)| c.url().to_owned()).collect()
    } else {
        eprintln!(
            "waiting for the setups of VMs {} (at the same time)",
            names.join(", ")
        );
        names.iter().map(|n| format!("VM {n}")).collect()
    };
    let started = Instant::now();
    let waited = wait_session(&session, started + config.timeout, labels, |vm, p| {
        tried.target(vm)?.on_progress(p)
    })
    .await;
    let mut setup_failed = false;
    match waited {
        Ok(()) if one => eprintln!("ready after {}", human_duration(started.elapsed())),
        Ok(()) => eprintln!(
            "every VM is ready ({} s)",
            started.elapsed().as_secs_f32().round()
        ),
        Err(e) => {
            culprit.replace(e.vm().map(str::to_owned));
            if let (Some(vm), Some(error)) = (e.vm(), e.error()) {
                print_setup_log(error);
                if config.sandbox {
                    let tail = error
                        .ready_response()
                        .and_then(|r| r.setup.log_tail.clone());
                    for hint in systemd::hints(&tail.unwrap_or_default()) {
                        eprintln!("{hint}");
                    }
                }
                if let Some(target) = tried.target(vm).filter(|_| !error.is_setup_failed()) {
                    target.explain_wait_failure();
                }
            }
            let failure = fail(e);
            // `--keep-going` (one VM only): grade a failed setup anyway.
            if !(failure.exit == Exit::SetupFailed && config.keep_going) {
                return Err(failure);
            }
            failure.print();
            eprintln!("grading anyway (`--keep-going`)");
            setup_failed = true;
        }
    }
    for vm in &names {
        if let Some(target) = tried.target(vm).filter(|_| !setup_failed) {
            target.on_ready();
        }
    }
    // The lab's least root, as the agent held it against the disk booted.
    for (vm, client) in session
        .vms()
        .filter(|_| config.vm.is_some() && !setup_failed)
    {
        let root = client.ready().await.ok().and_then(|r| r.root);
        if let Some(note) = root.and_then(|r| lab_runner::inspect::root_note(&config.lab, Some(&r)))
        {
            eprintln!(
                "{}{note}",
                if one {
                    String::new()
                } else {
                    format!("{vm}: ")
                }
            );
        }
    }
    let lab_dir = |vm| tried.target(vm).map_or("", |t| t.guest_lab_dir());
    if let Some(solve_script) = &config.test {
        let setup_ms = started.elapsed().as_millis().try_into().unwrap_or(u64::MAX);
        let agents: Vec<VmAgent> = session
            .vms()
            .map(|(vm, client)| VmAgent {
                vm,
                client,
                lab_dir: lab_dir(vm),
            })
            .collect();
        let test = selftest::run(&agents, &config.lab, solve_script.as_deref(), setup_ms)
            .await
            .map_err(fail)?;
        return Ok(print_self_test(config, &test));
    }
    // What each setup changed (before the checks run). A session's lines
    // name their VM.
    let on = |vm: &str, text: &str| match one {
        true => text.to_owned(),
        false => format!("{vm}: {text}"),
    };
    let mut changes: BTreeMap<String, Changes> = BTreeMap::new();
    for (vm, c) in tried.changes() {
        match c {
            Ok(c) => drop(changes.insert(vm, c)),
            Err(e) => eprintln!(
                "warning: {}",
                on(
                    &format!("VM `{vm}`"),
                    Failure::from(e).render(false).trim_end()
                )
            ),
        }
    }
    // `--json`: the report's members, then `changes` (a session's by VM).
    let extra = match one {
        true => changes
            .values()
            .next()
            .map(|c| serde_json::json!({ "changes": c })),
        false => Some(serde_json::json!({ "changes": changes })),
    };
    let report = if let (true, Some((vm, client))) = (one, session.vms().next()) {
        // Waited above, and `--keep-going` grades a failed setup: this flow
        // keeps its own rule.
        let json = config.json;
        grade_and_print(
            client,
            &config.lab,
            lab_dir(vm),
            json,
            Rule::Unchecked,
            extra,
        )
        .await?
    } else {
        grade_session(&session, &config.lab, None, config.json, extra).await?
    };
    if !config.json {
        for (vm, c) in &changes {
            println!("{}", on(vm, &c.summary()));
            if config.list_changes {
                print!("{}", c.listing());
            }
        }
        if !config.list_changes && changes.values().any(|c| c.files() > 0) {
            println!("(`--changes` lists them)");
        }
    }
    for hint in systemd::report_hints(&report, config.sandbox) {
        eprintln!("{hint}");
    }
    Ok(if setup_failed {
        Exit::SetupFailed
    } else {
        exit_for(&report)
    })
}
