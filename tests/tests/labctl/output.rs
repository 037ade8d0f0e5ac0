//! What `labctl` prints for a terminal, and for a reader that goes away.

use super::*;

/// Runs `labctl lint` on a broken lab under a pseudo-terminal (`script`)
/// with `env`; whether its output has colour codes.
fn coloured(lab: &TempDir, env: &[(&str, &str)]) -> bool {
    let cmd = format!("{} lint {}", labctl_bin().display(), lab.path.display());
    let mut c = Command::new("script");
    c.args(["-qec", &cmd, "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run script(1)");
    let text = stdout(&out);
    assert!(text.contains("error"), "{}", describe(&out));
    text.contains("\x1b[")
}

#[test]
fn colour_follows_no_color_and_term() {
    let lab = lab_folder("labctl-colour", "name = \"x\"\n[setup]\ntimeout_secs = 0\n");
    assert!(coloured(&lab, &[]), "a terminal gets colour");
    assert!(
        coloured(&lab, &[("NO_COLOR", "")]),
        "an empty NO_COLOR does not turn it off"
    );
    assert!(!coloured(&lab, &[("NO_COLOR", "1")]));
    assert!(!coloured(&lab, &[("TERM", "dumb")]));
}

/// `labctl secret … | head`: the reader leaves; labctl ends quietly.
#[test]
fn a_closed_stdout_is_not_an_error() {
    let lab = lab_folder("labctl-pipe", "name = \"pipe\"\n");
    let token_out = lab.join("token");
    let mut child = Command::new(labctl_bin())
        .args(["secret", lab.path.to_str().unwrap(), "--name", "pipe"])
        .arg("--token-out")
        .arg(&token_out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(!stderr(&out).contains("error"), "{}", describe(&out));
}
