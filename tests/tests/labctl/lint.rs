use super::*;
use lab_agent_tests::local::require_root;

fn lint(lab: &TempDir) -> std::process::Output {
    labctl(["lint", lab.path.to_str().unwrap()])
}

#[test]
fn a_clean_lab_passes_with_its_budget() {
    let lab = lab_folder(
        "labctl-lint-ok",
        "name = \"ok\"\n[setup]\nscript = \"setup.sh\"\n[[checks]]\nname = \"a\"\nrun = \"test -d /\"\n",
    );
    lab.write("setup.sh", "echo ok\n", 0o755);
    let out = lint(&lab);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("lint: `ok` has no problems (1 check)"),
        "{err}"
    );
    assert!(
        err.contains("budget (amd64): agent"),
        "with the agent: {err}"
    );
}

#[test]
fn model_problems_are_listed_together() {
    let lab = lab_folder(
        "labctl-lint-model",
        "name = \"x\"\n[setup]\nscript = \"setup.sh\"\ntimeout_secs = 0\n\
         [[checks]]\nname = \"a\"\nrun = \"true\"\npoints = -1\n\
         [[checks]]\nname = \"b\"\nrun = \"true\"\ncwd = \"rel\"\n\
         [[checks]]\nname = \"c\"\nrun = \"echo $(\"\n",
    );
    let out = lint(&lab);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    for want in [
        "setup.timeout_secs is 0",
        "check `a`: points is -1",
        "check `b`: cwd `rel` is not absolute",
        "setup.script names `setup.sh`",
        // The shell syntax too, though the model refused the file.
        "check `c`: `run` is not valid bash",
        "has 5 problems",
    ] {
        assert!(err.contains(want), "{want:?} missing: {err}");
    }
}

/// Shell syntax of setup and checks, and a payload over the Secret
/// limit: `try` would pass such a lab only to have `secret` refuse it.
#[test]
fn syntax_and_size_problems_are_listed_together() {
    let lab = lab_folder(
        "labctl-lint-syntax",
        "name = \"x\"\n[setup]\nscript = \"setup.sh\"\n[files]\nsource = \"files\"\n\
         [[checks]]\nname = \"broken if\"\nrun = \"if true; then echo\"\n\
         [[checks]]\nname = \"fine\"\nrun = \"true\"\n\
         [[checks]]\nname = \"broken quote\"\nrun = \"echo 'x\"\n",
    );
    lab.write("setup.sh", "case x in\n", 0o755);
    // Incompressible: 1.1 MB of it cannot fit a 1 MiB Secret.
    let mut data = Vec::with_capacity(1_100_000);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while data.len() < 1_100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::create_dir_all(lab.join("files")).unwrap();
    std::fs::write(lab.join("files/data.bin"), &data).unwrap();
    let out = lint(&lab);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    for want in [
        "setup script",
        "check `broken if`: `run` is not valid bash",
        "check `broken quote`: `run` is not valid bash",
        "Secret limit",
        "has 4 problems",
    ] {
        assert!(err.contains(want), "{want:?} missing: {err}");
    }
    assert!(!err.contains("check `fine`"), "{err}");

    // `try` runs the same lint first, and starts nothing.
    let out = labctl([
        "try",
        lab.path.to_str().unwrap(),
        "--agent",
        agent_bin().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("has 4 problems"), "{err}");
    assert!(!err.contains("staged"), "nothing started: {err}");
}

/// `[readiness]` out of range: both keys named, with their ranges.
#[test]
fn readiness_problems_are_named_with_their_ranges() {
    let lab = lab_folder(
        "labctl-lint-readiness",
        "name = \"x\"\n[readiness]\ntimeout_secs = 7200\nmin_root_bytes = 0\n",
    );
    let out = lint(&lab);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    for want in [
        "readiness.timeout_secs is 7200: use a number of seconds from 1 to 3600",
        "readiness.min_root_bytes is 0",
        "has 2 problems",
    ] {
        assert!(err.contains(want), "{want:?} missing: {err}");
    }
    let lab = lab_folder(
        "labctl-lint-readiness-typo",
        "name = \"x\"\n[readiness]\ntimeout = 100\n",
    );
    let out = lint(&lab);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("unknown field `timeout`"),
        "{}",
        describe(&out)
    );
}

