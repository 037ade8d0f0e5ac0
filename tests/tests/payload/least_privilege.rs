//! Least privilege in the guest, read off the rendered payload as cloud-init
//! parses it: the token file is root's alone (0600, in a 0700 directory
//! made before `write_files` runs), the state dir is not writable by others,
//! nothing written is world-writable, and the token appears nowhere but in
//! its file: not in a command line, not in the unit's environment.
//! (The agent's own files, `setup.log` 0600 and a state dir it keeps
//! unwritable by others, are checked in `agent/tests/agent/privilege.rs`.)

use crate::support::{TOKEN, TempDir, decode_with_cloud_init, labs, secret, spec_for, user_data};
use lab_agent_cloudinit::Format;
use lab_agent_cloudinit::payload::{
    CONFIG_DIR, SETUP_SCRIPT_PATH, STATE_DIR, TOKEN_PATH, UNIT_PATH,
};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Runs the payload's `bootcmd` with every absolute path moved under
/// `root`, as the guest would run it before `write_files`.
fn run_bootcmd(bootcmd: &serde_json::Value, root: &Path) {
    for cmd in bootcmd.as_array().unwrap() {
        let argv: Vec<String> = cmd
            .as_array()
            .unwrap_or_else(|| panic!("bootcmd entries are argv lists: {cmd}"))
            .iter()
            .map(|a| {
                let a = a.as_str().unwrap();
                if a.starts_with('/') {
                    root.join(a.trim_start_matches('/')).display().to_string()
                } else {
                    a.to_owned()
                }
            })
            .collect();
        let ok = Command::new(&argv[0])
            .args(&argv[1..])
            .status()
            .unwrap()
            .success();
        assert!(ok, "bootcmd {argv:?} failed");
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("`{}`: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn the_rendered_payload_gives_the_token_and_state_to_root_alone() {
    for lab in labs() {
        let spec = spec_for(&lab);
        let ud = user_data(&spec);
        let d = decode_with_cloud_init(&secret(&ud, Format::Yaml));
        let label = lab.display();

        // The directories bootcmd makes before write_files: root's only.
        let root = TempDir::new("bootcmd");
        run_bootcmd(&d.report["bootcmd"], root.path());
        for dir in [CONFIG_DIR, STATE_DIR] {
            let m = mode(&root.path().join(dir.trim_start_matches('/')));
            assert_eq!(
                m & 0o077,
                0,
                "{label}: `{dir}` is {m:04o}: it must be root's alone"
            );
        }

        // What write_files wrote.
        let (_, token_mode) = d.read(TOKEN_PATH);
        assert_eq!(token_mode, 0o600, "{label}: token mode {token_mode:04o}");
        assert!(TOKEN_PATH.starts_with(CONFIG_DIR));
        if spec.setup.is_some() {
            let (_, m) = d.read(SETUP_SCRIPT_PATH);
            assert_eq!(m & 0o077, 0, "{label}: the setup script is {m:04o}");
        }
        for file in d.report["files"].as_array().unwrap() {
            let path = file["path"].as_str().unwrap();
            let m = u32::from_str_radix(
                file["permissions"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("0o"),
                8,
            )
            .unwrap();
            assert_eq!(
                m & 0o002,
                0,
                "{label}: `{path}` is world-writable ({m:04o})"
            );
            assert_eq!(
                m & 0o6000,
                0,
                "{label}: `{path}` is setuid/setgid ({m:04o})"
            );
            assert_eq!(file["owner"], "root:root", "{label}: {file}");
        }

        // The token is in its file and nowhere else: not in any command
        // (argv is world-readable in /proc), not in the unit.
        assert_eq!(
            ud.as_str().matches(TOKEN).count(),
            1,
            "{label}: the token appears more than once in the user-data"
        );
        for key in ["bootcmd", "runcmd", "runcmd_script"] {
            assert!(
                !d.report[key].to_string().contains(TOKEN),
                "{label}: token in {key}"
            );
        }
        let (unit, _) = d.read(UNIT_PATH);
        let unit = String::from_utf8(unit).unwrap();
        assert!(!unit.contains(TOKEN));
        assert!(
            unit.lines()
                .filter(|l| l.starts_with("Environment="))
                .all(|l| l == "Environment=RUST_LOG=info"),
            "{label}: the unit passes something into the agent's environment:\n{unit}"
        );
    }
}
