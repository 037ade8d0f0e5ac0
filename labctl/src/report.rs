//! A grade report for people: one line per check with its mark and
//! points; for a failed check its `fail_message`, how it ended and the last
//! lines of its output; for an error (a check that could not run) why, and
//! never the student-facing `fail_message`.

use lab_agent_client::{CheckResult, CheckStatus, GradeReport};
use lab_agent_proto::text::escape;
use std::fmt::Write as _;

/// Lines of a failed check's stdout/stderr shown (the JSON has all of it).
const TAIL_LINES: usize = 10;

#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// The line(s) for one check.
pub fn check(c: &CheckResult, style: Style) -> String {
    let mut out = String::new();
    let mark = match c.status {
        CheckStatus::Passed => style.paint("32", "✓"),
        CheckStatus::Failed => style.paint("31", "✗"),
        CheckStatus::Error => style.paint("1;33", "!"),
    };
    let points = match c.status {
        CheckStatus::Passed => format!("{0}/{0} pt", c.points),
        _ => format!("0/{} pt", c.points),
    };
    let _ = writeln!(out, "  {mark} {} ({} ms, {points})", c.name, c.duration_ms);
    let pad = "      ";
    match c.status {
        CheckStatus::Passed => return out,
        CheckStatus::Error => {
            // The agent's words may be in it: escaped.
            let why = escape(c.error.as_deref().unwrap_or("it could not run"));
            let _ = writeln!(
                out,
                "{pad}{} {why}",
                style.paint(
                    "1;33",
                    "error: the check could not run (a lab or platform problem, not the student's):"
                )
            );
            if let Some(hint) = &c.hint {
                let _ = writeln!(out, "{pad}hint: {}", escape(hint));
            }
            return out;
        }
        CheckStatus::Failed => {}
    }
    if let Some(m) = &c.fail_message {
        for line in m.trim_end().lines() {
            let _ = writeln!(out, "{pad}{}", style.paint("1", line));
        }
    }
    let status = match (c.timed_out, c.exit_code, c.signal) {
        (true, ..) => "timed out and was killed".to_owned(),
        (false, Some(code), _) => format!("exit code {code}"),
        (false, None, Some(sig)) => format!("killed by signal {sig}"),
        (false, None, None) => "no exit code".to_owned(),
    };
    let _ = writeln!(out, "{pad}{}", style.paint("2", &status));
    // A runaway's failure says so: the limit and its value, so nobody reads
    // "fork: Resource temporarily unavailable" as the student's mistake.
    if let Some(limits) = c.limits_text() {
        let line = format!("the check {limits}: it was stopped by the agent's limit");
        let _ = writeln!(out, "{pad}{}", style.paint("1;33", &line));
    }
    for (name, text, cut) in [
        ("stdout", &c.stdout, c.stdout_truncated),
        ("stderr", &c.stderr, c.stderr_truncated),
    ] {
        let text = text.trim_end();
        if text.is_empty() {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        // Output past `max_output_bytes` was dropped: what is kept is its
        // beginning, so show the lines where it was cut, and say so.
        let (heading, shown) = match (cut, lines.len() > TAIL_LINES) {
            (true, true) => (
                format!(
                    "{name} (cut at the check's `max_output_bytes`; the last {TAIL_LINES} lines kept, not the end):"
                ),
                &lines[lines.len() - TAIL_LINES..],
            ),
            (true, false) => (
                format!("{name} (cut at the check's `max_output_bytes`; the rest was dropped):"),
                &lines[..],
            ),
            (false, true) => (
                format!("{name} (last {TAIL_LINES} lines):"),
                &lines[lines.len() - TAIL_LINES..],
            ),
            (false, false) => (format!("{name}:"), &lines[..]),
        };
        let _ = writeln!(out, "{pad}{heading}");
        // The guest's bytes, each line with its control characters shown
        // (a `\r` or an escape sequence could forge the report's lines).
        for l in shown {
            let _ = writeln!(out, "{pad}  │ {}", escape(l));
        }
    }
    out
}

/// The closing line(s): "2 of 3 checks passed, score 5/6", and a line for
/// errors.
pub fn summary(r: &GradeReport, style: Style) -> String {
    let score = format!("score {}/{}", r.score, r.max_score);
    let text = match (r.total, r.passed) {
        (0, _) => format!("{}: no checks to run", r.lab),
        (1, 1) => format!("{}: the check passed, {score}", r.lab),
        (t, p) if p == t => format!("{}: all {t} checks passed, {score}", r.lab),
        (t, p) => format!(
            "{}: {p} of {t} check{} passed, {score}",
            r.lab,
            if t == 1 { "" } else { "s" }
        ),
    };
    let code = if r.all_passed() { "1;32" } else { "1;31" };
    let mut out = format!("{}\n", style.paint(code, &text));
    if r.errors > 0 {
        let line = format!(
            "{} of them could not run: fix the lab (or the VM), then grade again",
            r.errors
        );
        let _ = writeln!(out, "{}", style.paint("1;33", &line));
    }
    out
}

/// The whole report, as `labctl grade` prints it after the fact.
pub fn render(r: &GradeReport, style: Style) -> String {
    let mut out: String = r.checks.iter().map(|c| check(c, style)).collect();
    out.push('\n');
    out.push_str(&summary(r, style));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str, status: CheckStatus) -> CheckResult {
        let passed = status == CheckStatus::Passed;
        CheckResult {
            status,
            passed,
            exit_code: Some(if passed { 0 } else { 1 }),
            duration_ms: 4,
            error: None,
            ..CheckResult::error(name, 1, "")
        }
    }

    fn report(checks: Vec<CheckResult>) -> GradeReport {
        let count = |s| checks.iter().filter(|c| c.status == s).count();
        GradeReport {
            lab: "hello-lab".into(),
            passed: count(CheckStatus::Passed),
            failed: count(CheckStatus::Failed),
            errors: count(CheckStatus::Error),
            total: checks.len(),
            score: count(CheckStatus::Passed) as u64,
            max_score: checks.len() as u64,
            instance: None,
            instances: Default::default(),
            checks,
        }
    }

    #[test]
    fn renders_passes_and_failures() {
        let mut bad = result("hello runs", CheckStatus::Failed);
        bad.exit_code = Some(126);
        bad.fail_message = Some("Make it executable.".into());
        bad.stderr = (1..=12).map(|i| format!("line {i}\n")).collect();
        let text = render(
            &report(vec![result("user exists", CheckStatus::Passed), bad]),
            Style { color: false },
        );
        let want = "  ✓ user exists (4 ms, 1/1 pt)
  ✗ hello runs (4 ms, 0/1 pt)
      Make it executable.
      exit code 126
      stderr (last 10 lines):
        │ line 3
        │ line 4
        │ line 5
        │ line 6
        │ line 7
        │ line 8
        │ line 9
        │ line 10
        │ line 11
        │ line 12

hello-lab: 1 of 2 checks passed, score 1/2
";
        assert_eq!(text, want);
    }

    #[test]
    fn cut_output_says_so() {
        let mut c = result("floods", CheckStatus::Failed);
        c.stdout = "y\n".repeat(20);
        c.stdout_truncated = true;
        let text = check(&c, Style { color: false });
        assert!(
            text.contains("stdout (cut at the check's `max_output_bytes`; the last 10 lines kept, not the end):"),
            "{text}"
        );
        c.stdout = "y\n".into();
        let text = check(&c, Style { color: false });
        assert!(text.contains("the rest was dropped"), "{text}");
    }

    #[test]
    fn an_error_is_not_the_students_failure() {
        let mut c = result("x", CheckStatus::Error);
        c.exit_code = None;
        c.fail_message = Some("Create the file first.".into());
        c.error =
            Some("the agent refused the check (400 Bad Request): unknown user `nobody2`".into());
        let text = check(&c, Style { color: false });
        assert!(text.starts_with("  ! x ("), "{text}");
        assert!(text.contains("could not run"), "{text}");
        assert!(text.contains("unknown user `nobody2`"), "{text}");
        assert!(!text.contains("Create the file first."), "{text}");
        let mut t = result("t", CheckStatus::Failed);
        t.timed_out = true;
        assert!(check(&t, Style { color: false }).contains("timed out"));
    }

    #[test]
    fn a_limit_hit_is_named_with_its_value() {
        let mut c = result("bomb", CheckStatus::Failed);
        c.exit_code = Some(254);
        c.limits_hit = vec!["pids".into(), "memory".into()];
        c.max_pids = Some(4096);
        c.max_memory_bytes = Some(512 << 20);
        let text = check(&c, Style { color: false });
        assert!(text.contains("exit code 254"), "{text}");
        assert!(
            text.contains("the check hit its process limit (pids.max 4096) and its memory limit (memory.max 512 MiB)"),
            "{text}"
        );
        assert!(
            !check(&result("ok", CheckStatus::Failed), Style { color: false }).contains("limit")
        );
    }

    #[test]
    fn summaries() {
        let one = report(vec![result("a", CheckStatus::Passed)]);
        assert_eq!(
            summary(&one, Style { color: false }),
            "hello-lab: the check passed, score 1/1\n"
        );
        let two = report(vec![
            result("a", CheckStatus::Passed),
            result("b", CheckStatus::Passed),
        ]);
        assert_eq!(
            summary(&two, Style { color: false }),
            "hello-lab: all 2 checks passed, score 2/2\n"
        );
        let err = report(vec![result("a", CheckStatus::Error)]);
        assert_eq!(
            summary(&err, Style { color: false }),
            "hello-lab: 0 of 1 check passed, score 0/1\n\
             1 of them could not run: fix the lab (or the VM), then grade again\n"
        );
    }
}
