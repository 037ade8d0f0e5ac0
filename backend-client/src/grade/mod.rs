//! Grading: a lab's checks, run in order over `/v1/exec`, into a
//! [`GradeReport`] whose JSON `docs/lab-toml.md` documents (`[[checks]]`):
//! `{"lab","passed","failed","errors","total","score","max_score","instance","checks":[{"name",
//! "status","passed","points","exit_code","signal","timed_out","stdout","stderr",
//! "stdout_truncated","stderr_truncated","duration_ms","fail_message","error"}]}`
//! (`instance` only when the agent named one).
//!
//! **The grading rule is the library's**: [`Client::grade`] and
//! [`grade_all`] ask `/v1/ready` first and run nothing on a VM that is not
//! ready ([`Error::NotReady`], with the agent's state and reason): a check
//! run while setup is still going reads as the student's failure. The
//! instance that answered is the one graded: every check's answer must come
//! from it, else [`Error::InstanceChanged`] (the VM was reset mid-grade).
//! Only a local tool that already waited in its own way (`labctl try`,
//! which grades after a failed setup with `--keep-going`) skips the rule,
//! explicitly: [`Client::grade_unchecked`].
//!
//! A check *passed* (exit 0), *failed* (ran: non-zero exit, signal or
//! timeout) or is an *error* (could not run: the agent refused it, or the
//! request never got an answer). Only a failure is the student's; an error
//! is the lab's or the platform's, and a backend tells them apart by
//! `status` alone. Once the agent answers a check as no lab-agent does
//! (too large, malformed, against the protocol) or stays busy through a
//! check's whole deadline, the later checks are not sent: they are errors
//! saying why, so a hostile guest costs one check's deadline.

use crate::client::Client;
use crate::error::Error;
use lab_agent_proto::lab::{Check, Lab};
use lab_agent_proto::lifecycle::Instance;
use lab_agent_proto::{ExecRequest, ReadyResponse, ReadyState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The outcome of grading one lab on one VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradeReport {
    /// The lab's `name`.
    pub lab: String,
    /// Checks that passed.
    pub passed: usize,
    /// Checks that ran and did not pass.
    pub failed: usize,
    /// Checks that could not run.
    pub errors: usize,
    /// Checks graded (all of `lab.checks`).
    pub total: usize,
    /// The points of the checks that passed.
    pub score: u64,
    /// The points of every check graded, errors included.
    pub max_score: u64,
    /// The life of the VM graded: the `instance` of the `/v1/ready` answer
    /// that let grading start (every check answered from it). Absent from
    /// an agent that predates instance identity, and from
    /// [`Client::grade_unchecked`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<Instance>,
    /// A session's report ([`crate::Session::grade`]): the life of each
    /// VM graded, by its name (`instance` is then absent). Left out of the
    /// JSON when empty, so a one-VM report is as it always was.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instances: BTreeMap<String, Instance>,
    /// One entry per check, in the lab's order.
    pub checks: Vec<CheckResult>,
}

impl GradeReport {
    /// Every check passed (or there were none).
    pub fn all_passed(&self) -> bool {
        self.passed == self.total
    }

    /// Some check could not run: the lab or the platform is at fault.
    pub fn has_errors(&self) -> bool {
        self.errors > 0
    }

    pub(crate) fn new(
        lab: String,
        instance: Option<Instance>,
        checks: Vec<CheckResult>,
    ) -> GradeReport {
        let count = |s: CheckStatus| checks.iter().filter(|c| c.status == s).count();
        GradeReport {
            lab,
            passed: count(CheckStatus::Passed),
            failed: count(CheckStatus::Failed),
            errors: count(CheckStatus::Error),
            total: checks.len(),
            score: checks
                .iter()
                .filter(|c| c.passed)
                .map(|c| u64::from(c.points))
                .sum(),
            max_score: checks.iter().map(|c| u64::from(c.points)).sum(),
            instance,
            instances: BTreeMap::new(),
            checks,
        }
    }
}

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// It ran and exited 0.
    Passed,
    /// It ran and exited non-zero, was killed by a signal or timed out:
    /// the student's work is not done.
    Failed,
    /// It could not run (unknown user, missing cwd, refused by the agent,
    /// no answer): not the student's doing.
    Error,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    pub name: String,
    /// The VM it ran on, in a lab of several VMs (`[[vms]]`); absent from
    /// the JSON of a lab of one VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    pub status: CheckStatus,
    /// `status == passed`, for readers that only want a yes or no.
    pub passed: bool,
    /// What the check is worth (`points` in `lab.toml`).
    pub points: u32,
    /// `null` when the command was killed (timeout, signal) or did not run.
    pub exit_code: Option<i32>,
    /// The signal that killed the shell, if one did.
    pub signal: Option<i32>,
    /// The check ran past its `timeout_secs` and was killed.
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    /// `stdout` was cut at the check's `max_output_bytes`: it is not the end.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
    /// The lab's message for this check, present only when it failed.
    pub fail_message: Option<String>,
    /// Why the check could not run, present only for `status: error`.
    pub error: Option<String>,
    /// The limits the check ran into (`pids`, `memory`); left out of the
    /// JSON when empty. Its status stays `failed` (the exit code decides),
    /// but a report says the limit rather than blame the student's work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits_hit: Vec<String>,
    /// The values of the limits it hit, where the agent sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    /// For an error: what may help, for people (not in the JSON).
    #[serde(skip)]
    pub hint: Option<String>,
}

