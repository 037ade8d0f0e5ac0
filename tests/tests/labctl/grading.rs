//! The lab author's side of grading: statuses, selection, readiness,
//! output limits, points.

use super::*;
use std::time::{Duration, Instant};

fn lab(toml: &str) -> TempDir {
    lab_folder("labctl-author", toml)
}

fn grade(agent: &Agent, lab: &TempDir, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
    args.extend(conn(agent));
    // Agents start with a setup still running: grade once ready.
    args.extend(["--wait".to_owned(), "30".to_owned()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    labctl(args)
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(out)))
}

/// A check with an unknown user is the author's mistake: `error`, exit
/// 5 (over the other check's failure), and the student-facing message
/// is never shown for it.
#[test]
fn an_unknown_user_is_an_error_not_a_failure() {
    let agent = Agent::start(AgentOptions::default());
    let lab = lab(r#"
name = "typo"
[[checks]]
name = "typo in user"
run = "true"
user = "no-such-user-xq"
fail_message = "Student: do the step."
[[checks]]
name = "student not done"
run = "exit 1"
fail_message = "Finish the lab."
"#);
    let out = grade(&agent, &lab, &["--json"]);
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    let v = json(&out);
    let c = &v["checks"][0];
    assert_eq!(c["status"], "error", "{c}");
    assert_eq!(c["passed"], false);
    assert_eq!(c["fail_message"], Value::Null, "{c}");
    assert!(
        c["error"].as_str().unwrap().contains("no-such-user-xq"),
        "{c}"
    );
    assert_eq!(v["checks"][1]["status"], "failed");
    assert_eq!(
        (v["errors"].as_u64(), v["failed"].as_u64()),
        (Some(1), Some(1))
    );

    let out = grade(&agent, &lab, &[]);
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.starts_with("  ! typo in user ("), "{text}");
    assert!(text.contains("could not run"), "{text}");
    assert!(!text.contains("Student: do the step."), "{text}");
    assert!(text.contains("Finish the lab."), "{text}");
    assert!(text.contains("1 of them could not run"), "{text}");
}

/// A setup that runs until the test creates `go`: no stray process
/// is left behind when the test ends.
fn setup_until(go: &Path) -> String {
    format!(
        "for i in $(seq 600); do [ -e '{}' ] && exit 0; sleep 0.1; done; exit 1\n",
        go.display()
    )
}

#[test]
fn a_vm_still_setting_up_is_not_graded_unless_wait() {
    let dir = TempDir::new("labctl-notready");
    let (go, ran) = (dir.join("go"), dir.join("ran"));
    let agent = Agent::start(AgentOptions::default().setup(&setup_until(&go)));
    let lab = lab(&format!(
        "name = \"early\"\n[[checks]]\nname = \"marks\"\nrun = \"touch '{}'\"\n",
        ran.display()
    ));
    let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
    args.extend(conn(&agent));
    let out = labctl(args);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("is not ready, so it was not graded"), "{err}");
    assert!(err.contains("`setting_up`"), "names the state: {err}");
    assert!(err.contains("--wait SECS"), "{err}");
    assert!(!ran.exists(), "no check ran");

    // `--wait` waits it out: the setup ends once labctl reports waiting.
    let mut args = vec!["grade".to_owned(), lab.path.display().to_string()];
    args.extend(conn(&agent));
    args.extend(["--wait".into(), "60".into()]);
    let mut labctl = Watched::spawn(&args);
    labctl.until("setting_up");
    assert!(!ran.exists(), "nothing ran during setup: {}", labctl.err);
    std::fs::write(&go, "").unwrap();
    let (out, err) = labctl.finish();
    assert_eq!(out.status.code(), Some(0), "{}\n{err}", describe(&out));
    assert!(ran.exists(), "the check ran once ready: {err}");
}

