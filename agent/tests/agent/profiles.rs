//! `profile`: which startup files a command's shell reads. The issue's
//! attack: a student puts `trap "exit 0" EXIT` and a `systemctl` function
//! in their own `~/.bash_profile`, and every check run as them passes.
//! Under `login` (the default, a real login shell) that works — a login
//! shell reads the user's files, which is documented; under `system` it
//! does not: the system's profile only.

use crate::support::*;
use serde_json::json;
use std::process::Command;

/// A user made for one test, with a home in a temp dir; removed on drop.
struct TestUser {
    name: String,
    home: TempDir,
}

impl TestUser {
    fn new(tag: &str) -> TestUser {
        require_root("creating a user");
        let name = format!("lat{}{tag}", std::process::id() % 100_000);
        let home = TempDir::new(&format!("home-{tag}"));
        let ok = Command::new("useradd")
            .args(["--no-create-home", "--shell", "/bin/bash", "--home-dir"])
            .arg(home.path())
            .arg(&name)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "useradd {name} failed");
        TestUser { name, home }
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

#[test]
fn a_users_dotfiles_forge_results_under_login_but_not_under_system() {
    let user = TestUser::new("p");
    write_file(
        &user.home.join(".bash_profile"),
        "trap \"exit 0\" EXIT\nsystemctl() { echo active; }\nexport FROM_DOTFILE=yes\n",
        0o644,
    );
    write_file(
        &user.home.join(".profile"),
        "export FROM_DOTFILE=yes\n",
        0o644,
    );
    write_file(
        &user.home.join(".bashrc"),
        "export FROM_DOTFILE=yes\n",
        0o644,
    );
    let agent = Agent::local("profiles");
    let run = |command: &str, profile: Option<&str>| {
        let mut body = json!({"command": command, "user": user.name});
        if let Some(p) = profile {
            body["profile"] = json!(p);
        }
        agent.run(body)
    };
    // The attack works against a login shell: that is what `login` means.
    for cmd in ["false", "exit 7", "systemctl is-active nonexistent-unit"] {
        assert_eq!(run(cmd, None)["exit_code"], 0, "{cmd} under login");
    }
    // Not under `system` or `none`: the command's own status.
    for profile in ["system", "none"] {
        assert_eq!(run("false", Some(profile))["exit_code"], 1, "{profile}");
        assert_eq!(run("exit 7", Some(profile))["exit_code"], 7, "{profile}");
        let out = run(
            "type systemctl >/dev/null 2>&1 && systemctl is-active x",
            Some(profile),
        );
        assert_ne!(out["stdout"], "active\n", "{profile}: {out}");
        let out = run("echo \"${FROM_DOTFILE:-no}\"", Some(profile));
        assert_eq!(out["stdout"], "no\n", "{profile}: {out}");
    }
    // `system` still gives the login environment from the system's files
    // (/etc/profile sets PATH; `none` keeps the agent's clean one), and
    // the same identity.
    let sys = run("echo \"$PATH\"; id -un; echo \"$HOME\"", Some("system"));
    let lines: Vec<&str> = sys["stdout"].as_str().unwrap().lines().collect();
    assert_eq!(lines[1], user.name);
    assert_eq!(lines[2], user.home.path().to_str().unwrap());
    assert!(lines[0].contains("/usr/bin"), "{sys}");
    // The log line says which profile ran.
    assert!(agent.log().contains("profile=system"), "{}", agent.log());
}

#[test]
fn an_unknown_profile_is_a_400_that_names_the_choices() {
    let agent = Agent::local("profiles-bad");
    let r = agent.exec(json!({"command": "true", "profile": "user"}));
    let msg = r.error(400, "bad_request");
    assert!(
        msg.contains("login") && msg.contains("system") && msg.contains("none"),
        "{msg}"
    );
}