impl CheckResult {
    /// A check that could not run, for `error`'s reason.
    pub fn error(name: impl Into<String>, points: u32, error: impl Into<String>) -> CheckResult {
        CheckResult {
            name: name.into(),
            status: CheckStatus::Error,
            passed: false,
            points,
            exit_code: None,
            signal: None,
            timed_out: false,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration_ms: 0,
            fail_message: None,
            error: Some(error.into()),
            limits_hit: Vec::new(),
            max_pids: None,
            max_memory_bytes: None,
            hint: None,
            vm: None,
        }
    }

    /// What a person reads about the limits it hit: `hit its process limit
    /// (pids.max 4096)`; `None` when it hit none.
    pub fn limits_text(&self) -> Option<String> {
        lab_agent_proto::exec::limits_text(&self.limits_hit, self.max_pids, self.max_memory_bytes)
    }
}

impl Client {
    /// Grades `lab` on a VM that is ready: asks `/v1/ready` once (within
    /// the client's request timeout), and on a VM that is not ready runs
    /// nothing and fails with [`Error::NotReady`] (its state and reason;
    /// a `failed` one is also [`Error::is_setup_failed`]). Then runs the
    /// checks in order, each as its `user` with its `timeout_secs` and
    /// `LAB_DIR=guest_lab_dir` in its environment (`/opt/lab` in a VM, the
    /// staged copy in `labctl try`).
    ///
    /// The report carries the `instance` that answered ready; a check
    /// answered by another one is [`Error::InstanceChanged`] (the VM was
    /// reset mid-grade). A pinned client ([`crate::ClientBuilder::instance`])
    /// gets that error from the readiness answer, before anything runs.
    ///
    /// A check that cannot run is an `error` in the report and grading goes
    /// on; only a 401 ends it, since no later check could run either.
    pub async fn grade(&self, lab: &Lab, guest_lab_dir: &str) -> Result<GradeReport, Error> {
        self.grade_with(lab, guest_lab_dir, |_| {}).await
    }

    /// [`Client::grade`], calling `on_check` as each check finishes.
    pub async fn grade_with(
        &self,
        lab: &Lab,
        guest_lab_dir: &str,
        on_check: impl FnMut(&CheckResult),
    ) -> Result<GradeReport, Error> {
        let instance = self.require_ready().await?;
        self.grade_instance(instance, lab, guest_lab_dir, on_check)
            .await
    }

    /// Grades without asking whether the VM is ready: for a local tool that
    /// waited in its own way and grades whatever the state (`labctl try
    /// --keep-going` after a failed setup). A backend grading a student's
    /// VM uses [`Client::grade`]. The report carries no `instance`.
    pub async fn grade_unchecked(
        &self,
        lab: &Lab,
        guest_lab_dir: &str,
    ) -> Result<GradeReport, Error> {
        self.grade_unchecked_with(lab, guest_lab_dir, |_| {}).await
    }

    /// [`Client::grade_unchecked`], calling `on_check` as each check finishes.
    pub async fn grade_unchecked_with(
        &self,
        lab: &Lab,
        guest_lab_dir: &str,
        on_check: impl FnMut(&CheckResult),
    ) -> Result<GradeReport, Error> {
        self.run_checks(None, lab, guest_lab_dir, on_check).await
    }

