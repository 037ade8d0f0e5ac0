//! `labctl grade`: run a lab's checks against a VM and report.
//!
//! A VM that is not ready is not graded (exit 3, or 4 when its setup
//! failed): a check run while setup is still going would read as the
//! student's failure. `--wait SECS` gives it time first.

use super::common::{self, AgentArgs};
use super::exit::{Exit, Failure};
use super::report::{self, Style};
use super::wait::{print_setup_log, wait_with_display};
use lab_agent_client::{Client, Gradable, GradeReport};
use lab_agent_proto::ReadyState;
use lab_agent_proto::lab::Lab;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct GradeArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab: PathBuf,
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Where the lab's files are in the guest: the checks' `LAB_DIR`
    /// (default: what the agent reports in `/v1/info`, else `/opt/lab`)
    #[arg(long = "lab-dir", value_name = "PATH")]
    pub guest_lab_dir: Option<String>,
    /// Run only the check with this name (repeat for several)
    #[arg(long = "check", value_name = "NAME")]
    pub checks: Vec<String>,
    /// Wait up to this many seconds for the VM to be ready before grading
    /// (default: grade only a VM that is ready now)
    #[arg(long, value_name = "SECS")]
    pub wait: Option<u64>,
    /// Allow the agent this many seconds to answer, beyond each check's own
    /// `timeout_secs`
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_ANSWER_SECS)]
    pub timeout: u64,
    /// Print the report as JSON on stdout
    #[arg(long)]
    pub json: bool,
}

/// `--timeout`'s default: the client's request timeout.
const DEFAULT_ANSWER_SECS: u64 = lab_agent_client::client::DEFAULT_REQUEST_TIMEOUT.as_secs();

#[derive(Debug)]
pub struct Config {
    lab: Lab,
    client: Client,
    guest_lab_dir: Option<String>,
    wait: Option<Duration>,
    json: bool,
}

impl Config {
    pub fn from_args(args: &GradeArgs) -> Result<Config, Failure> {
        let mut lab = Lab::load(&args.lab).map_err(Failure::lab)?;
        select_checks(&mut lab, &args.checks)?;
        if let Some(dir) = args.guest_lab_dir.as_ref().filter(|d| !d.starts_with('/')) {
            return Err(Failure::usage(format!(
                "`--lab-dir {dir}` is not an absolute path in the guest"
            )));
        }
        if args.timeout == 0 {
            return Err(Failure::usage("`--timeout` must be at least 1 second"));
        }
        let token = common::read_token(&args.agent.token_file)?;
        let client = Client::builder()
            .request_timeout(Duration::from_secs(args.timeout))
            .build(&args.agent.url, &token)
            .map_err(Failure::client)?;
        Ok(Config {
            lab,
            client,
            guest_lab_dir: args.guest_lab_dir.clone(),
            wait: args.wait.map(Duration::from_secs),
            json: args.json,
        })
    }
}

pub fn run(args: &GradeArgs) -> Result<Exit, Failure> {
    let config = Config::from_args(args)?;
    let rt = common::runtime()?;
    rt.block_on(async {
        ensure_ready(&config.client, config.wait).await?;
        let guest_lab_dir = match &config.guest_lab_dir {
            Some(dir) => dir.clone(),
            None => config
                .client
                .reported_lab_dir()
                .await
                .map_err(Failure::client)?,
        };
        let report =
            grade_and_print(&config.client, &config.lab, &guest_lab_dir, config.json).await?;
        Ok(exit_for(&report))
    })
}

/// `--check NAME`: keeps only the named checks ([`Lab::select_checks`]);
/// an unknown name is a usage error listing the names.
pub fn select_checks(lab: &mut Lab, names: &[String]) -> Result<(), Failure> {
    lab.select_checks(names)
        .map_err(|e| Failure::usage(e.to_string()))
}

/// Returns when the agent is ready; else the failure to report: not ready
/// now (exit 3), setup failed (4), unreachable (3). With `wait`, waits
/// first, with progress.
async fn ensure_ready(client: &Client, wait: Option<Duration>) -> Result<(), Failure> {
    if let Some(wait) = wait {
        let outcome = wait_with_display(std::slice::from_ref(client), Instant::now() + wait)
            .await
            .pop()
            .expect("one outcome per client");
        return outcome.result.map(drop).map_err(|e| {
            print_setup_log(&e);
            Failure::client(e)
        });
    }
    let ready = match client.gradable().await.map_err(Failure::client)? {
        Gradable::Ready => return Ok(()),
        Gradable::NotReady(ready) => ready,
    };
    let exit = match ready.state {
        ReadyState::Failed => Exit::SetupFailed,
        _ => Exit::Unreachable,
    };
    // The guest's words: the error's rendering escapes them.
    let reason = ready
        .reason
        .as_deref()
        .map_or(String::new(), |r| format!(": {r}"));
    Err(Failure::new(
        exit,
        format!(
            "the VM at {} is not ready, so it was not graded: its state is `{}`{reason}",
            client.url(),
            ready.state.as_str()
        ),
    )
    .hint(match ready.state {
        ReadyState::Failed => {
            "its setup failed: `labctl wait` shows the setup log; fix the lab and try it with `labctl try`"
        }
        _ => "grade once it is ready: `labctl grade --wait SECS` waits for it first",
    }))
}

