//! `labctl test`: proves a lab's checks before students meet them. On an
//! agent whose setup is done (a fresh sandbox or VM), [`run`] grades once
//! (each check must fail, unless it says `initially = "pass"`), runs the
//! lab's solve (the `[solve]` script as root, then each check's `solve` as
//! its user, in order), grades again (each must pass) and once more in
//! reverse order (each must say the same). [`judge`] holds those rules
//! and names every broken one in words that say what it means for
//! students; [`SelfTest`] renders the table, the sentences and the JSON.
//!
//! The solve never travels in the payload (students would find it): the
//! script's text is sent at test time through the agent's exec, as the
//! stdin of a root shell that writes it to a private temp file and runs it
//! with `bash` (stdin `/dev/null`, as setup has), so the sandbox and a VM
//! run it alike.

use crate::Error;
use lab_agent_client::{CheckResult, CheckStatus, Client, GradeReport, Session, SessionError};
use lab_agent_proto::ExecRequest;
use lab_agent_proto::exec::DEFAULT_USER;
use lab_agent_proto::lab::{Check, Initially, LAB_DIR_ENV, Lab};
use lab_agent_proto::text::escape;
use serde::Serialize;
use std::time::Instant;

/// How much of a failed solve's output is shown (its end).
pub const LOG_TAIL_BYTES: usize = 4096;

/// Runs the solve script from its text on stdin: a file, so that what the
/// script runs reads `/dev/null`, not the rest of the script.
const SOLVE_SCRIPT_COMMAND: &str = "f=$(mktemp) || exit 1; cat >\"$f\"; \
     bash \"$f\" </dev/null 2>&1; rc=$?; rm -f \"$f\"; exit $rc";

/// One broken expectation of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Not `initially = "pass"`, and it passed right after setup.
    PassesBeforeSolve,
    /// `initially = "pass"`, and it failed right after setup.
    FailsAfterSetup,
    /// It failed after the solve.
    FailsAfterSolve,
    /// Graded in reverse order, it said otherwise than in order.
    ChangesInReverse,
    /// It could not run in this phase (the agent's reason).
    CouldNotRun { phase: &'static str, error: String },
}

impl Problem {
    /// A short name, for programs (`--json`).
    pub fn kind(&self) -> &'static str {
        match self {
            Problem::PassesBeforeSolve => "passes_before_solve",
            Problem::FailsAfterSetup => "fails_after_setup",
            Problem::FailsAfterSolve => "fails_after_solve",
            Problem::ChangesInReverse => "changes_in_reverse",
            Problem::CouldNotRun { .. } => "could_not_run",
        }
    }

    /// What it means, for students: read after "check `NAME` ".
    pub fn sentence(&self) -> String {
        match self {
            Problem::PassesBeforeSolve => "passes before the solve: a student who did nothing \
                 gets its points (make it fail after setup, or mark it `initially = \"pass\"` \
                 if it checks the setup)"
                .into(),
            Problem::FailsAfterSetup => "fails right after setup although it says `initially = \
                 \"pass\"`: every student starts with it failing (fix the setup, or drop the key)"
                .into(),
            Problem::FailsAfterSolve => "fails after the solve: a student who did the work does \
                 not get its points (or the solve does not do what the check asks)"
                .into(),
            Problem::ChangesInReverse => "changes verdict when run in reverse order: it depends \
                 on another check or changes what it checks, so its grade depends on which \
                 checks the backend runs"
                .into(),
            Problem::CouldNotRun { phase, error } => format!(
                "could not run {phase} ({}): every student would see an error; the lab's to fix",
                escape(error)
            ),
        }
    }
}

/// One check through the phases.
#[derive(Debug, Clone, Serialize)]
pub struct CheckOutcome {
    pub name: String,
    /// `fail` or `pass`: what it must say after setup.
    pub initially: &'static str,
    pub after_setup: CheckResult,
    /// `None` when the solve failed (nothing graded after it).
    pub after_solve: Option<CheckResult>,
    pub reversed: Option<CheckResult>,
    #[serde(serialize_with = "problems_json")]
    pub problems: Vec<Problem>,
}

fn problems_json<S: serde::Serializer>(p: &[Problem], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct P<'a> {
        kind: &'a str,
        message: String,
    }
    s.collect_seq(p.iter().map(|p| P {
        kind: p.kind(),
        message: p.sentence(),
    }))
}

