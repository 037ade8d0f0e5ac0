//! Grading: a lab's checks, run in order over `/v1/exec`, into a
//! [`GradeReport`] whose JSON is the one SPEC §6 fixes:
//! `{"lab","passed","total","checks":[{"name","passed","exit_code","stdout",
//! "stderr","duration_ms","fail_message"}]}`.

use crate::client::Client;
use crate::error::Error;
use hyper::StatusCode;
use lab_agent_proto::ExecRequest;
use lab_agent_proto::exec::DEFAULT_USER;
use lab_agent_proto::lab::{Check, LAB_DIR_ENV, Lab};
use serde::{Deserialize, Serialize};

/// The outcome of grading one lab on one VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradeReport {
    /// The lab's `name`.
    pub lab: String,
    /// Checks that passed.
    pub passed: usize,
    /// Checks run (all of the lab's).
    pub total: usize,
    /// One entry per check, in the lab's order.
    pub checks: Vec<CheckResult>,
}

impl GradeReport {
    /// Every check passed (and there was at least one, or none to run).
    pub fn all_passed(&self) -> bool {
        self.passed == self.total
    }
}

/// One check's outcome. A check passes when its command exits 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    pub name: String,
    pub passed: bool,
    /// `null` when the command was killed (timeout, signal) or could not
    /// be started.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    /// The lab's message for this check, present only when it failed.
    pub fail_message: Option<String>,
    /// The signal that killed the command, if one did. Not in the JSON.
    #[serde(skip)]
    pub signal: Option<i32>,
    /// The check ran past its `timeout_secs` and was killed. Not in the JSON.
    #[serde(skip)]
    pub timed_out: bool,
    /// Why the agent refused to start the command (unknown user, bad cwd),
    /// also appended to `stderr`. Not in the JSON.
    #[serde(skip)]
    pub not_started: Option<String>,
}

impl Client {
    /// Runs `lab`'s checks in order, each as its `user` with its
    /// `timeout_secs` and `LAB_DIR=guest_lab_dir` in its environment
    /// (`/opt/lab` in a VM, the staged copy in `labctl try`).
    ///
    /// A check the agent refuses to start (400: unknown user, …) fails with
    /// the agent's message in `stderr`; any other error (unreachable, 401)
    /// ends grading, since no later check could run either.
    pub async fn grade(&self, lab: &Lab, guest_lab_dir: &str) -> Result<GradeReport, Error> {
        self.grade_with(lab, guest_lab_dir, |_| {}).await
    }

    /// [`Client::grade`], calling `on_check` as each check finishes.
    pub async fn grade_with(
        &self,
        lab: &Lab,
        guest_lab_dir: &str,
        mut on_check: impl FnMut(&CheckResult),
    ) -> Result<GradeReport, Error> {
        let mut checks = Vec::with_capacity(lab.checks.len());
        for check in &lab.checks {
            let result = self.run_check(check, guest_lab_dir).await?;
            on_check(&result);
            checks.push(result);
        }
        Ok(GradeReport {
            lab: lab.name.clone(),
            passed: checks.iter().filter(|c| c.passed).count(),
            total: checks.len(),
            checks,
        })
    }

    async fn run_check(&self, check: &Check, guest_lab_dir: &str) -> Result<CheckResult, Error> {
        let req = check_request(check, guest_lab_dir);
        let started = std::time::Instant::now();
        match self.exec(&req).await {
            Ok(r) => {
                let passed = r.success();
                Ok(CheckResult {
                    name: check.name.clone(),
                    passed,
                    exit_code: r.exit_code,
                    stdout: r.stdout,
                    stderr: r.stderr,
                    duration_ms: r.duration_ms,
                    fail_message: if passed {
                        None
                    } else {
                        check.fail_message.clone()
                    },
                    signal: r.signal,
                    timed_out: r.timed_out,
                    not_started: None,
                })
            }
            Err(Error::Status {
                status: StatusCode::BAD_REQUEST,
                message,
                ..
            }) => Ok(CheckResult {
                name: check.name.clone(),
                passed: false,
                exit_code: None,
                stdout: String::new(),
                stderr: format!("the agent could not start the check: {message}\n"),
                duration_ms: started.elapsed().as_millis() as u64,
                fail_message: check.fail_message.clone(),
                signal: None,
                timed_out: false,
                not_started: Some(message),
            }),
            Err(e) => Err(e),
        }
    }
}

/// The exec request for one check.
pub fn check_request(check: &Check, guest_lab_dir: &str) -> ExecRequest {
    ExecRequest::new(check.run.clone())
        .user(check.user.as_deref().unwrap_or(DEFAULT_USER))
        .timeout_secs(check.timeout_secs)
        .env(LAB_DIR_ENV, guest_lab_dir)
        .profile(check.profile)
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
"#,
            "/labs/l",
        )
        .unwrap();
        let a = check_request(&lab.checks[0], "/opt/lab");
        assert_eq!(a.command, "test -f $LAB_DIR/x");
        assert_eq!(a.user, "root");
        assert_eq!(a.timeout_secs, 60);
        assert_eq!(a.env.get("LAB_DIR").map(String::as_str), Some("/opt/lab"));
        let b = check_request(&lab.checks[1], "/tmp/staged");
        assert_eq!((b.user.as_str(), b.timeout_secs), ("student", 5));
        assert_eq!(
            b.env.get("LAB_DIR").map(String::as_str),
            Some("/tmp/staged")
        );
        assert!(b.profile.is_login());
        let lab = Lab::parse(
            "name = \"l\"\nprofile = \"system\"\n[[checks]]\nname = \"a\"\nrun = \"id\"\n",
            "/labs/l",
        )
        .unwrap();
        let a = check_request(&lab.checks[0], "/opt/lab");
        assert_eq!(a.profile, lab_agent_proto::Profile::System);
    }

    #[test]
    fn report_json_has_exactly_the_spec_shape() {
        let report = GradeReport {
            lab: "hello-lab".into(),
            passed: 1,
            total: 2,
            checks: vec![
                CheckResult {
                    name: "a".into(),
                    passed: true,
                    exit_code: Some(0),
                    stdout: "ok\n".into(),
                    stderr: String::new(),
                    duration_ms: 3,
                    fail_message: None,
                    signal: None,
                    timed_out: false,
                    not_started: None,
                },
                CheckResult {
                    name: "b".into(),
                    passed: false,
                    exit_code: None,
                    stdout: String::new(),
                    stderr: String::new(),
                    duration_ms: 30000,
                    fail_message: Some("do it".into()),
                    signal: Some(15),
                    timed_out: true,
                    not_started: None,
                },
            ],
        };
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "lab": "hello-lab", "passed": 1, "total": 2,
                "checks": [
                    {"name": "a", "passed": true, "exit_code": 0, "stdout": "ok\n",
                     "stderr": "", "duration_ms": 3, "fail_message": null},
                    {"name": "b", "passed": false, "exit_code": null, "stdout": "",
                     "stderr": "", "duration_ms": 30000, "fail_message": "do it"},
                ]
            })
        );
        assert!(!report.all_passed());
        let back: GradeReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.checks[0].name, "a");
    }
}
