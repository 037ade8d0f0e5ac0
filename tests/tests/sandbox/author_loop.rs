//! The author's loop as README.md prints it, run command by command
//! against hello-lab; and what it adds to `try` and `test`: `--param`
//! reaching a setup under `set -u` (a lab of one VM, and each VM of a
//! session), `labctl test` explaining a broken check, and `test --keep`
//! leaving the sandbox after the solve to look at and grade again.

use super::*;
use lab_agent_tests::local::static_agent_for;
use lab_agent_tests::vm::{Arch, GuestOs, VmImage};

/// The commands of README.md's author-loop block (under "Writing a lab"),
/// as printed.
fn readme_author_loop() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = &readme[readme.find("## Writing a lab").expect("the section")..];
    let block = &section[section.find("```console\n").expect("a console block") + 11..];
    let block = &block[..block.find("```").unwrap()];
    block
        .lines()
        .filter_map(|l| l.strip_prefix("$ "))
        .map(str::to_owned)
        .collect()
}

/// Each command of the block exits as the lab makes it: hello-lab fails
/// its last check until the student's step, which the block takes in
/// the kept sandbox before grading it again.
#[test]
#[cfg_attr(
    vm_guest_left_out = "debian-12",
    ignore = "LAB_AGENT_VM_GUESTS leaves out debian-12 (the block's `--sandbox-image`)"
)]
fn readmes_author_loop_runs_as_printed() {
    let _shells = sandboxed();
    require_root("the author's loop (`sudo labctl try`)");
    let image = VmImage::ensure(GuestOs::Debian12).unwrap_or_else(|e| panic!("{e}"));
    // What `labctl` finds without `--agent`: the static build too.
    static_agent_for(Arch::Amd64);
    let commands = readme_author_loop();
    let expected: &[(&str, i32)] = &[
        ("labctl lint ", 0),
        ("labctl try examples/hello-lab --changes", 1),
        ("labctl try examples/hello-lab --sandbox-image ", 1),
        ("labctl try examples/hello-lab --keep", 1),
        ("labctl try --enter ", 0),
        ("labctl try --grade ", 0),
        ("labctl try --stop ", 0),
        ("labctl test examples/hello-lab", 0),
        ("labctl secret examples/hello-lab ", 0),
    ];
    assert_eq!(
        commands.len(),
        expected.len(),
        "README.md's author loop changed: update this test with it: {commands:#?}"
    );
    // Run from a folder of their own (`secret` writes there) that has the
    // repository's `examples/`, with `labctl` on PATH and `sudo` as is.
    let cwd = TempDir::new("readme-loop");
    std::os::unix::fs::symlink(repo_root().join("examples"), cwd.join("examples")).unwrap();
    let bin = labctl_bin();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut kept: Option<PathBuf> = None;
    for (command, (start, code)) in commands.iter().zip(expected) {
        let plain = command.strip_prefix("sudo ").unwrap_or(command);
        assert!(plain.starts_with(start), "{command:?} is not {start:?}…");
        let line = match &kept {
            Some(dir) => plain.replace("/tmp/labctl-try-XXXXXX", &dir.display().to_string()),
            None => plain.to_owned(),
        };
        let out = Command::new("bash")
            .arg("-c")
            .arg(&line)
            .current_dir(&cwd.path)
            .env("PATH", &path)
            .env("img", &image.dir)
            .env("NO_COLOR", "1")
            .env_remove("LAB_AGENT_BIN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(*code), "{line}\n{}", describe(&out));
        if line.ends_with("--keep") {
            kept = Some(staged_dir(&stderr(&out)));
        }
    }
    let kept = kept.expect("the block keeps a sandbox");
    assert!(!kept.exists(), "`--stop` removed it");
    assert!(cwd.join("secret.yaml").is_file() && cwd.join("hello-lab-vm1.token").is_file());
}

/// `--param KEY=VALUE` reaches a setup that reads it under `set -u`, and
/// the checks; in a session `VM.KEY=VALUE` is one VM's, over `KEY=VALUE`.
#[test]
fn params_reach_the_setup_and_the_checks() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let lab = lab_folder(
        "sbx-params",
        "name = \"p\"\nprofile = \"none\"\n[setup]\nscript = \"setup.sh\"\n\
         [[checks]]\nname = \"given\"\nrun = 'test \"$(cat $LAB_DIR/got)\" = \"a b\" && test \"$LAB_PARAM_WHO\" = \"a b\"'\n",
    );
    lab.write(
        "setup.sh",
        "#!/bin/bash\nset -u\necho \"$LAB_PARAM_WHO\" > \"$LAB_DIR/got\"\n",
        0o755,
    );
    let given = try_lab(&lab.path, &["--param", "WHO=a b"]);
    assert_eq!(given.status.code(), Some(0), "{}", describe(&given));
    let missing = try_lab(&lab.path, &[]);
    assert_eq!(missing.status.code(), Some(4), "{}", describe(&missing));
    assert!(stderr(&missing).contains("LAB_PARAM_WHO: unbound variable"));

    let session = lab_folder(
        "sbx-params-vms",
        "name = \"pv\"\nprofile = \"none\"\n[setup]\nscript = \"setup.sh\"\n\
         [[vms]]\nname = \"one\"\n[[vms]]\nname = \"two\"\n\
         [[checks]]\nname = \"one\"\nvm = \"one\"\nrun = 'test \"$(cat $LAB_DIR/role)\" = first'\n\
         [[checks]]\nname = \"two\"\nvm = \"two\"\nrun = 'test \"$(cat $LAB_DIR/role)\" = any'\n",
    );
    session.write(
        "setup.sh",
        "#!/bin/bash\nset -u\necho \"$LAB_PARAM_ROLE\" > \"$LAB_DIR/role\"\n",
        0o755,
    );
    let args = ["--param", "ROLE=any", "--param", "one.ROLE=first"];
    let tried = try_lab(&session.path, &args);
    assert_eq!(tried.status.code(), Some(0), "{}", describe(&tried));
    let wrong = try_lab(&session.path, &["--param", "three.ROLE=x"]);
    assert_eq!(wrong.status.code(), Some(2), "{}", describe(&wrong));
    assert!(
        stderr(&wrong).contains("has no VM named `three`: its VMs are one, two"),
        "{}",
        describe(&wrong)
    );
}