/// 0 when every check passed; 5 when any could not run (an error is the
/// lab's, and must not read as a failing student); 1 otherwise.
pub fn exit_for(report: &GradeReport) -> Exit {
    if report.has_errors() {
        Exit::CheckError
    } else if report.all_passed() {
        Exit::Success
    } else {
        Exit::CheckFailed
    }
}

/// Grades, printing each check to stdout as it finishes (or, with `json`,
/// the whole report at the end). `grade` and `try` share this.
pub async fn grade_and_print(
    client: &Client,
    lab: &Lab,
    guest_lab_dir: &str,
    json: bool,
) -> Result<GradeReport, Failure> {
    grade_and_print_with(client, lab, guest_lab_dir, json, None::<()>).await
}

/// [`grade_and_print`], with `extra`'s members (a struct's fields) after
/// the report's in the JSON object: `try` adds its `changes`.
pub async fn grade_and_print_with<X: Serialize>(
    client: &Client,
    lab: &Lab,
    guest_lab_dir: &str,
    json: bool,
    extra: Option<X>,
) -> Result<GradeReport, Failure> {
    let style = Style {
        color: crate::color::stdout(),
    };
    // `LAB_DIR` may be the agent's word (`/v1/info`): shown escaped.
    eprintln!(
        "grading `{}` ({} check{}) at {} with LAB_DIR={}",
        lab.name,
        lab.checks.len(),
        if lab.checks.len() == 1 { "" } else { "s" },
        client.url(),
        lab_agent_proto::text::escape(guest_lab_dir)
    );
    let report = client
        .grade_with(lab, guest_lab_dir, |c| {
            if !json {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(report::check(c, style).as_bytes());
                let _ = out.flush();
            }
        })
        .await
        .map_err(Failure::client)?;
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{}", report_json(&report, extra));
    } else {
        let _ = write!(out, "\n{}", report::summary(&report, style));
    }
    Ok(report)
}

/// `--json`'s text: the report's members in its fields' order (SPEC's, and
/// the Python package's `to_json()`, which must equal it), then `extra`'s.
/// Serialized from the types, not through a `serde_json::Value`, whose
/// objects sort their keys.
fn report_json<X: Serialize>(report: &GradeReport, extra: Option<X>) -> String {
    #[derive(Serialize)]
    struct WithExtra<'a, X> {
        #[serde(flatten)]
        report: &'a GradeReport,
        #[serde(flatten)]
        extra: Option<X>,
    }
    let text =
        serde_json::to_string_pretty(&WithExtra { report, extra }).expect("a report serializes");
    // Guest text (output, errors) only as JSON escapes, C1 included.
    lab_agent_proto::text::json_escape_controls(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where each of `keys` first appears as a member at `indent` spaces in
    /// pretty JSON, in order; panics (naming it) when one is missing.
    fn positions(text: &str, indent: usize, keys: &[&str]) -> Vec<usize> {
        let pad = " ".repeat(indent);
        keys.iter()
            .map(|k| {
                text.find(&format!("\n{pad}\"{k}\": "))
                    .unwrap_or_else(|| panic!("no `{k}` at indent {indent} in {text}"))
            })
            .collect()
    }

    fn assert_in_order(text: &str, indent: usize, keys: &[&str]) {
        let at = positions(text, indent, keys);
        assert!(
            at.windows(2).all(|w| w[0] < w[1]),
            "members not in the order {keys:?} in {text}"
        );
    }

    // A report read from members in an order unlike its fields' (and unlike
    // sorted), so only serializing in field order passes.
    fn report() -> GradeReport {
        serde_json::from_str(
            r#"{"total": 1, "score": 0, "max_score": 2, "lab": "l", "errors": 0,
                "failed": 1, "passed": 0, "checks": [{
                "stdout": "", "name": "c", "status": "failed", "passed": false,
                "points": 2, "exit_code": 1, "signal": null, "timed_out": false,
                "stderr": "", "stdout_truncated": false, "stderr_truncated": false,
                "duration_ms": 3, "fail_message": "do it", "error": null}]}"#,
        )
        .unwrap()
    }

    const TOP: &[&str] = &[
        "lab",
        "passed",
        "failed",
        "errors",
        "total",
        "score",
        "max_score",
        "checks",
    ];
    const CHECK: &[&str] = &[
        "name",
        "status",
        "passed",
        "points",
        "exit_code",
        "signal",
        "timed_out",
        "stdout",
        "stderr",
        "stdout_truncated",
        "stderr_truncated",
        "duration_ms",
        "fail_message",
        "error",
    ];

    #[test]
    fn grade_json_keeps_the_reports_field_order() {
        let text = report_json(&report(), None::<()>);
        assert!(text.starts_with("{\n  \"lab\": \"l\",\n"), "{text}");
        assert_in_order(&text, 2, TOP);
        assert_in_order(&text, 6, CHECK);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_object().unwrap().len(), TOP.len(), "{text}");
        assert_eq!(v["checks"][0]["status"], "failed");
    }

    #[test]
    fn try_json_puts_its_members_after_the_reports() {
        #[derive(Serialize)]
        struct Extra {
            changes: Vec<&'static str>,
        }
        let text = report_json(
            &report(),
            Some(Extra {
                changes: vec!["/etc/x"],
            }),
        );
        let mut keys = TOP.to_vec();
        keys.push("changes");
        assert_in_order(&text, 2, &keys);
        assert!(
            text.ends_with("  \"changes\": [\n    \"/etc/x\"\n  ]\n}"),
            "{text}"
        );
    }
}
