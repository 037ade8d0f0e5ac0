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
                pinned = self.pinned(&i.id)?;
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
mod tests {
    use super::*;

    #[test]
    fn check_requests_carry_user_timeout_and_lab_dir() {
        let lab = Lab::parse(
            r#"
name = "l"
[[checks]]
name = "a"
run = "test -f $LAB_DIR/x"
[[checks]]
name = "b"
run = "id"
user = "student"
timeout_secs = 5
env = { GREETING = "hi" }
cwd = "/srv"
stdin = "yes\n"
max_output_bytes = 100
"#,
            "/labs/l",
        )
        .unwrap();
        let a = check_request(&lab.checks[0], "/opt/lab");
        assert_eq!(a.command, "test -f $LAB_DIR/x");
        assert_eq!(a.options.user, "root");
        assert_eq!(a.options.timeout_secs, 60);
        assert_eq!(
            a.options.env.get("LAB_DIR").map(String::as_str),
            Some("/opt/lab")
        );
        assert_eq!(
            a.options.max_output_bytes,
            lab_agent_proto::lab::DEFAULT_MAX_OUTPUT_BYTES
        );
        assert_eq!(
            (a.options.cwd.as_deref(), a.options.stdin.as_deref()),
            (None, None)
        );
        let b = check_request(&lab.checks[1], "/tmp/staged");
        assert_eq!(
            (b.options.user.as_str(), b.options.timeout_secs),
            ("student", 5)
        );
        assert_eq!(
            b.options.env.get("LAB_DIR").map(String::as_str),
            Some("/tmp/staged")
        );
        assert_eq!(
            b.options.env.get("GREETING").map(String::as_str),
            Some("hi")
        );
        assert_eq!(
            (
                b.options.cwd.as_deref(),
                b.options.stdin.as_deref(),
                b.options.max_output_bytes
            ),
            (Some("/srv"), Some("yes\n"), 100)
        );
        assert!(b.options.profile.is_login());
        let lab = Lab::parse(
            "name = \"l\"\nprofile = \"system\"\n[[checks]]\nname = \"a\"\nrun = \"id\"\n",
            "/labs/l",
        )
        .unwrap();
        let a = check_request(&lab.checks[0], "/opt/lab");
        assert_eq!(a.options.profile, lab_agent_proto::Profile::System);
        assert!(
            !a.options.leave_running
                && a.options.max_pids.is_none()
                && a.options.max_memory_bytes.is_none()
        );
        let lab = Lab::parse(
            "name = \"l\"\n[[checks]]\nname = \"a\"\nrun = \"id\"\nleave_running = true\nmax_pids = 50\nmax_memory_bytes = 33554432\n",
            "/labs/l",
        )
        .unwrap();
        let a = check_request(&lab.checks[0], "/opt/lab");
        assert!(a.options.leave_running);
        assert_eq!(
            (a.options.max_pids, a.options.max_memory_bytes),
            (Some(50), Some(32 << 20))
        );
    }

