//! `labctl test` as an author meets it: hello-lab holds; labs that break
//! each expectation are named with the exit status that says so; and after
//! every run the machine is as it was (the sandbox took setup, solve and
//! the checks' leftovers with it).
//!
//! The labs here say `profile = "none"`: what they test is `labctl test`,
//! not this machine's dotfiles (root's `.bashrc` runs `pyenv rehash`,
//! whose lock file can stall a sandboxed login shell: see `HOST_SHELLS`).

use super::*;

/// What a self-test lab may touch on the machine: each path's contents
/// (`None`: absent), `/etc/passwd` among them.
struct Machine {
    paths: Vec<(PathBuf, Option<Vec<u8>>)>,
}

impl Machine {
    /// Records `paths` and `/etc/passwd` as they are now.
    fn before(paths: &[&str]) -> Machine {
        let paths = paths
            .iter()
            .chain(&["/etc/passwd"])
            .map(|p| (PathBuf::from(p), std::fs::read(p).ok()))
            .collect();
        Machine { paths }
    }

    /// [`Machine::before`], for paths only the test's lab writes: none of
    /// them may exist now.
    fn before_absent(paths: &[&str]) -> Machine {
        for p in paths {
            assert!(!Path::new(p).exists(), "a leftover of an earlier run: {p}");
        }
        Machine::before(paths)
    }

    fn unchanged_after(&self, out: &std::process::Output) {
        for (p, was) in &self.paths {
            assert!(
                &std::fs::read(p).ok() == was,
                "{} changed on the machine",
                p.display()
            );
        }
        let dir = staged_dir(&stderr(out));
        assert!(!dir.exists(), "try dir {} left", dir.display());
        assert!(
            processes_with(&dir.display().to_string()).is_empty(),
            "a process of the run outlived it"
        );
    }
}

fn test_lab(lab: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = try_args(lab, extra);
    args[0] = "test".into();
    labctl(args)
}

