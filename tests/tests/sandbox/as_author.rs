//! Who may run `labctl try` without `--vm`, and a lab without a setup.

use super::*;

/// Not root, and no `--vm`: refused before anything starts (the lab
/// need not even be readable by that user).
#[test]
fn a_normal_user_is_told_to_use_root_or_a_vm() {
    let _shells = sandboxed();
    require_root("running labctl as another user");
    let lab = lab_folder(
        "labctl-try-user",
        "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
    );
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(labctl_bin())
        .args(try_args(&lab.path, &[]))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("hint: run as root, or use `--vm IMAGE`"),
        "{err}"
    );
    assert!(!err.contains("staged"), "nothing started: {err}");
}

/// A lab without a setup script never claims one is running; `--check`
/// picks the checks.
#[test]
fn no_setup_script_and_one_check() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let lab = lab_folder(
        "labctl-try-nosetup",
        "name = \"bare\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"b\"\nrun = \"false\"\n",
    );
    let out = try_lab(&lab.path, &["--check", "a", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(check_outcomes(&v), [("a", true)]);
    let err = stderr(&out);
    assert!(
        err.contains("no setup script: waiting for the agent to be ready"),
        "{err}"
    );
    // Ready from the first answer: no state claims a setup under way.
    assert!(!err.contains("setting_up"), "{err}");
    assert!(!err.contains("setup script is running"), "{err}");
}