/// The solve script or a check's solve did not succeed.
#[derive(Debug, Clone, Serialize)]
pub struct SolveFailure {
    /// `the solve script `solve.sh`` or `check `NAME`'s solve`.
    pub what: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// The agent refused to run it (unknown user, bad cwd): a lab error.
    pub error: Option<String>,
    /// The end of its output (stdout, then stderr), at most [`LOG_TAIL_BYTES`].
    pub log_tail: String,
}

impl SolveFailure {
    /// `failed (exit 3)`, `timed out`, `could not run: …`.
    pub fn how(&self) -> String {
        if let Some(e) = &self.error {
            return format!("could not run: {}", escape(e));
        }
        if self.timed_out {
            return "timed out (it gets `[setup].timeout_secs`)".into();
        }
        match (self.exit_code, self.signal) {
            (_, Some(sig)) => format!("was killed by signal {sig}"),
            (Some(code), None) => format!("failed (exit {code})"),
            (None, None) => "failed".into(),
        }
    }
}

/// How long each phase took, in milliseconds. `setup` is the wait for the
/// agent to be ready (the caller's); the rest are [`run`]'s.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    pub setup_ms: u64,
    pub after_setup_ms: u64,
    pub solve_ms: u64,
    pub after_solve_ms: u64,
    pub reversed_ms: u64,
}

/// What [`run`] found.
#[derive(Debug, Clone, Serialize)]
pub struct SelfTest {
    pub lab: String,
    /// Every expectation held.
    pub ok: bool,
    pub checks: Vec<CheckOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solve_failed: Option<SolveFailure>,
    #[serde(rename = "timings_ms")]
    pub timings: Timings,
}

/// What a [`SelfTest`] comes to, worst first; `labctl` maps it to its exit
/// status (4, 2, 1, 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The solve failed: nothing after it was graded.
    SolveFailed,
    /// A check or a solve could not run at all: the lab's to fix.
    LabError,
    /// A check broke an expectation.
    Broken,
    /// Every check fails before the solve (or holds, as it says) and
    /// passes after it, in either order.
    Holds,
}

impl SelfTest {
    pub fn verdict(&self) -> Verdict {
        if let Some(f) = &self.solve_failed {
            return if f.error.is_some() {
                Verdict::LabError
            } else {
                Verdict::SolveFailed
            };
        }
        let problems = || self.checks.iter().flat_map(|c| &c.problems);
        if problems().any(|p| matches!(p, Problem::CouldNotRun { .. })) {
            Verdict::LabError
        } else if problems().next().is_some() {
            Verdict::Broken
        } else {
            Verdict::Holds
        }
    }

    /// `--json`: one object; guest text only as JSON escapes.
    pub fn json(&self) -> String {
        let text = serde_json::to_string_pretty(self).expect("a self-test serializes");
        lab_agent_proto::text::json_escape_controls(&text).into_owned()
    }
}

/// The rules for one check, from its results in the three phases (`None`
/// after a failed solve).
pub fn judge(
    check: &Check,
    after_setup: &CheckResult,
    after_solve: Option<&CheckResult>,
    reversed: Option<&CheckResult>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut could_not_run = |phase: &'static str, r: &CheckResult| {
        if r.status == CheckStatus::Error {
            problems.push(Problem::CouldNotRun {
                phase,
                error: r.error.clone().unwrap_or_default(),
            });
            true
        } else {
            false
        }
    };
    let setup_error = could_not_run("after setup", after_setup);
    let solve_error = after_solve.is_some_and(|r| could_not_run("after the solve", r));
    let reversed_error = reversed.is_some_and(|r| could_not_run("in reverse order", r));
    if !setup_error {
        match (check.initially, after_setup.passed) {
            (Initially::Fail, true) => problems.push(Problem::PassesBeforeSolve),
            (Initially::Pass, false) => problems.push(Problem::FailsAfterSetup),
            _ => {}
        }
    }
    if let Some(solved) = after_solve.filter(|_| !solve_error) {
        if !solved.passed {
            problems.push(Problem::FailsAfterSolve);
        }
        if let Some(rev) = reversed.filter(|_| !reversed_error) {
            if rev.status != solved.status {
                problems.push(Problem::ChangesInReverse);
            }
        }
    }
    problems
}

/// The lab's solve script's text, read before anything starts.
pub fn load_solve_script(lab: &Lab) -> Result<Option<String>, Error> {
    let Some(path) = lab.solve_script_path() else {
        return Ok(None);
    };
    std::fs::read_to_string(&path).map(Some).map_err(|e| {
        Error::usage(format!(
            "failed to read the solve script `{}`",
            path.display()
        ))
        .with_source(e)
    })
}

