//! `profile`: which startup files a command's shell reads. The issue's
//! attack: a student puts `trap "exit 0" EXIT` and a `systemctl` function
//! in their own `~/.bash_profile`, and every check run as them passes.
//! Under `login` (the default, a real login shell) that works — a login
//! shell reads the user's files, which is documented; under `system` it
//! does not: the system's profile only.

use crate::support::*;
use serde_json::json;

/// A user made for one test, known to its agent alone: the machine's
/// `/etc/passwd` and `/etc/group` with the user (and a group of its own)
/// added, in the test's temp dir, which [`TestUser::agent`] binds over the
/// real ones in the agent's mount namespace. Nothing of the machine's
/// accounts is written, even when the test fails or is killed.
struct TestUser {
    name: String,
    home: TempDir,
    etc: TempDir,
}

impl TestUser {
    fn new(tag: &str) -> TestUser {
        require_root("binding a user's accounts into the agent's mount namespace");
        let name = format!("lat{}{tag}", std::process::id() % 100_000);
        let home = TempDir::new(&format!("home-{tag}"));
        let etc = TempDir::new(&format!("etc-{tag}"));
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        let group = std::fs::read_to_string("/etc/group").unwrap();
        // An id neither file uses (as uid or gid), for both.
        let used = |text: &str, field: usize| -> Vec<u32> {
            text.lines()
                .filter_map(|l| l.split(':').nth(field)?.parse().ok())
                .collect()
        };
        let taken: Vec<u32> = [used(&passwd, 2), used(&passwd, 3), used(&group, 2)].concat();
        let id = (60_000..65_000).find(|i| !taken.contains(i)).unwrap();
        let home_dir = home.path().display();
        write_file(
            &etc.join("passwd"),
            &format!("{passwd}{name}:x:{id}:{id}::{home_dir}:/bin/bash\n"),
            0o644,
        );
        write_file(
            &etc.join("group"),
            &format!("{group}{name}:x:{id}:\n"),
            0o644,
        );
        TestUser { name, home, etc }
    }

    /// A local agent that knows this user.
    fn agent(&self, tag: &str) -> Agent {
        Agent::builder(tag)
            .no_cloud_init()
            .accounts(&self.etc.join("passwd"), &self.etc.join("group"))
            .start()
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
    let agent = user.agent("profiles");
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
    // The log line says which profile ran (written just after the answer).
    eventually(5, "the line of the `system` exec", || {
        agent.log().contains("profile=system").then_some(())
    });
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