    /// [`Client::grade`] with the guest's `LAB_DIR` as given, or (`None`) as
    /// the agent reports it ([`Client::reported_lab_dir`]), asked only once
    /// the VM is found ready: what [`grade_all`] does for each VM, and the
    /// Python package's `grade`.
    pub async fn grade_checked(
        &self,
        lab: &Lab,
        guest_lab_dir: Option<&str>,
    ) -> Result<GradeReport, Error> {
        // Readiness first: a VM that is not ready costs one call.
        let instance = self.require_ready().await?;
        let dir = match guest_lab_dir {
            Some(dir) => dir.to_owned(),
            None => self.reported_lab_dir().await?,
        };
        self.grade_instance(instance, lab, &dir, |_| {}).await
    }

    /// The grading rule: `Ok` with the instance that answered (if it named
    /// one) when the VM is ready, else [`Error::NotReady`].
    pub async fn require_ready(&self) -> Result<Option<Instance>, Error> {
        let ready = self.ready().await?;
        if ready.state != ReadyState::Ready {
            return Err(Error::NotReady {
                url: self.url().to_owned(),
                ready: Box::new(ready),
            });
        }
        Ok(ready.instance)
    }

    /// Runs the checks on `instance` (as [`Client::require_ready`] found
    /// it): every answer must come from it.
    pub(crate) async fn grade_instance(
        &self,
        instance: Option<Instance>,
        lab: &Lab,
        guest_lab_dir: &str,
        on_check: impl FnMut(&CheckResult),
    ) -> Result<GradeReport, Error> {
        // Pinned to what answered ready for the length of the grade: a
        // reset between two checks must not mix two lives of the VM in one
        // report. (A pinned client is pinned to it already.)
        let pinned;
        let client = match (&instance, self.instance()) {
            (Some(i), None) => {
                pinned = self.pinned_for_grade(&i.id)?;
                &pinned
            }
            _ => self,
        };
        client
            .run_checks(instance, lab, guest_lab_dir, on_check)
            .await
    }

    async fn run_checks(
        &self,
        instance: Option<Instance>,
        lab: &Lab,
        guest_lab_dir: &str,
        mut on_check: impl FnMut(&CheckResult),
    ) -> Result<GradeReport, Error> {
        let mut checks = Vec::with_capacity(lab.checks.len());
        // Set once the agent answered a check as no lab-agent does, or was
        // busy for a check's whole deadline: the later checks are not sent
        // (each would cost its own deadline again) and are errors saying
        // why. A hostile guest costs one check's deadline, not all of them.
        let mut gave_up: Option<String> = None;
        for check in &lab.checks {
            let result = match &gave_up {
                Some(why) => CheckResult::error(&check.name, check.points, why.clone()),
                None => {
                    let (result, stop) = self.run_check(check, guest_lab_dir).await?;
                    if stop {
                        gave_up = Some(format!(
                            "not run: the agent's answer to check `{}` was refused",
                            check.name
                        ));
                    }
                    result
                }
            };
            on_check(&result);
            checks.push(result);
        }
        Ok(GradeReport::new(lab.name.clone(), instance, checks))
    }

    /// One check's result, and whether the agent's answer means no later
    /// check should be sent.
    async fn run_check(
        &self,
        check: &Check,
        guest_lab_dir: &str,
    ) -> Result<(CheckResult, bool), Error> {
        let req = check_request(check, guest_lab_dir);
        let started = std::time::Instant::now();
        let r = match self.exec(&req).await {
            Ok(r) => r,
            // No later check could run (401), or the report would mix two
            // lives of the VM: the whole grade ends.
            Err(e) if e.is_unauthorized() || e.is_instance_changed() || e.is_instance_unknown() => {
                return Err(e);
            }
            Err(e) => {
                let stop = e.is_hostile() || e.is_busy();
                return Ok((
                    CheckResult {
                        duration_ms: started.elapsed().as_millis() as u64,
                        hint: e.hint(),
                        ..CheckResult::error(&check.name, check.points, error_text(&e))
                    },
                    stop,
                ));
            }
        };
        let passed = r.success();
        Ok((
            CheckResult {
                name: check.name.clone(),
                status: if passed {
                    CheckStatus::Passed
                } else {
                    CheckStatus::Failed
                },
                passed,
                points: check.points,
                exit_code: r.exit_code,
                signal: r.signal,
                timed_out: r.timed_out,
                stdout: r.stdout,
                stderr: r.stderr,
                stdout_truncated: r.stdout_truncated,
                stderr_truncated: r.stderr_truncated,
                duration_ms: r.duration_ms,
                fail_message: if passed {
                    None
                } else {
                    check.fail_message.clone()
                },
                error: None,
                limits_hit: r.limits_hit,
                max_pids: r.max_pids,
                max_memory_bytes: r.max_memory_bytes,
                hint: None,
                vm: None,
            },
            false,
        ))
    }
}

