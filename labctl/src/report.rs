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
