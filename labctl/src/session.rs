//! `labctl wait --vm NAME … ` and `labctl grade LAB --vm NAME …`: the VMs
//! of a lab of several (`[[vms]]`), one session. Each `--vm NAME` names the
//! `--url` (and `--token-file`) at the same position:
//!
//! ```text
//! labctl grade two-vm-lab --vm server --url http://10.0.0.5:8899 --token-file server.token \
//!                         --vm client --url http://10.0.0.6:8899 --token-file client.token
//! ```
//!
//! The wait fails fast: the first VM that fails (its setup, its token, the
//! deadline) ends it, named, with that VM's exit status (4 setup failed, 3
//! not reachable, 2 token refused). Grading keeps the rule for the whole
//! session: a VM that is not ready is exit 3 (4 when its setup failed),
//! nothing run anywhere; then each check runs on its VM, into one report
//! whose checks carry their `vm`.

use super::common;
use super::exit::{Exit, Failure};
use super::grading::{exit_for, grading_what};
use super::progress::print_setup_log;
use super::report::{self, Style};
use lab_agent_client::json::{json_text, report_json, session_outcomes_json};
use lab_agent_client::{ClientBuilder, GradeReport, Session, SessionError};
use lab_agent_proto::lab::Lab;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `--vm NAME`s with their `--url`s and `--token-file`s, one each, in the
/// same order; each VM's client built by `builder`.
pub fn session(
    vms: &[String],
    urls: &[String],
    token_files: &[PathBuf],
    builder: ClientBuilder,
) -> Result<Session, Failure> {
    if urls.len() != vms.len() || token_files.len() != vms.len() {
        return Err(Failure::usage(format!(
            "{} `--vm`s, {} `--url`s and {} `--token-file`s: a session gives each VM all three",
            vms.len(),
            urls.len(),
            token_files.len()
        ))
        .hint("`--vm NAME --url URL --token-file FILE` for each VM, in that order"));
    }
    let mut clients = Vec::with_capacity(vms.len());
    for ((vm, url), file) in vms.iter().zip(urls).zip(token_files) {
        clients.push((vm.clone(), common::client(builder.clone(), url, file)?));
    }
    Session::new(clients).map_err(session_failure)
}

/// A session's error as `labctl` reports it: the VM's name first, its
/// error's exit status and hints.
pub fn session_failure(e: SessionError) -> Failure {
    match e {
        SessionError::Vm { vm, error } => {
            let mut f = Failure::client(*error);
            f.message = format!("VM `{vm}`: {}", f.message);
            f
        }
        SessionError::Mismatch(m) => Failure::usage(m),
    }
}

/// `labctl wait --vm …`: every VM ready (each one's life on stdout, or the
/// `--json` object with each VM's `vm`), or the first that fails.
pub fn wait(session: &Session, timeout: Duration, json: bool) -> Result<Exit, Failure> {
    let rt = common::runtime()?;
    let names: Vec<&str> = session.vms().map(|(n, _)| n).collect();
    eprintln!(
        "waiting for VMs {} (up to {} s)",
        names.join(", "),
        timeout.as_secs()
    );
    let outcomes = rt
        .block_on(session.wait_outcomes(Instant::now() + timeout))
        .map_err(session_failure)?;
    // Every VM when all are ready; else the one that failed, alone.
    if json {
        let v = session_outcomes_json(&outcomes);
        let _ = writeln!(std::io::stdout(), "{}", json_text(&v));
    } else {
        for e in outcomes.iter().filter_map(|(_, o)| o.result.as_ref().err()) {
            print_setup_log(e);
        }
        let ready = outcomes.iter().filter_map(|(vm, o)| {
            Some((Some(format!("{vm} ({})", o.url)), o.result.as_ref().ok()?))
        });
        let _ = write!(std::io::stdout(), "{}", super::life::lives(ready));
    }
    let failed = outcomes
        .into_iter()
        .find_map(|(vm, o)| Some((vm, o.result.err()?)));
    match failed {
        None => Ok(Exit::Success),
        Some((vm, error)) => Err(session_failure(SessionError::Vm {
            vm,
            error: Box::new(error),
        })),
    }
}

/// `labctl grade LAB --vm …`: the session graded as one, the report on
/// stdout (each check under its VM, or `--json` with each check's `vm`).
pub fn grade(
    session: &Session,
    lab: &Lab,
    guest_lab_dir: Option<&str>,
    wait: Option<Duration>,
    json: bool,
) -> Result<Exit, Failure> {
    let rt = common::runtime()?;
    rt.block_on(async {
        if let Some(wait) = wait {
            session
                .wait_ready(Instant::now() + wait)
                .await
                .map_err(|e| {
                    if let Some(error) = e.error() {
                        print_setup_log(error);
                    }
                    session_failure(e)
                })?;
        }
        let report = grade_and_print(session, lab, guest_lab_dir, json, None::<()>).await?;
        Ok(exit_for(&report))
    })
}

/// Grades the session as one, then prints its report on stdout: each check
/// under its VM's heading and the summary, or with `json` the report's
/// JSON with `extra`'s members after its own (`try` adds `changes`).
pub async fn grade_and_print<X: serde::Serialize>(
    session: &Session,
    lab: &Lab,
    guest_lab_dir: Option<&str>,
    json: bool,
    extra: Option<X>,
) -> Result<GradeReport, Failure> {
    let names: Vec<&str> = session.vms().map(|(n, _)| n).collect();
    eprintln!("{} on VMs {}", grading_what(lab), names.join(", "));
    let report = session
        .grade(lab, guest_lab_dir)
        .await
        .map_err(session_failure)?;
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{}", report_json(&report, extra));
        return Ok(report);
    }
    let style = Style {
        color: crate::color::stdout(),
    };
    // Under each VM, a heading wherever the VM changes.
    let mut last = None;
    for c in &report.checks {
        if last != Some(&c.vm) {
            let vm = c.vm.as_deref().unwrap_or("the VM");
            let _ = writeln!(out, "on {vm}:");
            last = Some(&c.vm);
        }
        let _ = write!(out, "{}", report::check(c, style));
    }
    let _ = write!(out, "\n{}", report::summary(&report, style));
    Ok(report)
}