/// One VM's agent, its setup done, for [`run`].
#[derive(Debug, Clone, Copy)]
pub struct VmAgent<'a> {
    /// Its name in the lab (`[[vms]] name`; any, for a lab of one VM).
    pub vm: &'a str,
    pub client: &'a Client,
    /// Its `LAB_DIR`.
    pub lab_dir: &'a str,
}

/// Grades, solves, grades, grades in reverse, on agents whose setups are
/// done; `solve_script` is [`load_solve_script`]'s; `setup_ms` how long the
/// caller waited for setup. Progress goes to stderr. A lab of one VM runs
/// on its one agent; a session's grades are the session's (each check on
/// its VM, one report), each check's `solve` runs on the check's VM, and
/// the `[solve]` script on every VM in the lab's order (`LAB_VM` tells it
/// where it runs). An error is an agent's (unreachable, 401), naming its
/// VM; a check or solve the agent refused is in the result.
pub async fn run(
    vms: &[VmAgent<'_>],
    lab: &Lab,
    solve_script: Option<&str>,
    setup_ms: u64,
) -> Result<SelfTest, SessionError> {
    let on = match vms {
        [one] if lab.vms.is_empty() => On::One {
            client: one.client,
            lab_dir: one.lab_dir,
        },
        _ => On::Session {
            session: Session::new(vms.iter().map(|v| (v.vm.to_owned(), v.client.clone())))?,
            vms,
        },
    };
    run_on(&on, lab, solve_script, setup_ms).await
}

/// Where the phases run.
enum On<'a> {
    /// One agent (a lab of one VM).
    One {
        client: &'a Client,
        lab_dir: &'a str,
    },
    /// The VMs of a session.
    Session {
        session: Session,
        vms: &'a [VmAgent<'a>],
    },
}

impl On<'_> {
    /// One grade of `lab`'s checks (the phases waited for readiness: one
    /// agent's is not asked again; a session's rule asks every VM).
    async fn grade(&self, lab: &Lab) -> Result<GradeReport, SessionError> {
        match self {
            On::One { client, lab_dir } => client
                .grade_unchecked(lab, lab_dir)
                .await
                .map_err(|e| on_vm("", e)),
            On::Session { session, .. } => session.grade(lab, None).await,
        }
    }

    /// The agents a solve runs on: a check's VM (`Some`), or every one
    /// (`None`: the `[solve]` script); each with its VM's name (empty for
    /// one agent) and `LAB_DIR`.
    fn agents(&self, vm: Option<&str>) -> Vec<(&str, &Client, &str)> {
        match self {
            On::One { client, lab_dir } => vec![("", *client, *lab_dir)],
            On::Session { vms, .. } => vms
                .iter()
                .filter(|v| vm.is_none_or(|vm| vm == v.vm))
                .map(|v| (v.vm, v.client, v.lab_dir))
                .collect(),
        }
    }
}

fn on_vm(vm: &str, error: lab_agent_client::Error) -> SessionError {
    SessionError::Vm {
        vm: vm.to_owned(),
        error: Box::new(error),
    }
}

async fn run_on(
    on: &On<'_>,
    lab: &Lab,
    solve_script: Option<&str>,
    setup_ms: u64,
) -> Result<SelfTest, SessionError> {
    let mut timings = Timings {
        setup_ms,
        ..Timings::default()
    };
    let n = lab.checks.len();
    eprintln!("after setup: grading {n} check{}", plural(n));
    let t = Instant::now();
    let first = on.grade(lab).await?;
    timings.after_setup_ms = ms(t);

    let t = Instant::now();
    let solve_failed = solve(on, lab, solve_script).await?;
    timings.solve_ms = ms(t);

    let (mut solved, mut reversed) = (None, None);
    if solve_failed.is_none() {
        eprintln!("after the solve: grading {n} check{}", plural(n));
        let t = Instant::now();
        solved = Some(on.grade(lab).await?);
        timings.after_solve_ms = ms(t);
        eprintln!("grading again in reverse order");
        let mut backwards = lab.clone();
        backwards.checks.reverse();
        let t = Instant::now();
        let mut report = on.grade(&backwards).await?;
        report.checks.reverse();
        timings.reversed_ms = ms(t);
        reversed = Some(report);
    }
    Ok(assemble(
        lab,
        first,
        solved,
        reversed,
        solve_failed,
        timings,
    ))
}

