use super::*;
use crate::Profile;

const FULL: &str = r#"
name = "hello-lab"
[setup]
script = "setup.sh"
timeout_secs = 600
[files]
source = "files"
[[checks]]
name = "greeting file exists"
run = "test -f $LAB_DIR/greeting"
user = "root"
timeout_secs = 30
fail_message = "Create the greeting file first."
[[checks]]
name = "second"
run = "true"
"#;

#[test]
fn parses_the_spec_example() {
    let lab = Lab::parse(FULL, "/labs/hello").unwrap();
    assert_eq!(lab.name, "hello-lab");
    assert_eq!(
        lab.setup,
        Some(Setup {
            script: Some("setup.sh".into()),
            timeout_secs: 600
        })
    );
    assert_eq!(lab.setup_script_path(), Some("/labs/hello/setup.sh".into()));
    assert_eq!(lab.files.unwrap().source, PathBuf::from("files"));
    assert_eq!(lab.checks.len(), 2);
    assert_eq!(lab.checks[0].exec.timeout_secs, 30);
    assert_eq!(lab.checks[1].exec.timeout_secs, DEFAULT_CHECK_TIMEOUT_SECS);
    assert_eq!(lab.checks[1].exec.user, "root");
}

#[test]
fn minimal_lab() {
    let lab = Lab::parse("name = \"x\"", "/l").unwrap();
    assert!(lab.setup.is_none() && lab.files.is_none() && lab.checks.is_empty());
    assert_eq!(lab.setup_timeout_secs(), DEFAULT_SETUP_TIMEOUT_SECS);
    assert_eq!(
        lab.readiness,
        Readiness {
            timeout_secs: 150,
            min_root_bytes: None,
            on_small_root: OnSmallRoot::Warn,
        }
    );
}

#[test]
fn readiness_keys_and_their_defaults() {
    let lab = Lab::parse(
        "name = \"x\"\n[readiness]\ntimeout_secs = 269\nmin_root_bytes = 10737418240\n",
        "/l",
    )
    .unwrap();
    assert_eq!(
        lab.readiness,
        Readiness {
            timeout_secs: 269,
            min_root_bytes: Some(10 << 30),
            on_small_root: OnSmallRoot::Warn,
        }
    );
    // An empty table is the defaults; each key alone keeps the other's.
    let lab = Lab::parse("name = \"x\"\n[readiness]\n", "/l").unwrap();
    assert_eq!(lab.readiness, Readiness::default());
    let lab = Lab::parse("name = \"x\"\n[readiness]\nmin_root_bytes = 1\n", "/l").unwrap();
    assert_eq!(
        (lab.readiness.timeout_secs, lab.readiness.min_root_bytes),
        (DEFAULT_READY_TIMEOUT_SECS, Some(1))
    );
    // The range's ends are in it.
    for t in [1, 3600] {
        let text = format!("name = \"x\"\n[readiness]\ntimeout_secs = {t}\n");
        assert_eq!(Lab::parse(&text, "/l").unwrap().readiness.timeout_secs, t);
    }
}

#[test]
fn on_small_root_warns_unless_told_to_fail() {
    let parse = |extra: &str| {
        let text = format!("name = \"x\"\n[readiness]\nmin_root_bytes = 9\n{extra}");
        Lab::parse(&text, "/l").unwrap().readiness.on_small_root
    };
    assert_eq!(parse(""), OnSmallRoot::Warn);
    assert_eq!(parse("on_small_root = \"warn\"\n"), OnSmallRoot::Warn);
    assert_eq!(parse("on_small_root = \"fail\"\n"), OnSmallRoot::Fail);
}