/// A check broken after the solve is shown with its exit code, its
/// stderr's end and the hint for a command the guest lacks; `--keep`
/// leaves the sandbox as the solve left it, to look at and grade again.
#[test]
fn test_explains_a_broken_check_and_keeps_the_sandbox() {
    let _shells = sandboxed();
    require_root("`labctl test` without `--vm`");
    let lab = lab_folder(
        "sbx-broken",
        "name = \"b\"\nprofile = \"none\"\n\
         [[checks]]\nname = \"solved\"\nrun = \"test -f /etc/labctl-sbx-solved\"\n\
         solve = \"touch /etc/labctl-sbx-solved\"\n\
         [[checks]]\nname = \"tool\"\nrun = \"echo trying >&2; labctl-sbx-no-such-tool --version\"\n\
         solve = \"true\"\n",
    );
    let mut args = try_args(&lab.path, &["--keep"]);
    args[0] = "test".into();
    let out = labctl(args);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let dir = staged_dir(&stderr(&out));
    let d = dir.display().to_string();
    struct Stop(String);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = labctl(["try", "--stop", &self.0]);
        }
    }
    let _stop = Stop(d.clone());
    let text = stdout(&out);
    for want in [
        "check `tool` fails after the solve",
        "  after the solve: exit code 127 (",
        "  stderr (end):\n    │ trying\n",
        "labctl-sbx-no-such-tool: command not found",
        "  hint: a command of this check is missing in the guest (`labctl-sbx-no-such-tool`?)",
    ] {
        assert!(text.contains(want), "{want:?} missing: {text}");
    }
    assert!(
        stderr(&out).contains(&format!("try --grade {d} [--check NAME]")),
        "{}",
        describe(&out)
    );
    assert!(!Path::new("/etc/labctl-sbx-solved").exists());
    let seen = labctl([
        "try",
        "--enter",
        &d,
        "--",
        "test",
        "-f",
        "/etc/labctl-sbx-solved",
    ]);
    assert_eq!(
        seen.status.code(),
        Some(0),
        "the solve's work is kept: {}",
        describe(&seen)
    );
    let graded = labctl(["try", "--grade", &d, "--json"]);
    assert_eq!(graded.status.code(), Some(1), "{}", describe(&graded));
    assert_eq!(
        check_outcomes(&json(&graded)),
        [("solved", true), ("tool", false)]
    );
    let stopped = labctl(["try", "--stop", &d]);
    assert_eq!(stopped.status.code(), Some(0), "{}", describe(&stopped));
    assert!(!dir.exists());
}
