//! JSON for other programs, as `labctl --json` prints it and a backend
//! logs it: a grade report in its fields' order (with a front end's own
//! members after), each VM's wait outcome, errors by kind. Guest text is
//! in it only as JSON escapes, C1 controls and DEL included (which JSON
//! itself allows raw).

use crate::{Error, GradeReport, WaitOutcome};
use serde::Serialize;
use serde_json::{Value, json};

/// A grade report as pretty JSON: its members in its fields' order (the
/// contract's, and the Python package's `to_json()`, which must equal it), then
/// `extra`'s (a struct's fields: `labctl try` adds its `changes`).
/// Serialized from the types, not through a [`Value`], whose objects sort
/// their keys.
pub fn report_json<X: Serialize>(report: &GradeReport, extra: Option<X>) -> String {
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

/// `{"ready":bool,"vms":[{"url","state","ready","error"}]}`: `state` is the
/// last state the agent reported (or null), `ready` its whole last
/// `/v1/ready` body (or null), `error` null or `{"kind","message"}`
/// ([`error_kind`]).
pub fn outcomes_json(outcomes: &[WaitOutcome]) -> Value {
    let vms: Vec<_> = outcomes.iter().map(outcome_json).collect();
    json!({"ready": outcomes.iter().all(|o| o.result.is_ok()), "vms": vms})
}

/// [`outcomes_json`] of a session's VMs, each entry with its `vm`.
pub fn session_outcomes_json(outcomes: &[(String, WaitOutcome)]) -> Value {
    let vms: Vec<_> = outcomes
        .iter()
        .map(|(vm, o)| {
            let mut v = outcome_json(o);
            v["vm"] = json!(vm);
            v
        })
        .collect();
    json!({"ready": outcomes.iter().all(|(_, o)| o.result.is_ok()), "vms": vms})
}

fn outcome_json(o: &WaitOutcome) -> Value {
    match &o.result {
        Ok(r) => json!({"url": o.url, "state": r.state, "ready": r, "error": null}),
        Err(e) => {
            let r = e.ready_response();
            json!({
                "url": o.url,
                "state": r.map(|r| r.state),
                "ready": r,
                "error": {"kind": error_kind(e), "message": e.to_string()},
            })
        }
    }
}

/// `v` as one line of JSON, guest text in it only as escapes.
pub fn json_text(v: &impl Serialize) -> String {
    let text = serde_json::to_string(v).expect("JSON values serialize");
    lab_agent_proto::text::json_escape_controls(&text).into_owned()
}

/// What kind of error `e` is, for a program: `setup_failed`,
/// `unauthorized`, `too_large`, `malformed_answer`, `protocol_error`,
/// `timeout`, `unreachable`, else `error`.
pub fn error_kind(e: &Error) -> &'static str {
    if e.is_setup_failed() {
        "setup_failed"
    } else if e.is_unauthorized() {
        "unauthorized"
    } else if e.is_too_large() {
        "too_large"
    } else if e.is_malformed() {
        "malformed_answer"
    } else if e.is_protocol_error() {
        "protocol_error"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_unreachable() {
        "unreachable"
    } else {
        "error"
    }
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