/// `labctl lint` explains what `on_small_root` does with the lab's
/// `min_root_bytes`, both ways; a choice with no size to act on is a
/// problem.
#[test]
fn the_small_root_choice_is_explained() {
    for (choice, want) in [
        (
            "",
            "readiness: a root filesystem under 10.0 GiB (min_root_bytes) is ready, flagged \
             (`root.below_min`, the reason) and the student's interactive shells show a banner \
             (on_small_root = \"warn\", the default)",
        ),
        (
            "on_small_root = \"fail\"\n",
            "readiness: a root filesystem under 10.0 GiB (min_root_bytes) fails the VM before \
             setup (on_small_root = \"fail\"): on a containerDisk (~2.4 GiB root, the golden \
             disk's fallback) every session would fail",
        ),
    ] {
        let lab = lab_folder(
            "labctl-lint-small-root",
            &format!("name = \"x\"\n[readiness]\nmin_root_bytes = 10737418240\n{choice}"),
        );
        let out = lint(&lab);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert!(stderr(&out).contains(want), "{}", describe(&out));
    }
    let lab = lab_folder(
        "labctl-lint-small-root-alone",
        "name = \"x\"\n[readiness]\non_small_root = \"warn\"\n",
    );
    let out = lint(&lab);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("readiness.on_small_root is \"warn\" but there is no min_root_bytes"),
        "{}",
        describe(&out)
    );
}

#[test]
fn solves_are_linted_and_must_not_ship() {
    let lab = lab_folder(
        "labctl-lint-solve",
        "name = \"s\"\n[files]\nsource = \"files\"\n[solve]\nscript = \"files/solve.sh\"\n\
         [[checks]]\nname = \"a\"\nrun = \"true\"\nsolve = \"echo $(\"\n",
    );
    lab.write("files/solve.sh", "if then\n", 0o644);
    let out = lint(&lab);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    for want in [
        "the solve script `",
        "check `a`: `solve` is not valid bash",
        "solve.script `files/solve.sh` is inside [files].source `files`: it would be copied \
         into every student's VM",
    ] {
        assert!(err.contains(want), "{err} lacks {want:?}");
    }
}

/// Each VM's own setup script is read by `bash -n` like the lab's, in a
/// valid lab and in one the model refuses (then from the TOML as written).
#[test]
fn each_vms_setup_is_linted() {
    let toml = "name = \"v\"\n[[vms]]\nname = \"server\"\nsetup = \"server.sh\"\n\
                [[vms]]\nname = \"client\"\nsetup = \"client.sh\"\n\
                [[checks]]\nname = \"a\"\nvm = \"server\"\nrun = \"true\"\n";
    for (name, extra) in [
        ("valid", ""),
        ("refused", "[[checks]]\nname = \"b\"\nrun = \"true\"\n"),
    ] {
        let lab = lab_folder(
            &format!("labctl-lint-vms-{name}"),
            &format!("{toml}{extra}"),
        );
        lab.write("server.sh", "echo fine\n", 0o755);
        lab.write("client.sh", "case x in\n", 0o755);
        let out = lint(&lab);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains("vm `client`: the setup script `") && err.contains("is not valid bash"),
            "{name}: {err}"
        );
        assert!(
            !err.contains("vm `server`: the setup script"),
            "{name}: {err}"
        );
        if !extra.is_empty() {
            assert!(
                err.contains("check `b`"),
                "{name}: the model's problem too: {err}"
            );
        }
    }
}

