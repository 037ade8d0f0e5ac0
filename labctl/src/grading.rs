//! Grading one VM and printing its report as each check finishes (or, with
//! `--json`, the whole report at the end), and the exit status a report
//! means. `labctl grade` and `labctl try` share it.

use super::exit::{Exit, Failure};
use super::report::{self, Style};
use lab_agent_client::{Client, GradeReport};
use lab_agent_proto::lab::Lab;
use serde::Serialize;
use std::io::Write;

/// `--check NAME`: keeps only the named checks ([`Lab::select_checks`]);
/// an unknown name is a usage error listing the names.
pub fn select_checks(lab: &mut Lab, names: &[String]) -> Result<(), Failure> {
    lab.select_checks(names)
        .map_err(|e| Failure::usage(e.to_string()))
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

/// Grades a VM that is ready (the library's rule: one that is not is
/// refused with nothing run), printing each check to stdout as it finishes
/// (or, with `json`, the whole report at the end).
pub async fn grade_and_print(
    client: &Client,
    lab: &Lab,
    guest_lab_dir: &str,
    json: bool,
) -> Result<GradeReport, Failure> {
    grade_and_print_with(client, lab, guest_lab_dir, json, Rule::Ready, None::<()>).await
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

/// [`grade_and_print`] under `rule`, with `extra`'s members (a struct's
/// fields) after the report's in the JSON object: `try` adds its `changes`.
pub async fn grade_and_print_with<X: Serialize>(
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
        "grading `{}` ({} check{}) at {} with LAB_DIR={}",
        lab.name,
        lab.checks.len(),
        if lab.checks.len() == 1 { "" } else { "s" },
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

/// `--json`'s text: the report's members in its fields' order (SPEC's, and
/// the Python package's `to_json()`, which must equal it), then `extra`'s.
/// Serialized from the types, not through a `serde_json::Value`, whose
/// objects sort their keys.
pub(crate) fn report_json<X: Serialize>(report: &GradeReport, extra: Option<X>) -> String {
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

    #[test]
    fn grade_json_carries_the_instance_before_the_checks() {
        let mut r = report();
        r.instance = Some(lab_agent_proto::lifecycle::Instance {
            id: "0123456789abcdef0123456789abcdef".into(),
            boots: 2,
            boot_id: "b".into(),
            first_boot_at: "2026-12-03T10:00:00Z".into(),
        });
        let text = report_json(&r, None::<()>);
        assert_in_order(&text, 2, &["max_score", "instance", "checks"]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["instance"]["id"], "0123456789abcdef0123456789abcdef");
        assert_eq!(v["instance"]["boots"], 2);
    }
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
