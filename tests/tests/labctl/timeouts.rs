//! Flags counting seconds: at most a day, refused past it with a usage
//! error that names the flag and the range, never a panic.

use super::*;

/// Regression: `u64::MAX` seconds reached `Instant::now() + …` or the
/// client's `Duration` sum and panicked ("overflow when adding …").
#[test]
fn seconds_past_a_day_are_a_usage_error() {
    let agent = Agent::start(AgentOptions::default());
    let lab = lab_folder("labctl-timeouts", "name = \"timeouts\"\n");
    let lab_path = lab.path.display().to_string();
    let huge = u64::MAX.to_string();
    let day_and_a_second = (24 * 60 * 60 + 1).to_string();
    for value in [&huge, &day_and_a_second] {
        for (verb, flag, min) in [
            ("exec", "--answer-timeout", 1),
            ("wait", "--timeout", 1),
            ("grade", "--timeout", 1),
            ("grade", "--wait", 0),
            ("try", "--timeout", 1),
        ] {
            let mut args = vec![verb.to_owned()];
            if matches!(verb, "grade" | "try") {
                args.push(lab_path.clone());
            }
            if verb != "try" {
                args.extend(conn(&agent));
            }
            args.extend([flag.to_owned(), value.clone()]);
            if verb == "exec" {
                args.extend(["--".to_owned(), "true".to_owned()]);
            }
            let out = labctl(&args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
            assert!(!err.contains("panicked"), "{args:?}: {err}");
            let says = format!(
                "error: `{flag} {value}` is out of range: use {min} to 86400 seconds (a day)"
            );
            assert!(err.contains(&says), "{args:?}: {err}");
        }
    }
}

/// A day itself is taken: the bound is inclusive.
#[test]
fn a_day_is_allowed() {
    let agent = Agent::start(AgentOptions::default());
    let day = (24 * 60 * 60).to_string();
    let mut args = vec!["wait".to_owned()];
    args.extend(conn(&agent));
    args.extend(["--timeout".to_owned(), day.clone()]);
    let out = labctl(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let mut args = vec!["exec".to_owned()];
    args.extend(conn(&agent));
    args.extend(["--answer-timeout", &day, "--", "echo", "answered"].map(String::from));
    let out = labctl(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout(&out), "answered\n");
}
