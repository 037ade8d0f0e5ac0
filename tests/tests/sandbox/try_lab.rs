//! `labctl try` as a lab author runs it: hello-lab end to end, a failing
//! setup, `--keep-going`, a missing agent.

use super::*;

#[test]
fn hello_lab_end_to_end() {
    let _shells = sandboxed();
    require_root("hello-lab's setup (it creates a user)");
    let lab = repo_root().join("examples/hello-lab");

    let out = try_lab(&lab, &["--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "one check waits for the student: {}",
        describe(&out)
    );
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
    assert_eq!(
        (v["lab"].as_str(), v["passed"].as_u64(), v["total"].as_u64()),
        (Some("hello-lab"), Some(3), Some(4))
    );
    assert_eq!(check_outcomes(&v), HELLO_LAB_BEFORE_THE_STEP);
    let last = &v["checks"][3];
    assert!(
        last["fail_message"]
            .as_str()
            .unwrap()
            .contains("chmod +x ~/hello.sh")
    );
    assert!(
        last["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{last}"
    );
    // The interactive-only banner never leaks into check output.
    for c in v["checks"].as_array().unwrap() {
        for stream in ["stdout", "stderr"] {
            assert!(
                !c[stream].as_str().unwrap().contains("Welcome to hello-lab"),
                "{c}"
            );
        }
    }
    let err = stderr(&out);
    assert!(err.contains("ready after"), "{err}");
    assert!(!staged_dir(&err).exists(), "temp dir removed");

    let out = try_lab(&lab, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.contains("  ✓ student account exists ("), "{text}");
    assert!(text.contains("  ✗ hello.sh runs ("), "{text}");
    // Then what the setup changed, in the sandbox only.
    assert!(
        text.contains("\nhello-lab: 3 of 4 checks passed, score 3/5\nthe lab changed "),
        "{text}"
    );
    assert!(v["changes"]["added"].is_array(), "{v}");
}

fn failing_lab() -> TempDir {
    let dir = lab_folder(
        "labctl-try-fail",
        "name = \"broken\"\n[setup]\nscript = \"setup.sh\"\n[files]\nsource = \"files\"\n\
         [[checks]]\nname = \"files staged\"\nrun = 'test -x \"$LAB_DIR/bin/tool\"'\n",
    );
    dir.write(
        "setup.sh",
        "echo \"setting up from $LAB_DIR\"\necho 'fatal: no network' >&2\nexit 9\n",
        0o644,
    );
    dir.write("files/bin/tool", "#!/bin/sh\n", 0o750);
    dir
}

#[test]
fn a_failing_setup_exits_4_with_its_log_and_cleans_up() {
    let _shells = sandboxed();
    let lab = failing_lab();
    let out = try_lab(&lab.path, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("fatal: no network"), "{err}");
    assert!(
        err.contains("setting up from /"),
        "LAB_DIR reached setup: {err}"
    );
    assert!(err.contains("error: the lab is not ready"), "{err}");
    assert_eq!(stdout(&out), "", "no report without --keep-going");
    assert!(!staged_dir(&err).exists(), "temp dir removed");
}

#[test]
fn keep_going_grades_anyway_and_modes_are_kept() {
    let _shells = sandboxed();
    let lab = failing_lab();
    let out = try_lab(&lab.path, &["--keep-going", "--json"]);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(&out)));
    assert_eq!(v["checks"][0]["name"], "files staged");
    assert_eq!(v["checks"][0]["passed"], true, "staged with its mode: {v}");
}

#[test]
fn a_missing_agent_is_a_usage_error() {
    let _shells = sandboxed();
    let lab = failing_lab();
    let out = labctl([
        "try",
        lab.path.to_str().unwrap(),
        "--agent",
        "/nonexistent/lab-agent",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(stderr(&out).contains("`--agent /nonexistent/lab-agent` is not a file"));
}