/// Whether a VM may be graded now; see [`Client::gradable`].
#[derive(Debug)]
pub enum Gradable {
    Ready,
    /// Not ready: its answer, which says why (setup running or failed,
    /// cloud-init not done).
    NotReady(Box<ReadyResponse>),
}

impl Client {
    /// The one rule of grading: a VM that is not ready is not graded, since
    /// a check run while setup is still going would read as the student's
    /// failure. [`Client::grade`] keeps it itself ([`Client::require_ready`]);
    /// this asks without grading (`labctl grade` does, to choose its exit
    /// status and message before anything else).
    pub async fn gradable(&self) -> Result<Gradable, Error> {
        let ready = self.ready().await?;
        Ok(if ready.state == ReadyState::Ready {
            Gradable::Ready
        } else {
            Gradable::NotReady(Box::new(ready))
        })
    }

    /// The guest's `LAB_DIR` as the agent reports it in `/v1/info`, else
    /// `/opt/lab` (an older agent that does not report it, or no answer).
    /// An answer no lab-agent gives (a relative `lab_dir`, a body too large
    /// or malformed) is an error, not a reason to guess.
    pub async fn reported_lab_dir(&self) -> Result<String, Error> {
        let reported = match self.info().await {
            Ok(info) => info.lab_dir,
            // A pinned client that met another (or an unknown) instance
            // must not go on to grade it.
            Err(e) if e.is_hostile() || e.is_instance_changed() || e.is_instance_unknown() => {
                return Err(e);
            }
            Err(e) => {
                tracing::debug!(url = self.url(), error = %e, "no /v1/info; assuming the default lab dir");
                None
            }
        };
        Ok(reported.unwrap_or_else(|| lab_agent_proto::GUEST_LAB_DIR.to_owned()))
    }
}

/// How one VM's grading ended, in [`grade_all`].
#[derive(Debug)]
pub struct GradeOutcome {
    pub url: String,
    pub result: Result<GradeReport, Error>,
    /// From when the VM got its slot to its outcome (not the wait for one).
    pub elapsed: std::time::Duration,
}

/// Grades `lab` on every VM of `clients`, at most `concurrency` at once
/// (at least 1), each with `LAB_DIR` as its agent reports it
/// ([`Client::reported_lab_dir`]); one outcome per client, in order.
///
/// Each VM costs only its own calls, each bounded by its deadline: a
/// hostile or dead VM ends in its own `Err` (or in `error` checks) and
/// holds one of the `concurrency` slots no longer than its checks'
/// deadlines. The grading rule holds for each VM as in [`Client::grade`]:
/// one that is not ready is [`Error::NotReady`] with nothing run (wait
/// first: [`crate::wait_all`]); a pinned client's other instance is
/// [`Error::InstanceChanged`].
/// Memory in flight is bounded by `concurrency` answers, each held to what
/// its check's `max_output_bytes` allows.
pub async fn grade_all(clients: &[Client], lab: &Lab, concurrency: usize) -> Vec<GradeOutcome> {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let lab = std::sync::Arc::new(lab.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, lab, slots) = (client.clone(), lab.clone(), slots.clone());
        tasks.spawn(async move {
            let _slot = slots
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let started = std::time::Instant::now();
            let result = client.grade_checked(&lab, None).await;
            (i, result, started.elapsed())
        });
    }
    let mut results: Vec<Option<(Result<GradeReport, Error>, std::time::Duration)>> =
        clients.iter().map(|_| None).collect();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((i, r, took)) => results[i] = Some((r, took)),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    clients
        .iter()
        .zip(results)
        .map(|(c, r)| {
            let (result, elapsed) = r.expect("every grading task reports its result");
            GradeOutcome {
                url: c.url().to_owned(),
                result,
                elapsed,
            }
        })
        .collect()
}

/// An error as one line for the report: the agent's own message for a
/// refusal (it names the user or the folder), else the error and its causes.
fn error_text(e: &Error) -> String {
    if let Error::Status {
        status, message, ..
    } = e
    {
        if status.is_client_error() {
            return format!("the agent refused the check ({status}): {message}");
        }
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// The exec request for one check ([`Check::request`], the one place a
/// check becomes a request).
pub fn check_request(check: &Check, guest_lab_dir: &str) -> ExecRequest {
    check.request(guest_lab_dir)
}

#[cfg(test)]
mod tests;