#[test]
fn readiness_errors_say_what_to_fix() {
    let cases: &[(&str, &str)] = &[
        (
            "timeout_secs = 0",
            "readiness.timeout_secs is 0: use a number of seconds from 1 to 3600",
        ),
        ("timeout_secs = 3601", "readiness.timeout_secs is 3601"),
        ("timeout_secs = -5", "readiness.timeout_secs is -5"),
        (
            "timeout_secs = 1.5",
            "invalid type: floating point `1.5`, expected a whole number",
        ),
        (
            "min_root_bytes = 0",
            "readiness.min_root_bytes is 0: use the root filesystem's least size in bytes",
        ),
        ("min_root_bytes = -1", "readiness.min_root_bytes is -1"),
        (
            "min_root_bytes = \"10G\"",
            "invalid type: string \"10G\", expected a whole number",
        ),
        ("timeout = 100", "unknown field `timeout`"),
        (
            "on_small_root = \"warn\"",
            "readiness.on_small_root is \"warn\" but there is no min_root_bytes for it to act on",
        ),
        (
            "min_root_bytes = 1\non_small_root = \"ignore\"",
            "unknown variant `ignore`, expected `warn` or `fail`",
        ),
    ];
    for (body, want) in cases {
        let text = format!("name = \"x\"\n[readiness]\n{body}\n");
        let err = Lab::parse(&text, "/labs/x").unwrap_err().to_string();
        assert!(err.contains(want), "for {body:?}: {err:?} lacks {want:?}");
        assert!(err.contains("/labs/x/lab.toml"), "{err}");
    }
    // Both wrong: both reported, for lint.
    let all = Lab::parse_all(
        "name = \"x\"\n[readiness]\ntimeout_secs = 0\nmin_root_bytes = 0\n",
        "/l",
    )
    .unwrap_err();
    assert_eq!(all.len(), 2, "{all:?}");
}

