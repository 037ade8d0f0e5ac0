//! A self-test printed for a person: the table, each broken expectation
//! as a sentence with what the run that broke it said, the timings.

use super::{CheckOutcome, Problem, SelfTest, Verdict};
use crate::systemd;
use lab_agent_client::{CheckResult, CheckStatus};
use lab_agent_proto::text::escape;
use std::fmt::Write as _;

/// How many of a failing check's last stderr lines are shown (its full
/// output is in `--json`).
const STDERR_LINES: usize = 5;

impl SelfTest {
    /// The table (a row per check: after setup, after solve, reversed,
    /// verdict), a sentence per problem with what the failing run said
    /// (exit code, the end of its stderr, the hints `try` gives; `sandbox`:
    /// the sandbox's too), the timings and a summary line.
    pub fn render(&self, sandbox: bool) -> String {
        let cell = |r: Option<&CheckResult>| match r.map(|r| r.status) {
            Some(CheckStatus::Passed) => "pass",
            Some(CheckStatus::Failed) => "fail",
            Some(CheckStatus::Error) => "error",
            None => "-",
        };
        let names: Vec<String> = self
            .checks
            .iter()
            .map(|c| {
                let star = if c.initially == "pass" { " *" } else { "" };
                format!("{}{star}", escape(&c.name))
            })
            .collect();
        let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let width = width.max("check".len());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:width$}  after setup  after solve  reversed  verdict",
            "check"
        );
        for (c, name) in self.checks.iter().zip(&names) {
            let _ = writeln!(
                out,
                "{name:width$}  {:11}  {:11}  {:8}  {}",
                cell(Some(&c.after_setup)),
                cell(c.after_solve.as_ref()),
                cell(c.reversed.as_ref()),
                if c.problems.is_empty() {
                    "ok"
                } else {
                    "BROKEN"
                }
            );
        }
        if self.checks.iter().any(|c| c.initially == "pass") {
            out.push_str("* initially = \"pass\": must pass after setup too\n");
        }
        let mut problems = String::new();
        for c in &self.checks {
            for p in &c.problems {
                let _ = writeln!(problems, "check `{}` {}.", escape(&c.name), p.sentence());
                if let Some((phase, r)) = failing_run(c, p) {
                    explain(&mut problems, phase, r, sandbox);
                }
            }
        }
        if !problems.is_empty() {
            out.push('\n');
            out.push_str(&problems);
        }
        if let Some(f) = &self.solve_failed {
            let _ = writeln!(out, "\n{} {}: nothing was graded after it", f.what, f.how());
            if !f.log_tail.is_empty() {
                out.push_str("its output (end):\n");
                for line in f.log_tail.lines() {
                    let _ = writeln!(out, "  │ {}", escape(line));
                }
            }
        }
        let t = &self.timings;
        let secs = |ms: u64| format!("{}.{} s", ms / 1000, ms % 1000 / 100);
        let _ = writeln!(
            out,
            "\ntimings: setup {}, grade {}, solve {}, grade {}, reversed {}",
            secs(t.setup_ms),
            secs(t.after_setup_ms),
            secs(t.solve_ms),
            secs(t.after_solve_ms),
            secs(t.reversed_ms)
        );
        let broken = self
            .checks
            .iter()
            .filter(|c| !c.problems.is_empty())
            .count();
        let n = self.checks.len();
        let _ = match self.verdict() {
            Verdict::Holds => writeln!(
                out,
                "{}: all {n} check{} fail before the solve (or hold, as they say) and pass \
                 after it, in either order",
                self.lab,
                if n == 1 { "" } else { "s" }
            ),
            Verdict::SolveFailed => writeln!(out, "{}: the solve failed", self.lab),
            _ => writeln!(
                out,
                "{}: {broken} of {n} check{} break{} an expectation",
                self.lab,
                if n == 1 { "" } else { "s" },
                if broken == 1 { "s" } else { "" }
            ),
        };
        out
    }
}

/// The run of `c` that broke `p` by failing, and its phase: the check
/// failed where it had to pass.
fn failing_run<'a>(c: &'a CheckOutcome, p: &Problem) -> Option<(&'static str, &'a CheckResult)> {
    let failed = |r: &'a CheckResult| (r.status == CheckStatus::Failed).then_some(r);
    match p {
        Problem::FailsAfterSetup => failed(&c.after_setup).map(|r| ("after setup", r)),
        Problem::FailsAfterSolve => c
            .after_solve
            .as_ref()
            .and_then(failed)
            .map(|r| ("after the solve", r)),
        Problem::ChangesInReverse => {
            let solved = c
                .after_solve
                .as_ref()
                .and_then(failed)
                .map(|r| ("after the solve", r));
            solved.or_else(|| {
                c.reversed
                    .as_ref()
                    .and_then(failed)
                    .map(|r| ("in reverse order", r))
            })
        }
        Problem::PassesBeforeSolve | Problem::CouldNotRun { .. } => None,
    }
}

/// What a failed run said: how it ended, the end of its stderr (else of
/// its stdout), and the hints `labctl try` gives for it.
fn explain(out: &mut String, phase: &str, r: &CheckResult, sandbox: bool) {
    let how = match (r.timed_out, r.signal, r.exit_code) {
        (true, _, _) => "timed out and was killed".to_owned(),
        (_, Some(sig), _) => format!("was killed by signal {sig}"),
        (_, None, Some(code)) => format!("exit code {code}"),
        _ => "failed".to_owned(),
    };
    let _ = writeln!(out, "  {phase}: {how} ({} ms)", r.duration_ms);
    let (name, text) = match r.stderr.trim_end() {
        "" => ("stdout", r.stdout.trim_end()),
        stderr => ("stderr", stderr),
    };
    if !text.is_empty() {
        let lines: Vec<&str> = text.lines().collect();
        let _ = writeln!(out, "  {name} (end):");
        for line in &lines[lines.len().saturating_sub(STDERR_LINES)..] {
            let _ = writeln!(out, "    │ {}", escape(line));
        }
    }
    for hint in systemd::check_hints(r, sandbox) {
        let _ = writeln!(out, "  {hint}");
    }
}