/// Two key typos, a setup script and a lab script with Windows line
/// endings: every one in one run, the keys in the file's order with what
/// they likely meant, each CRLF script named with the command that fixes it.
#[test]
fn typos_and_crlf_scripts_are_all_named_in_one_run() {
    let lab = lab_folder(
        "labctl-lint-typos",
        "name = \"t\"\n[setup]\nscript = \"setup.sh\"\n[files]\nsource = \"files\"\n\
         [[checks]]\nname = \"a\"\nrun = \"true\"\nfail_mesage = \"m\"\n\
         [[checks]]\nname = \"b\"\nrun = \"true\"\nuesr = \"student\"\n",
    );
    lab.write(
        "setup.sh",
        "#!/bin/bash\r\nif true; then\r\n  echo hi\r\nfi\r\n",
        0o755,
    );
    lab.write("files/run.sh", "#!/bin/sh\r\necho run\r\n", 0o755);
    lab.write(
        "files/notes.txt",
        "a text file\r\nis not a script\r\n",
        0o644,
    );
    let out = lint(&lab);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    let first = err
        .find("line 9: unknown field `fail_mesage` in a [[checks]] table: did you mean `fail_message`?")
        .unwrap_or_else(|| panic!("{err}"));
    let second = err
        .find("line 13: unknown field `uesr` in a [[checks]] table: did you mean `user`?")
        .unwrap_or_else(|| panic!("{err}"));
    assert!(first < second, "in the file's order: {err}");
    let setup = lab.join("setup.sh");
    for want in [
        format!(
            "the setup script `{}` has Windows line endings (CRLF)",
            setup.display()
        ),
        format!(
            "hint: convert it to Unix line endings: `sed -i 's/\\r$//' {}`",
            setup.display()
        ),
        "the lab's file `run.sh` has Windows line endings (CRLF)".to_owned(),
        "has 4 problems".to_owned(),
    ] {
        assert!(err.contains(&want), "{want:?} missing: {err}");
    }
    assert!(!err.contains("notes.txt"), "not a script: {err}");
    assert!(
        !err.contains("unexpected end of file"),
        "named, not bash's words: {err}"
    );
}

/// A VM's own setup is in its payload: `lint`, `try` and `test` count it
/// as `labctl secret --vm` does (a budget line per VM, the same figure),
/// so what `secret` refuses fails on the author's machine first. And
/// `secret` reads the lab before its token flags: a session's missing
/// `--vm` is named in the first run.
#[test]
fn a_vms_own_payload_is_counted_as_secret_counts_it() {
    require_root("`labctl try` and `labctl test` without `--vm`");
    let lab = lab_folder(
        "labctl-lint-vm-budget",
        "name = \"two\"\n[[vms]]\nname = \"alpha\"\nsetup = \"big.sh\"\n\
         [[vms]]\nname = \"beta\"\n[[checks]]\nname = \"a\"\nvm = \"alpha\"\nrun = \"true\"\n",
    );
    // Hex of pseudo-random bytes in comments: ~550 KiB in the payload.
    let mut script = String::from("#!/bin/sh\n");
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..7000 {
        script.push_str("# ");
        for _ in 0..6 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            script.push_str(&format!("{x:016x}"));
        }
        script.push('\n');
    }
    lab.write("big.sh", &script, 0o755);
    let dir = lab.path.to_str().unwrap();
    let total = |err: &str, prefix: &str| -> String {
        let line = err
            .lines()
            .find(|l| l.starts_with(prefix) && l.contains("budget (amd64)"))
            .unwrap_or_else(|| panic!("no {prefix:?} budget line: {err}"));
        let at = line.find(" = ").unwrap() + 3;
        line[at..at + line[at..].find(" KiB").unwrap()].to_owned()
    };
    let token = lab.join("token");
    let secret = labctl([
        "secret",
        dir,
        "--name",
        "two-alpha",
        "--vm",
        "alpha",
        "--token-out",
        token.to_str().unwrap(),
        "-o",
        "/dev/null",
    ]);
    assert_eq!(secret.status.code(), Some(2), "{}", describe(&secret));
    let figure = total(&stderr(&secret), "budget");
    assert!(
        stderr(&secret).contains("over the 1 MiB Secret limit"),
        "{}",
        describe(&secret)
    );

    let linted = lint(&lab);
    assert_eq!(linted.status.code(), Some(2), "{}", describe(&linted));
    let err = stderr(&linted);
    assert_eq!(total(&err, "VM `alpha`: "), figure, "{err}");
    assert!(
        err.contains("VM `beta`: payload with"),
        "a line per VM: {err}"
    );
    assert!(err.contains("error: VM `alpha`: the user-data is"), "{err}");
    for verb in ["try", "test"] {
        let out = labctl([verb, dir, "--agent", agent_bin().to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{verb}: {}", describe(&out));
        let err = stderr(&out);
        assert_eq!(total(&err, "VM `alpha`: "), figure, "{verb}: {err}");
        assert!(!err.contains("staged"), "{verb}: nothing started: {err}");
    }

    let unready = labctl(["secret", dir, "--name", "two"]);
    assert_eq!(unready.status.code(), Some(2), "{}", describe(&unready));
    let err = stderr(&unready);
    assert!(
        err.contains("say which one this payload is for with `--vm NAME`"),
        "{err}"
    );
    assert!(!err.contains("--token-out"), "the lab first: {err}");
}
