//! Grading one VM and printing its report as each check finishes (or, with
//! `--json`, the whole report at the end), and the exit status a report
//! means. `labctl grade` and `labctl try` share it.

use super::exit::{Exit, Failure};
use super::report::{self, Style};
use lab_agent_client::json::report_json;
use lab_agent_client::{Client, GradeReport};
use lab_agent_proto::lab::Lab;
use serde::Serialize;
use std::io::Write;

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

/// "grading `LAB` (N checks)": how each grading line starts.
pub fn grading_what(lab: &Lab) -> String {
    let n = lab.checks.len();
    let s = if n == 1 { "" } else { "s" };
    format!("grading `{}` ({n} check{s})", lab.name)
}

/// Whether grading asks the agent first that the VM is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The library's rule ([`Client::grade`]): `labctl grade`.
    Ready,
    /// Skipped, explicitly ([`Client::grade_unchecked`]): `labctl try`,
    /// which waited in its own flow and grades after a failed setup with
    /// `--keep-going`.
    Unchecked,
}

/// Grades one VM under `rule` (the library's: a VM that is not ready is
/// refused with nothing run), printing each check to stdout as it ends;
/// or, with `json`, the whole report at the end, `extra`'s members (a
/// struct's fields) after the report's: `try` adds its `changes`.
pub async fn grade_and_print<X: Serialize>(
    client: &Client,
    lab: &Lab,
    guest_lab_dir: &str,
    json: bool,
    rule: Rule,
    extra: Option<X>,
) -> Result<GradeReport, Failure> {
    let style = Style {
        color: crate::color::stdout(),
    };
    // `LAB_DIR` may be the agent's word (`/v1/info`): shown escaped.
    eprintln!(
        "{} at {} with LAB_DIR={}",
        grading_what(lab),
        client.url(),
        lab_agent_proto::text::escape(guest_lab_dir)
    );
    let on_check = |c: &_| {
        if !json {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(report::check(c, style).as_bytes());
            let _ = out.flush();
        }
    };
    let report = match rule {
        Rule::Ready => client.grade_with(lab, guest_lab_dir, on_check).await,
        Rule::Unchecked => {
            client
                .grade_unchecked_with(lab, guest_lab_dir, on_check)
                .await
        }
    }
    .map_err(Failure::client)?;
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{}", report_json(&report, extra));
    } else {
        let _ = write!(out, "\n{}", report::summary(&report, style));
    }
    Ok(report)
}