/// Each bad input and a fragment its message must contain.
#[test]
fn bad_labs_say_what_to_fix() {
    let cases: &[(&str, &str)] = &[
        ("", "missing field `name`"),
        ("name = \"x\"\nsetpu = 1", "unknown field `setpu`"),
        ("name = \"\"", "name is empty"),
        ("name = \"a b\"", "contains ' '"),
        (
            "name = \"x\"\n[setup]\nscript = \"/etc/passwd\"",
            "is absolute",
        ),
        (
            "name = \"x\"\n[setup]\nscript = \"../x.sh\"",
            "leaves the lab folder",
        ),
        (
            "name = \"x\"\n[setup]\ntimeout_secs = 0",
            "setup.timeout_secs is 0",
        ),
        (
            "name = \"x\"\n[setup]\ntimeout_secs = 99999",
            "from 1 to 3600",
        ),
        (
            "name = \"x\"\n[setup]\ntimeout_secs = \"5\"",
            "invalid type: string \"5\", expected a whole number",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\npoints = -1",
            "check `a`: points is -1: use a whole number from 0 to 10000",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\npoints = 1.5",
            "expected a whole number",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nmax_output_bytes = 99999999",
            "check `a`: max_output_bytes is 99999999",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\ncwd = \"work\"",
            "check `a`: cwd `work` is not absolute",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nenv = { LAB_DIR = \"/x\" }",
            "check `a`: env.LAB_DIR is set by the grader",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nenv = { \"1X\" = \"y\" }",
            "check `a`: env.1X is not a variable name",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nenv = { X = 1 }",
            "expected a string",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"  \"",
            "check `a`: run is empty",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"a\"\nrun = \"true\"",
            "check `a`: name is used by an earlier check",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"\"\nrun = \"true\"",
            "check #1 name is empty",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\ntimeout_secs = -1",
            "check `a`: timeout_secs is -1",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nuser = \"\"",
            "check `a`: user is empty",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nfail = \"x\"",
            "unknown field `fail`",
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"",
            "missing field `run`",
        ),
        (
            "name = \"x\"\n[files]\nsource = \"..\"",
            "leaves the lab folder",
        ),
        ("name = [", "not valid lab.toml"),
    ];
    for (text, want) in cases {
        let err = Lab::parse(text, "/labs/x").unwrap_err().to_string();
        assert!(err.contains(want), "for {text:?}: {err:?} lacks {want:?}");
        assert!(
            err.contains("/labs/x/lab.toml"),
            "{err} does not name the file"
        );
    }
}

#[test]
fn check_keys_and_their_defaults() {
    let lab = Lab::parse(
        "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"cat\"\npoints = 3\n\
         env = { GREETING = \"hi\" }\ncwd = \"/tmp\"\nstdin = \"in\"\nmax_output_bytes = 10\n\
         [[checks]]\nname = \"b\"\nrun = \"true\"\npoints = 0\n\
         [[checks]]\nname = \"c\"\nrun = \"true\"\n",
        "/l",
    )
    .unwrap();
    let a = &lab.checks[0];
    assert_eq!(a.points, 3);
    assert_eq!(a.exec.env.get("GREETING").map(String::as_str), Some("hi"));
    assert_eq!(
        (
            a.exec.cwd.as_deref(),
            a.exec.stdin.as_deref(),
            a.exec.max_output_bytes
        ),
        (Some("/tmp"), Some("in"), 10)
    );
    let c = &lab.checks[2];
    assert_eq!(
        (c.points, c.exec.max_output_bytes),
        (1, DEFAULT_MAX_OUTPUT_BYTES)
    );
    assert!(c.exec.env.is_empty() && c.exec.cwd.is_none() && c.exec.stdin.is_none());
    assert_eq!(lab.max_score(), 4);
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = "name = \"a b\"\n[setup]\ntimeout_secs = 0\n\
                [[checks]]\nname = \"one\"\nrun = \" \"\npoints = -2\n\
                [[checks]]\nname = \"one\"\nrun = \"true\"\n";
    let all: Vec<String> = Lab::parse_all(text, "/l")
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    let wants = [
        "name `a b` contains",
        "setup.timeout_secs is 0",
        "check `one`: run is empty",
        "check `one`: points is -2",
        "check `one`: name is used by an earlier check",
    ];
    assert_eq!(all.len(), wants.len(), "{all:#?}");
    for (got, want) in all.iter().zip(wants) {
        assert!(got.contains(want), "{got} lacks {want}");
    }
    // `parse` keeps the first.
    assert_eq!(Lab::parse(text, "/l").unwrap_err().to_string(), all[0]);
}

#[test]
fn load_checks_that_named_paths_exist() {
    let dir = std::env::temp_dir().join(format!("lab-proto-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(LAB_TOML), FULL).unwrap();
    let err = Lab::load(&dir).unwrap_err().to_string();
    assert!(err.contains("setup.script names `setup.sh`"), "{err}");
    std::fs::write(dir.join("setup.sh"), "true").unwrap();
    let err = Lab::load(&dir).unwrap_err().to_string();
    assert!(err.contains("files.source names `files`"), "{err}");
    std::fs::create_dir_all(dir.join("files/sub")).unwrap();
    std::fs::write(dir.join("files/b.txt"), "b").unwrap();
    std::fs::write(dir.join("files/sub/a.sh"), "a").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("files/sub/a.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    let lab = Lab::load(&dir).unwrap();
    let files = lab.collect_files().unwrap();
    let got: Vec<_> = files.iter().map(|f| (f.path.as_str(), f.mode)).collect();
    assert_eq!(got, vec![("b.txt", 0o644), ("sub/a.sh", 0o750)]);
    std::os::unix::fs::symlink("b.txt", dir.join("files/link")).unwrap();
    let err = lab.collect_files().unwrap_err().to_string();
    assert!(err.contains("is a symlink"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    let err = Lab::load(&dir).unwrap_err().to_string();
    assert!(err.starts_with("failed to read"), "{err}");
}

#[test]
fn runaway_keys_per_check_override_the_lab_defaults() {
    let text = "name = \"p\"\nleave_running = true\nmax_pids = 100\nmax_memory_bytes = 268435456\n\
        [[checks]]\nname = \"a\"\nrun = \"true\"\n\
        [[checks]]\nname = \"b\"\nrun = \"true\"\nleave_running = false\nmax_pids = 7\nmax_memory_bytes = 16777216\n";
    let lab = Lab::parse(text, "/labs/p").unwrap();
    assert!(lab.defaults.leave_running);
    assert_eq!(
        (lab.defaults.max_pids, lab.defaults.max_memory_bytes),
        (Some(100), Some(256 << 20))
    );
    let (a, b) = (&lab.checks[0], &lab.checks[1]);
    assert!(a.exec.leave_running);
    assert_eq!(
        (a.exec.max_pids, a.exec.max_memory_bytes),
        (Some(100), Some(256 << 20))
    );
    assert!(!b.exec.leave_running);
    assert_eq!(
        (b.exec.max_pids, b.exec.max_memory_bytes),
        (Some(7), Some(16 << 20))
    );
    // Nothing said: killed with the check, the agent's limits.
    let lab = Lab::parse(
        "name = \"p\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
        "/x",
    )
    .unwrap();
    let a = &lab.checks[0];
    assert!(!a.exec.leave_running);
    assert_eq!((a.exec.max_pids, a.exec.max_memory_bytes), (None, None));
    // Out of range: every problem named, with its check and the range.
    let errs = Lab::parse_all(
        "name = \"p\"\nmax_pids = 0\n[[checks]]\nname = \"a\"\nrun = \"true\"\nmax_pids = 20000\nmax_memory_bytes = 1024\n",
        "/x",
    )
    .unwrap_err();
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(text.len(), 3, "{text:?}");
    assert!(
        text[0].contains("max_pids") && text[0].contains("is 0: use 1 to 16384"),
        "{text:?}"
    );
    assert!(
        text[1].contains("check `a`: max_pids") && text[1].contains("is 20000"),
        "{text:?}"
    );
    assert!(
        text[2].contains("check `a`: max_memory_bytes") && text[2].contains("16 MiB"),
        "{text:?}"
    );
    let err = Lab::parse("name = \"p\"\nleave_running = \"yes\"\n", "/x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid type"), "{err}");
}

#[test]
fn solve_and_initially_for_labctl_test() {
    let lab = Lab::parse(
        "name = \"s\"\n[solve]\nscript = \"solve.sh\"\n\
         [[checks]]\nname = \"a\"\nrun = \"true\"\nsolve = \"touch ~/x\"\n\
         [[checks]]\nname = \"b\"\nrun = \"true\"\ninitially = \"pass\"\n",
        "/labs/s",
    )
    .unwrap();
    assert_eq!(lab.solve_script_path(), Some("/labs/s/solve.sh".into()));
    let (a, b) = (&lab.checks[0], &lab.checks[1]);
    assert_eq!(
        (a.solve.as_deref(), a.initially),
        (Some("touch ~/x"), Initially::Fail)
    );
    assert_eq!((b.solve.as_deref(), b.initially), (None, Initially::Pass));
    // Nothing said: no solve, and every check must fail after setup.
    let lab = Lab::parse("name = \"s\"\n", "/l").unwrap();
    assert_eq!(lab.solve, None);
    let cases: &[(&str, &str)] = &[
        ("[solve]\nscript = \"/root/s.sh\"", "solve.script"),
        ("[solve]\nscript = \"../s.sh\"", "leaves the lab folder"),
        ("[solve]\n", "missing field `script`"),
        (
            "[[checks]]\nname = \"a\"\nrun = \"true\"\ninitially = \"passes\"",
            "unknown variant `passes`, expected `fail` or `pass`",
        ),
        (
            "[[checks]]\nname = \"a\"\nrun = \"true\"\nsolve = \" \"",
            "check `a`: solve is empty",
        ),
    ];
    for (body, want) in cases {
        let text = format!("name = \"s\"\n{body}\n");
        let err = Lab::parse(&text, "/labs/s").unwrap_err().to_string();
        assert!(err.contains(want), "for {body:?}: {err:?} lacks {want:?}");
    }
}

#[test]
fn load_checks_that_the_solve_script_exists() {
    let dir = std::env::temp_dir().join(format!("lab-proto-solve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(LAB_TOML),
        "name = \"s\"\n[solve]\nscript = \"solve.sh\"\n",
    )
    .unwrap();
    let err = Lab::load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("solve.script names `solve.sh`, which is not a file"),
        "{err}"
    );
    std::fs::write(dir.join("solve.sh"), "true").unwrap();
    assert!(Lab::load(&dir).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn profile_per_check_overrides_the_lab_default() {
    let text = "name = \"p\"\nprofile = \"system\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"b\"\nrun = \"true\"\nprofile = \"none\"\n";
    let lab = Lab::parse(text, "/labs/p").unwrap();
    assert_eq!(lab.defaults.profile, Profile::System);
    assert_eq!(lab.checks[0].exec.profile, Profile::System);
    assert_eq!(lab.checks[1].exec.profile, Profile::None);
    let lab = Lab::parse(
        "name = \"p\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
        "/x",
    )
    .unwrap();
    assert_eq!(lab.checks[0].exec.profile, Profile::Login);
    let err = Lab::parse("name = \"p\"\nprofile = \"user\"\n", "/x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown variant `user`"), "{err}");
}

/// Every exec option is one raw shape (`RawExecOptions`), flattened into
/// the top level and into each check: any of them is a lab-wide default
/// too, a check's own key wins, `env` adds up, and a problem is told where
/// it was written (once, not under every check that inherits it).
#[test]
fn every_exec_option_is_a_lab_wide_default() {
    let text = r#"
name = "d"
user = "student"
timeout_secs = 7
cwd = "/srv"
max_output_bytes = 100
max_pids = 50
leave_running = true
[env]
A = "lab"
B = "lab"
[[checks]]
name = "inherits"
run = "true"
[[checks]]
name = "own"
run = "true"
user = "root"
timeout_secs = 9
env = { B = "check" }
"#;
    let lab = Lab::parse(text, "/labs/d").unwrap();
    let (a, b) = (&lab.checks[0].exec, &lab.checks[1].exec);
    assert_eq!((a.user.as_str(), a.timeout_secs), ("student", 7));
    assert_eq!((a.cwd.as_deref(), a.max_output_bytes), (Some("/srv"), 100));
    assert_eq!((a.max_pids, a.leave_running), (Some(50), true));
    assert_eq!((b.user.as_str(), b.timeout_secs), ("root", 9));
    assert_eq!((b.env["A"].as_str(), b.env["B"].as_str()), ("lab", "check"));
    assert_eq!(a.env["B"], "lab");

    let all = Lab::parse_all(
        "name = \"d\"\ncwd = \"rel\"\ntimeout_secs = 0\n[[checks]]\nname = \"c\"\nrun = \"true\"\n[[checks]]\nname = \"e\"\nrun = \"true\"\nmax_pids = 0\n",
        "/l",
    )
    .unwrap_err();
    let text: Vec<String> = all.iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 3, "{text:#?}");
    assert!(text[0].contains(": cwd `rel` is not absolute"), "{text:#?}");
    assert!(text[1].contains(": timeout_secs is 0"), "{text:#?}");
    assert!(text[2].contains("check `e`: max_pids is 0"), "{text:#?}");
}

/// A check is its own keys over the lab's defaults, validated by the
/// options' one `validate` (an `env` variable longer than Linux passes to a
/// program is the lab's problem, named under its check, not an error at
/// grading time), and becomes a request in one place.
#[test]
fn a_check_is_exec_options_and_becomes_a_request() {
    let long = "v".repeat(exec::MAX_COMMAND_BYTES);
    let text = format!(
        "name = \"p\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nenv = {{ V = \"{long}\" }}\ntimeout_secs = 0\n"
    );
    let text: Vec<String> = Lab::parse_all(&text, "/x")
        .unwrap_err()
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        text,
        [
            "`/x/lab.toml`: check `a`: timeout_secs is 0: use a number of seconds from 1 to 3600",
            "`/x/lab.toml`: check `a`: env.V is 131073 bytes with its name; Linux passes at most 131071 bytes in one variable: send large data as stdin",
        ]
    );
    let lab = Lab::parse(
        "name = \"p\"\nprofile = \"none\"\nmax_pids = 50\n[[checks]]\nname = \"a\"\nrun = \"id\"\nuser = \"student\"\nenv = { A = \"1\" }\ncwd = \"/tmp\"\n",
        "/x",
    )
    .unwrap();
    let check = &lab.checks[0];
    assert_eq!(
        check.exec,
        ExecOptions {
            user: "student".into(),
            env: [("A".to_owned(), "1".to_owned())].into(),
            cwd: Some("/tmp".into()),
            ..lab.defaults.clone()
        }
    );
    assert_eq!(
        serde_json::to_string(&check.request("/opt/lab")).unwrap(),
        r#"{"command":"id","timeout_secs":60,"user":"student","cwd":"/tmp","env":{"A":"1","LAB_DIR":"/opt/lab"},"stdin":null,"max_output_bytes":1048576,"profile":"none","max_pids":50}"#
    );
    assert_eq!(
        check.request_to_run("make", "/l").command,
        "make",
        "a check's solve runs as the check does"
    );
}

/// Every unknown key in one run, in the file's order (not serde's map
/// order, which is alphabetical), each with what it likely meant; the
/// rest of the file is still checked in the same run.
#[test]
fn every_unknown_key_at_once_in_file_order() {
    let text = "name = \"x\"\n\
                [[checks]]\nname = \"a\"\nrun = \"true\"\nfail_mesage = \"m\"\n\
                [[checks]]\nname = \"b\"\nrun = \"true\"\nuesr = \"student\"\npoints = -1\n\
                env = { ANY_NAME = \"free\" }\n\
                [setpu]\nscript = \"s.sh\"\n";
    let all: Vec<String> = Lab::parse_all(text, "/x")
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        all,
        [
            "`/x/lab.toml` line 5: unknown field `fail_mesage` in a [[checks]] table: did you mean `fail_message`?",
            "`/x/lab.toml` line 9: unknown field `uesr` in a [[checks]] table: did you mean `user`?",
            "`/x/lab.toml` line 12: unknown field `setpu` in the top level: did you mean `setup`?",
            "`/x/lab.toml`: check `b`: points is -1: use a whole number from 0 to 10000",
        ]
    );
    let none = Lab::parse("name = \"x\"\nbanana = 1\n", "/x").unwrap_err();
    assert!(
        none.to_string()
            .contains("the keys there are `name`, `setup`"),
        "{none}"
    );
}
