//! A grade report for people: one line per check, and for a failed one its
//! `fail_message`, exit status and the last lines of its output.

use lab_agent_client::{CheckResult, GradeReport};
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
    let mark = if c.passed {
        style.paint("32", "✓")
    } else {
        style.paint("31", "✗")
    };
    let _ = writeln!(out, "  {mark} {} ({} ms)", c.name, c.duration_ms);
    if c.passed {
        return out;
    }
    let pad = "      ";
    if let Some(m) = &c.fail_message {
        for line in m.trim_end().lines() {
            let _ = writeln!(out, "{pad}{}", style.paint("1", line));
        }
    }
    let status = match (&c.not_started, c.timed_out, c.exit_code, c.signal) {
        (Some(why), ..) => format!("not started: {why}"),
        (None, true, ..) => "timed out and was killed".to_owned(),
        (None, false, Some(code), _) => format!("exit code {code}"),
        (None, false, None, Some(sig)) => format!("killed by signal {sig}"),
        (None, false, None, None) => "no exit code".to_owned(),
    };
    let _ = writeln!(out, "{pad}{}", style.paint("2", &status));
    if c.not_started.is_none() {
        for (name, text) in [("stdout", &c.stdout), ("stderr", &c.stderr)] {
            let text = text.trim_end();
            if text.is_empty() {
                continue;
            }
            let lines: Vec<&str> = text.lines().collect();
            let skipped = lines.len().saturating_sub(TAIL_LINES);
            let _ = writeln!(
                out,
                "{pad}{name}{}:",
                if skipped > 0 {
                    format!(" (last {TAIL_LINES} lines)")
                } else {
                    String::new()
                }
            );
            for l in &lines[skipped..] {
                let _ = writeln!(out, "{pad}  │ {l}");
            }
        }
    }
    out
}

/// The closing line: "3 of 4 checks passed".
pub fn summary(r: &GradeReport, style: Style) -> String {
    let text = if r.total == 0 {
        format!("{}: no checks to run", r.lab)
    } else if r.all_passed() {
        format!("{}: all {} checks passed", r.lab, r.total)
    } else {
        format!("{}: {} of {} checks passed", r.lab, r.passed, r.total)
    };
    let code = if r.all_passed() { "1;32" } else { "1;31" };
    format!("{}\n", style.paint(code, &text))
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

    fn result(name: &str, passed: bool) -> CheckResult {
        CheckResult {
            name: name.into(),
            passed,
            exit_code: Some(if passed { 0 } else { 1 }),
            stdout: String::new(),
            stderr: String::new(),
            duration_ms: 4,
            fail_message: None,
            signal: None,
            timed_out: false,
            not_started: None,
        }
    }

    #[test]
    fn renders_passes_and_failures() {
        let mut bad = result("hello runs", false);
        bad.exit_code = Some(126);
        bad.fail_message = Some("Make it executable.".into());
        bad.stderr = (1..=12).map(|i| format!("line {i}\n")).collect();
        let report = GradeReport {
            lab: "hello-lab".into(),
            passed: 1,
            total: 2,
            checks: vec![result("user exists", true), bad],
        };
        let text = render(&report, Style { color: false });
        let want = "  ✓ user exists (4 ms)
  ✗ hello runs (4 ms)
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

hello-lab: 1 of 2 checks passed
";
        assert_eq!(text, want);
    }

    #[test]
    fn not_started_and_timed_out() {
        let mut c = result("x", false);
        c.exit_code = None;
        c.not_started = Some("unknown user `nobody2`".into());
        c.stderr = "the agent could not start the check: unknown user `nobody2`\n".into();
        let text = check(&c, Style { color: false });
        assert!(
            text.contains("not started: unknown user `nobody2`"),
            "{text}"
        );
        assert!(!text.contains("stderr"), "{text}");
        c.not_started = None;
        c.timed_out = true;
        assert!(check(&c, Style { color: false }).contains("timed out"));
    }
}