#[test]
fn cut_output_and_timeouts_are_reported() {
    let agent = Agent::start(AgentOptions::default());
    let lab = lab(r#"
name = "floods"
[[checks]]
name = "floods"
run = "yes | head -c 200000; exit 1"
max_output_bytes = 1000
[[checks]]
name = "hangs"
run = "sleep 30"
timeout_secs = 1
"#);
    let out = grade(&agent, &lab, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v = json(&out);
    let (flood, hang) = (&v["checks"][0], &v["checks"][1]);
    assert_eq!(flood["stdout_truncated"], true, "{flood}");
    assert_eq!(flood["stderr_truncated"], false);
    assert!(flood["stdout"].as_str().unwrap().len() <= 1000);
    assert_eq!(hang["timed_out"], true, "{hang}");
    assert_eq!(hang["status"], "failed");
    assert_eq!(hang["exit_code"], Value::Null);

    let out = grade(&agent, &lab, &["--check", "floods"]);
    let text = stdout(&out);
    assert!(
        text.contains("stdout (cut at the check's `max_output_bytes`"),
        "{}",
        describe(&out)
    );
    assert!(!text.contains("(last 10 lines)"), "{text}");
}

#[test]
fn points_score_and_check_selection() {
    let agent = Agent::start(AgentOptions::default());
    let lab = lab(r#"
name = "scored"
[[checks]]
name = "two"
run = "true"
points = 2
[[checks]]
name = "three"
run = "false"
points = 3
[[checks]]
name = "free"
run = "true"
points = 0
[[checks]]
name = "one"
run = "true"
"#);
    let out = grade(&agent, &lab, &["--json"]);
    let v = json(&out);
    assert_eq!(
        (v["score"].as_u64(), v["max_score"].as_u64()),
        (Some(3), Some(6)),
        "{v}"
    );
    assert_eq!(v["checks"][1]["points"], 3);

    let out = grade(
        &agent,
        &lab,
        &["--json", "--check", "one", "--check", "two"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(
        check_outcomes(&v),
        [("two", true), ("one", true)],
        "the lab's order"
    );
    assert_eq!(
        (v["total"].as_u64(), v["score"].as_u64()),
        (Some(2), Some(3))
    );

    let out = grade(&agent, &lab, &["--check", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("no check named `nope`"), "{err}");
    assert!(
        err.contains("`two`, `three`, `free`, `one`"),
        "lists the names: {err}"
    );
}

/// No answer in time is an error of the platform, not a failure, and
/// the hint names the flag that gives the agent longer.
#[test]
fn an_answer_that_never_comes_is_an_error_with_the_timeout_hint() {
    let agent = Agent::start(AgentOptions::default());
    // SIGTERM ignored: the agent answers only after its kill grace,
    // later than `--timeout 1` allows. No startup files (`profile =
    // "none"`): a login shell's can take over the check's 1 s on a busy
    // machine (root's `pyenv init` here), and a TERM that comes before the
    // trap ends the check at once, as a plain failure.
    let lab = lab(
        "name = \"slow\"\n[[checks]]\nname = \"stubborn\"\nrun = \"trap '' TERM; sleep 30\"\ntimeout_secs = 1\nprofile = \"none\"\n",
    );
    let out = grade(&agent, &lab, &["--timeout", "1"]);
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.contains("could not run"), "{text}");
    assert!(text.contains("`labctl grade --timeout SECS`"), "{text}");
}

/// Against an agent started with `--lab-dir`, `grade` uses that
/// folder without being told: the agent reports it in `/v1/info`.
#[test]
fn lab_dir_comes_from_the_agent() {
    let files = TempDir::new("labctl-labdir");
    files.write("greeting", "hello\n", 0o644);
    let agent = Agent::start(AgentOptions {
        lab_dir: Some(files.path.clone()),
        ..AgentOptions::default()
    });
    let lab = lab(
        "name = \"d\"\n[[checks]]\nname = \"sees it\"\nrun = 'grep -q hello \"$LAB_DIR/greeting\"'\n",
    );
    let out = grade(&agent, &lab, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        stderr(&out).contains(&format!("LAB_DIR={}", files.path.display())),
        "{}",
        describe(&out)
    );
}

/// Two VMs, one ready at once: each summary line has its own time.
#[test]
fn wait_times_are_per_vm() {
    let dir = TempDir::new("labctl-pervm");
    let go = dir.join("go");
    let fast = Agent::start(AgentOptions::default());
    let slow = Agent::start(AgentOptions::default().setup(&setup_until(&go)));
    let mut labctl = Watched::spawn([
        "wait",
        "--url",
        &fast.url(),
        "--url",
        &slow.url(),
        "--token-file",
        fast.token_file.to_str().unwrap(),
        "--token-file",
        slow.token_file.to_str().unwrap(),
    ]);
    let started = Instant::now();
    labctl.until("setting_up");
    // The slow VM's setup must take a while, so that one shared clock
    // for both summaries would be visibly wrong for the fast one.
    std::thread::sleep(Duration::from_secs(5).saturating_sub(started.elapsed()));
    std::fs::write(&go, "").unwrap();
    let (out, err) = labctl.finish();
    assert!(out.status.success(), "{}\n{err}", describe(&out));
    let secs = |url: &str| -> f64 {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("{url}: ready after ")))
            .unwrap_or_else(|| panic!("no summary for {url}: {err}"));
        line.rsplit(' ')
            .next()
            .unwrap()
            .trim_end_matches('s')
            .parse()
            .unwrap()
    };
    // labctl started before `started`, so the slow one took at least 5 s on
    // its clock; the fast one was ready long before (seconds of margin for
    // a loaded machine: a root login shell alone takes ~1 s here).
    let (fast, slow) = (secs(&fast.url()), secs(&slow.url()));
    assert!(slow >= 5.0, "{err}");
    assert!(fast + 2.0 < slow, "one clock for both? {err}");
}