    /// A stand-in agent whose instance is `a` until it has answered
    /// `execs_as_a` execs, then `b` (the VM reset between two checks).
    /// One request per connection. Counts the execs it answered.
    async fn resetting_agent(execs_as_a: u64) -> (String, std::sync::Arc<AtomicU64>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let execs = std::sync::Arc::new(AtomicU64::new(0));
        let counted = execs.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let execs = counted.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let head_end = loop {
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break p + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buf.len() < head_end + len {
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = if head.starts_with("post") {
                        let n = execs.fetch_add(1, Ordering::SeqCst);
                        let id = if n < execs_as_a { A } else { B };
                        format!(
                            r#"{{"exit_code":0,"signal":null,"timed_out":false,"duration_ms":1,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false,"instance_id":"{id}","boot_id":"x"}}"#
                        )
                    } else {
                        format!(
                            r#"{{"state":"ready","cloud_init":{{"done":true,"errors":[]}},"setup":{{"state":"succeeded","exit_code":0}},"instance":{{"id":"{A}","boots":1,"boot_id":"x","first_boot_at":"2026-12-03T10:00:00Z"}}}}"#
                        )
                    };
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\
                         content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(resp.as_bytes()).await;
                });
            }
        });
        (url, execs)
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    use std::sync::atomic::{AtomicU64, Ordering};

    fn three_checks() -> Lab {
        Lab::parse(
            "name = \"l\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n\
             [[checks]]\nname = \"b\"\nrun = \"true\"\n\
             [[checks]]\nname = \"c\"\nrun = \"true\"\n",
            "/labs/l",
        )
        .unwrap()
    }

    /// The instance that answered ready is the one graded: a check
    /// answered by another (a reset between two checks) ends the grade
    /// with `InstanceChanged`, and no later check is sent.
    #[tokio::test]
    async fn a_reset_mid_grade_is_instance_changed() {
        let (url, execs) = resetting_agent(1).await;
        let c = Client::new(&url, "token").unwrap();
        let e = c.grade(&three_checks(), "/opt/lab").await.unwrap_err();
        assert!(e.is_instance_changed(), "{e:?}");
        match &e {
            Error::InstanceChanged {
                expected, found, ..
            } => assert_eq!((expected.as_str(), found.as_str()), (A, B)),
            _ => unreachable!(),
        }
        assert_eq!(execs.load(Ordering::SeqCst), 2, "no check after the reset");
        // The client itself stays unpinned.
        assert_eq!(c.instance(), None);
        // No reset: graded, and the report names the instance.
        let (url, _) = resetting_agent(u64::MAX).await;
        let report = Client::new(&url, "token")
            .unwrap()
            .grade(&three_checks(), "/opt/lab")
            .await
            .unwrap();
        assert!(report.all_passed());
        assert_eq!(report.instance.unwrap().id, A);
    }

    #[test]
    fn a_limit_hit_is_in_the_json_only_when_there_is_one() {
        let mut b = result("b", CheckStatus::Failed, 1);
        let text = serde_json::to_string(&b).unwrap();
        assert!(!text.contains("limits_hit"), "{text}");
        assert_eq!(b.limits_text(), None);
        b.limits_hit = vec!["pids".into()];
        b.max_pids = Some(4096);
        let text = serde_json::to_string(&b).unwrap();
        assert!(
            text.contains(r#""limits_hit":["pids"],"max_pids":4096"#),
            "{text}"
        );
        assert_eq!(
            b.limits_text().unwrap(),
            "hit its process limit (pids.max 4096)"
        );
        assert_eq!(
            serde_json::from_str::<CheckResult>(&text)
                .unwrap()
                .limits_hit,
            b.limits_hit
        );
    }

    fn result(name: &str, status: CheckStatus, points: u32) -> CheckResult {
        CheckResult {
            status,
            passed: status == CheckStatus::Passed,
            duration_ms: 1,
            error: None,
            ..CheckResult::error(name, points, "")
        }
    }

    #[test]
    fn report_json_has_exactly_the_spec_shape() {
        let mut a = result("a", CheckStatus::Passed, 2);
        a.exit_code = Some(0);
        a.stdout = "ok\n".into();
        let mut b = result("b", CheckStatus::Failed, 3);
        b.signal = Some(15);
        b.timed_out = true;
        b.stdout_truncated = true;
        b.fail_message = Some("do it".into());
        let mut c = result("c", CheckStatus::Error, 1);
        c.error = Some("the agent refused the check (400 Bad Request): unknown user".into());
        c.hint = Some("not in the JSON".into());
        let report = GradeReport::new("hello-lab".into(), None, vec![a, b, c]);
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "lab": "hello-lab", "passed": 1, "failed": 1, "errors": 1, "total": 3,
                "score": 2, "max_score": 6,
                "checks": [
                    {"name": "a", "status": "passed", "passed": true, "points": 2,
                     "exit_code": 0, "signal": null, "timed_out": false,
                     "stdout": "ok\n", "stderr": "",
                     "stdout_truncated": false, "stderr_truncated": false,
                     "duration_ms": 1, "fail_message": null, "error": null},
                    {"name": "b", "status": "failed", "passed": false, "points": 3,
                     "exit_code": null, "signal": 15, "timed_out": true,
                     "stdout": "", "stderr": "",
                     "stdout_truncated": true, "stderr_truncated": false,
                     "duration_ms": 1, "fail_message": "do it", "error": null},
                    {"name": "c", "status": "error", "passed": false, "points": 1,
                     "exit_code": null, "signal": null, "timed_out": false,
                     "stdout": "", "stderr": "",
                     "stdout_truncated": false, "stderr_truncated": false,
                     "duration_ms": 1, "fail_message": null,
                     "error": "the agent refused the check (400 Bad Request): unknown user"},
                ]
            })
        );
        assert!(!report.all_passed() && report.has_errors());
        let back: GradeReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.checks[2].status, CheckStatus::Error);
    }
}
