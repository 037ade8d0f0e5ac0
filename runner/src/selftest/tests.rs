//! The self-test's rules and its report, without an agent.

use super::*;

fn lab() -> Lab {
    Lab::parse(
        "name = \"t\"\n\
         [[checks]]\nname = \"a\"\nrun = \"true\"\n\
         [[checks]]\nname = \"b\"\nrun = \"true\"\ninitially = \"pass\"\n",
        "/l",
    )
    .unwrap()
}

fn result(name: &str, status: CheckStatus) -> CheckResult {
    let mut r = CheckResult::error(name, 1, "no such user `x`");
    r.status = status;
    r.passed = status == CheckStatus::Passed;
    if status != CheckStatus::Error {
        r.error = None;
        r.exit_code = Some(if r.passed { 0 } else { 1 });
    }
    r
}

use CheckStatus::{Error as E, Failed as F, Passed as P};

fn judged(check: usize, phases: (CheckStatus, CheckStatus, CheckStatus)) -> Vec<Problem> {
    let lab = lab();
    let c = &lab.checks[check];
    let r = |s| result(&c.name, s);
    judge(c, &r(phases.0), Some(&r(phases.1)), Some(&r(phases.2)))
}

#[test]
fn a_check_must_fail_before_and_pass_after_in_either_order() {
    assert_eq!(judged(0, (F, P, P)), []);
    assert_eq!(judged(0, (P, P, P)), [Problem::PassesBeforeSolve]);
    assert_eq!(
        judged(0, (F, F, F)),
        [Problem::FailsAfterSolve],
        "failing in both orders is not an order problem"
    );
    assert_eq!(judged(0, (F, P, F)), [Problem::ChangesInReverse]);
    assert_eq!(
        judged(0, (F, F, P)),
        [Problem::FailsAfterSolve, Problem::ChangesInReverse]
    );
}

#[test]
fn initially_pass_must_pass_after_setup() {
    assert_eq!(judged(1, (P, P, P)), []);
    assert_eq!(judged(1, (F, P, P)), [Problem::FailsAfterSetup]);
}

#[test]
fn an_error_is_named_with_its_phase_and_nothing_else_is_read_into_it() {
    let problems = judged(0, (E, P, P));
    assert_eq!(
        problems,
        [Problem::CouldNotRun {
            phase: "after setup",
            error: "no such user `x`".into()
        }]
    );
    assert!(problems[0].sentence().contains("could not run after setup"));
    assert_eq!(judged(0, (F, E, E)).len(), 2);
}

#[test]
fn after_a_failed_solve_only_the_first_grade_is_judged() {
    let lab = lab();
    let c = &lab.checks[0];
    assert_eq!(judge(c, &result("a", F), None, None), []);
    assert_eq!(
        judge(c, &result("a", P), None, None),
        [Problem::PassesBeforeSolve]
    );
}

fn report(statuses: &[CheckStatus]) -> GradeReport {
    let checks: Vec<serde_json::Value> = statuses
        .iter()
        .zip(["a", "b"])
        .map(|(s, n)| serde_json::to_value(result(n, *s)).unwrap())
        .collect();
    serde_json::from_value(serde_json::json!({
        "lab": "t", "passed": 0, "failed": 0, "errors": 0, "total": 2,
        "score": 0, "max_score": 2, "checks": checks
    }))
    .unwrap()
}

#[test]
fn verdicts_and_what_is_printed() {
    let holds = assemble(
        &lab(),
        report(&[F, P]),
        Some(report(&[P, P])),
        Some(report(&[P, P])),
        None,
        Timings {
            setup_ms: 1234,
            ..Timings::default()
        },
    );
    assert_eq!(holds.verdict(), Verdict::Holds);
    assert!(holds.ok);
    let text = holds.render(true);
    assert!(text.contains("b *"), "{text}");
    assert!(text.contains("timings: setup 1.2 s,"), "{text}");
    assert!(
        text.contains("t: all 2 checks fail before the solve"),
        "{text}"
    );

    let broken = assemble(
        &lab(),
        report(&[P, P]),
        Some(report(&[P, F])),
        Some(report(&[P, P])),
        None,
        Timings::default(),
    );
    assert_eq!(broken.verdict(), Verdict::Broken);
    let text = broken.render(true);
    assert!(
        text.contains(
            "check `a` passes before the solve: a student who did nothing gets its points"
        ),
        "{text}"
    );
    assert!(text.contains("check `b` fails after the solve"), "{text}");
    assert!(
        text.contains("check `b` changes verdict when run in reverse"),
        "{text}"
    );
    assert!(
        text.contains("t: 2 of 2 checks break an expectation"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&broken.json()).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["checks"][0]["problems"][0]["kind"], "passes_before_solve");
    assert_eq!(v["checks"][1]["after_solve"]["status"], "failed");
    assert_eq!(v["checks"][1]["initially"], "pass");
    assert!(v["timings_ms"]["reversed_ms"].is_u64(), "{v}");

    let failed = SolveFailure {
        what: "the solve script `solve.sh`".into(),
        exit_code: Some(3),
        signal: None,
        timed_out: false,
        error: None,
        log_tail: "fixing\nfatal: nope\n".into(),
    };
    let solve_failed = assemble(
        &lab(),
        report(&[F, P]),
        None,
        None,
        Some(failed.clone()),
        Timings::default(),
    );
    assert_eq!(solve_failed.verdict(), Verdict::SolveFailed);
    let text = solve_failed.render(true);
    assert!(
        text.contains("the solve script `solve.sh` failed (exit 3): nothing was graded")
            && text.contains("  │ fatal: nope"),
        "{text}"
    );
    let refused = SolveFailure {
        error: Some("unknown user".into()),
        ..failed
    };
    let lab_error = assemble(
        &lab(),
        report(&[F, P]),
        None,
        None,
        Some(refused),
        Timings::default(),
    );
    assert_eq!(lab_error.verdict(), Verdict::LabError);
    let errors = assemble(
        &lab(),
        report(&[E, P]),
        Some(report(&[P, P])),
        Some(report(&[P, P])),
        None,
        Timings::default(),
    );
    assert_eq!(errors.verdict(), Verdict::LabError);
}

#[test]
fn a_tail_starts_on_a_character() {
    assert_eq!(tail("héllo", 4), "llo");
    assert_eq!(tail("abc", 10), "abc");
}

/// A check broken after the solve says how it ended, the end of its
/// stderr and the hints: a command the guest lacks (exit 127) is named.
#[test]
fn a_broken_check_shows_its_exit_code_stderr_and_hints() {
    let mut solved = report(&[P, P]);
    let b = &mut solved.checks[1];
    (b.status, b.passed, b.exit_code) = (F, false, Some(127));
    b.stderr = "one\ntwo\nthree\nfour\nfive\nbash: line 1: curl: command not found\n".into();
    let test = assemble(
        &lab(),
        report(&[F, P]),
        Some(solved.clone()),
        Some(solved),
        None,
        Timings::default(),
    );
    let text = test.render(false);
    for want in [
        "check `b` fails after the solve",
        "  after the solve: exit code 127 (",
        "  stderr (end):\n    │ two\n",
        "    │ bash: line 1: curl: command not found\n",
        "  hint: a command of this check is missing in the guest (`curl`?)",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
    assert!(!text.contains("│ one"), "only the end: {text}");
}