/// Puts the reports together check by check and judges each.
fn assemble(
    lab: &Lab,
    first: GradeReport,
    solved: Option<GradeReport>,
    reversed: Option<GradeReport>,
    solve_failed: Option<SolveFailure>,
    timings: Timings,
) -> SelfTest {
    let nth = |r: &Option<GradeReport>, i: usize| r.as_ref().map(|r| r.checks[i].clone());
    let checks: Vec<CheckOutcome> = lab
        .checks
        .iter()
        .zip(first.checks)
        .enumerate()
        .map(|(i, (check, after_setup))| {
            let (after_solve, rev) = (nth(&solved, i), nth(&reversed, i));
            CheckOutcome {
                name: check.name.clone(),
                initially: match check.initially {
                    Initially::Fail => "fail",
                    Initially::Pass => "pass",
                },
                problems: judge(check, &after_setup, after_solve.as_ref(), rev.as_ref()),
                after_setup,
                after_solve,
                reversed: rev,
            }
        })
        .collect();
    let mut test = SelfTest {
        lab: lab.name.clone(),
        ok: false,
        checks,
        solve_failed,
        timings,
    };
    test.ok = test.verdict() == Verdict::Holds;
    test
}

/// The solve script as root (on every VM of a session), then each
/// check's `solve` as its user (on its VM), in order; the first that does
/// not succeed ends it.
async fn solve(
    on: &On<'_>,
    lab: &Lab,
    script: Option<&str>,
) -> Result<Option<SolveFailure>, SessionError> {
    let timeout = lab.setup_timeout_secs();
    let where_ = |vm: &str| {
        if vm.is_empty() {
            String::new()
        } else {
            format!(" on VM `{vm}`")
        }
    };
    if let (Some(text), Some(solve)) = (script, &lab.solve) {
        for (vm, client, lab_dir) in on.agents(None) {
            let what = format!(
                "the solve script `{}`{}",
                solve.script.display(),
                where_(vm)
            );
            eprintln!("running {what}");
            let req = ExecRequest::new(SOLVE_SCRIPT_COMMAND)
                .user(DEFAULT_USER)
                .timeout_secs(timeout)
                // The lab's `profile`, as its checks have by default: a
                // solve sees the environment its checks see.
                .profile(lab.defaults.profile)
                .env(LAB_DIR_ENV, lab_dir)
                // What a student starts stays running: a solve's too.
                .leave_running(true)
                .stdin(text);
            let failed = exec_solve(client, &req, what).await;
            if let Some(failed) = failed.map_err(|e| on_vm(vm, e))? {
                return Ok(Some(failed));
            }
        }
    }
    for check in lab.checks.iter() {
        let Some(command) = &check.solve else {
            continue;
        };
        for (vm, client, lab_dir) in on.agents(check.vm.as_deref()) {
            let what = format!("check `{}`'s solve{}", escape(&check.name), where_(vm));
            eprintln!("running {what}");
            let mut req = ExecRequest::new(command.clone())
                .user(check.exec.user.clone())
                .timeout_secs(timeout)
                .profile(check.exec.profile)
                .leave_running(true);
            for (key, value) in &check.exec.env {
                req = req.env(key, value);
            }
            req = req.env(LAB_DIR_ENV, lab_dir);
            if let Some(cwd) = &check.exec.cwd {
                req = req.cwd(cwd);
            }
            let failed = exec_solve(client, &req, what).await;
            if let Some(failed) = failed.map_err(|e| on_vm(vm, e))? {
                return Ok(Some(failed));
            }
        }
    }
    Ok(None)
}

async fn exec_solve(
    client: &Client,
    req: &ExecRequest,
    what: String,
) -> Result<Option<SolveFailure>, lab_agent_client::Error> {
    let result = match client.exec(req).await {
        Ok(r) => r,
        // The agent refused it (unknown user, missing cwd): the lab's.
        Err(e) if e.status().map(|s| s.as_u16()) == Some(400) => {
            return Ok(Some(SolveFailure {
                what,
                exit_code: None,
                signal: None,
                timed_out: false,
                error: Some(e.to_string()),
                log_tail: String::new(),
            }));
        }
        Err(e) => return Err(e),
    };
    if result.exit_code == Some(0) && !result.timed_out {
        return Ok(None);
    }
    let mut output = result.stdout;
    if !result.stderr.is_empty() {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&result.stderr);
    }
    Ok(Some(SolveFailure {
        what,
        exit_code: result.exit_code,
        signal: result.signal,
        timed_out: result.timed_out,
        error: None,
        log_tail: tail(&output, LOG_TAIL_BYTES).to_owned(),
    }))
}

/// The last `max` bytes of `text` or fewer, from a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis().try_into().unwrap_or(u64::MAX)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

mod render;
#[cfg(test)]
mod tests;