/// The problems `--json` names, as (check, kind).
fn problems(v: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in v["checks"].as_array().unwrap() {
        for p in c["problems"].as_array().unwrap() {
            out.push((
                c["name"].as_str().unwrap().to_owned(),
                p["kind"].as_str().unwrap().to_owned(),
            ));
        }
    }
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn hello_lab_holds() {
    let _shells = sandboxed();
    require_root("`labctl test` without `--vm`");
    let machine = Machine::before(&["/etc/profile.d/hello-lab-banner.sh"]);
    let lab = repo_root().join("examples/hello-lab");
    let out = test_lab(&lab, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(
        (v["lab"].as_str(), v["ok"].as_bool()),
        (Some("hello-lab"), Some(true))
    );
    assert_eq!(problems(&v), []);
    let last = &v["checks"][3];
    assert_eq!(
        (
            last["name"].as_str(),
            last["initially"].as_str(),
            last["after_setup"]["status"].as_str(),
            last["after_solve"]["status"].as_str(),
            last["reversed"]["status"].as_str()
        ),
        (
            Some("hello.sh runs"),
            Some("fail"),
            Some("failed"),
            Some("passed"),
            Some("passed")
        )
    );
    for phase in [
        "setup_ms",
        "after_setup_ms",
        "solve_ms",
        "after_solve_ms",
        "reversed_ms",
    ] {
        assert!(v["timings_ms"][phase].is_u64(), "{phase}: {v}");
    }
    machine.unchanged_after(&out);

    let out = test_lab(&lab, &["--check", "hello.sh runs"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = stdout(&out);
    assert!(
        text.contains("hello.sh runs  fail         pass         pass      ok"),
        "{text}"
    );
    assert!(text.contains("\ntimings: setup "), "{text}");
    assert!(
        text.contains("hello-lab: all 1 check fail before the solve"),
        "{text}"
    );
    machine.unchanged_after(&out);
}

#[test]
fn a_check_that_cannot_fail_is_named() {
    let _shells = sandboxed();
    require_root("`labctl test` without `--vm`");
    let machine = Machine::before_absent(&["/etc/labctl-sbx-test-nofail"]);
    let lab = lab_folder(
        "sbx-test-nofail",
        r#"profile = "none"
name = "nofail"
[[checks]]
name = "always"
run = "true"
[[checks]]
name = "the work"
run = "test -f /etc/labctl-sbx-test-nofail"
solve = "touch /etc/labctl-sbx-test-nofail"
"#,
    );
    let out = test_lab(&lab.path, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "check `always` passes before the solve: a student who did nothing gets its points"
        ),
        "{text}"
    );
    assert!(
        text.contains("nofail: 1 of 2 checks breaks an expectation"),
        "{text}"
    );
    machine.unchanged_after(&out);
}

#[test]
fn a_solve_that_fixes_one_check_but_not_another() {
    let _shells = sandboxed();
    require_root("`labctl test` without `--vm`");
    let machine = Machine::before_absent(&["/etc/labctl-sbx-test-one", "/etc/labctl-sbx-test-two"]);
    let lab = lab_folder(
        "sbx-test-half",
        r#"profile = "none"
name = "half"
[solve]
script = "solve.sh"
[[checks]]
name = "one"
run = "test -f /etc/labctl-sbx-test-one"
[[checks]]
name = "two"
run = "test -f /etc/labctl-sbx-test-two"
"#,
    );
    lab.write("solve.sh", "touch /etc/labctl-sbx-test-one\n", 0o644);
    let out = test_lab(&lab.path, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(problems(&v), pairs(&[("two", "fails_after_solve")]));
    let message = v["checks"][1]["problems"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("fails after the solve: a student who did the work"),
        "{message}"
    );
    machine.unchanged_after(&out);
}

#[test]
fn order_dependence_through_a_file_is_named() {
    let _shells = sandboxed();
    require_root("`labctl test` without `--vm`");
    let machine =
        Machine::before_absent(&["/etc/labctl-sbx-test-left", "/root/labctl-sbx-test-done"]);
    // `leaves` leaves a file that `removes` needs and removes: in order
    // both pass; in reverse, `removes` runs first and finds the file gone
    // (it removed it in the grade before).
    let lab = lab_folder(
        "sbx-test-order",
        r#"profile = "none"
name = "order"
[solve]
script = "solve.sh"
[[checks]]
name = "leaves"
run = "touch /etc/labctl-sbx-test-left && test -f /root/labctl-sbx-test-done"
[[checks]]
name = "removes"
run = "test -f /root/labctl-sbx-test-done && rm /etc/labctl-sbx-test-left"
"#,
    );
    lab.write("solve.sh", "touch /root/labctl-sbx-test-done\n", 0o644);
    let out = test_lab(&lab.path, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(problems(&v), pairs(&[("removes", "changes_in_reverse")]));
    assert_eq!(v["checks"][1]["after_solve"]["status"], "passed");
    assert_eq!(v["checks"][1]["reversed"]["status"], "failed");
    let out = test_lab(&lab.path, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "check `removes` changes verdict when run in reverse order: it depends on another \
             check or changes what it checks"
        ),
        "{text}"
    );
    machine.unchanged_after(&out);
}

#[test]
fn a_failing_solve_script_exits_4_with_its_output() {
    let _shells = sandboxed();
    require_root("`labctl test` without `--vm`");
    let machine = Machine::before_absent(&["/etc/labctl-sbx-test-partial"]);
    let lab = lab_folder(
        "sbx-test-solvefail",
        r#"profile = "none"
name = "solvefail"
[solve]
script = "solve.sh"
[[checks]]
name = "x"
run = "test -f /etc/labctl-sbx-test-partial"
"#,
    );
    lab.write(
        "solve.sh",
        "touch /etc/labctl-sbx-test-partial\necho \"solving in $LAB_DIR\"\n\
         echo 'fatal: cannot solve' >&2\nexit 3\n",
        0o644,
    );
    let out = test_lab(&lab.path, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let text = stdout(&out);
    assert!(
        text.contains("the solve script `solve.sh` failed (exit 3): nothing was graded after it"),
        "{text}"
    );
    assert!(
        text.contains("  │ solving in /"),
        "LAB_DIR reached the solve: {text}"
    );
    assert!(text.contains("  │ fatal: cannot solve"), "{text}");
    assert!(text.contains("x      fail         -"), "{text}");
    machine.unchanged_after(&out);

    let out = test_lab(&lab.path, &["--json"]);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["solve_failed"]["exit_code"], 3, "{v}");
    assert!(
        v["solve_failed"]["log_tail"]
            .as_str()
            .unwrap()
            .ends_with("fatal: cannot solve\n")
    );
    assert_eq!(v["checks"][0]["after_solve"], Value::Null);
}

#[test]
fn initially_pass_is_honoured() {
    let _shells = sandboxed();
    require_root("`labctl test` without `--vm`");
    let machine =
        Machine::before_absent(&["/etc/labctl-sbx-test-setup", "/etc/labctl-sbx-test-work"]);
    let lab = lab_folder(
        "sbx-test-initially",
        r#"profile = "none"
name = "initially"
[setup]
script = "setup.sh"
[[checks]]
name = "setup ran"
run = "test -f /etc/labctl-sbx-test-setup"
initially = "pass"
[[checks]]
name = "the work"
run = "test -f /etc/labctl-sbx-test-work"
solve = "touch /etc/labctl-sbx-test-work"
"#,
    );
    lab.write("setup.sh", "touch /etc/labctl-sbx-test-setup\n", 0o755);
    let out = test_lab(&lab.path, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = stdout(&out);
    assert!(
        text.contains("setup ran *  pass         pass         pass      ok"),
        "{text}"
    );
    machine.unchanged_after(&out);

    // Without the key, the same check is named.
    lab.write(
        "lab.toml",
        &std::fs::read_to_string(lab.join("lab.toml"))
            .unwrap()
            .replace("initially = \"pass\"\n", ""),
        0o644,
    );
    let out = test_lab(&lab.path, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert_eq!(
        problems(&json(&out)),
        pairs(&[("setup ran", "passes_before_solve")])
    );
    machine.unchanged_after(&out);
}
