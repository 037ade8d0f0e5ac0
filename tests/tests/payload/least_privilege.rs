//! Least privilege in the guest, read off a real delivery of the rendered
//! payload (`support::deliver`: cloud-init's part handlers, `bootcmd`,
//! `write_files` and the installer, as root in an overlay chroot): the
//! token file is root's alone (0600, in a 0700 directory made before
//! `write_files` runs), the state dir is not writable by others, nothing
//! written is world-writable or setuid, every file and folder made is
//! root's, and the token appears nowhere but in its file: not in a command
//! line, not in the installer, not in the unit's environment.
//! (The agent's own files, `setup.log` 0600 and a state dir it keeps
//! unwritable by others, are checked in `agent/tests/agent/privilege.rs`.)

use crate::support::{TOKEN, deliver, labs, mode, secret, spec_for, user_data};
use lab_agent_cloudinit::Format;
use lab_agent_cloudinit::mime::INSTALLER_NAME;
use lab_agent_proto::guest::{CONFIG_DIR, SETUP_SCRIPT_PATH, STATE_DIR, TOKEN_PATH, UNIT_PATH};
use std::os::unix::fs::MetadataExt;

#[test]
fn the_rendered_payload_gives_the_token_and_state_to_root_alone() {
    for lab in labs() {
        let spec = spec_for(&lab);
        let ud = user_data(&spec);
        let d = deliver(&secret(&ud, Format::Yaml));
        let label = lab.display();

        // The directories bootcmd makes before write_files: root's only.
        for dir in [CONFIG_DIR, STATE_DIR] {
            let m = mode(&d.file(dir));
            assert_eq!(
                m & 0o077,
                0,
                "{label}: `{dir}` is {m:04o}: it must be root's alone"
            );
        }
        let (_, token_mode) = d.read(TOKEN_PATH);
        assert_eq!(token_mode, 0o600, "{label}: token mode {token_mode:04o}");
        assert!(TOKEN_PATH.starts_with(CONFIG_DIR));
        if spec.setup.is_some() {
            let (_, m) = d.read(SETUP_SCRIPT_PATH);
            assert_eq!(m & 0o077, 0, "{label}: the setup script is {m:04o}");
        }

        // Every file written, and every folder on the way to it.
        for path in d.written() {
            let m = mode(&d.file(&path));
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
            let mut at = d.file(&path);
            while at.pop() && at.starts_with(d.file("/")) && at != d.file("/") {
                let meta = std::fs::metadata(&at).unwrap();
                assert_eq!(
                    (meta.uid(), meta.gid()),
                    (0, 0),
                    "{label}: `{}` is not root's",
                    at.display()
                );
                assert_eq!(
                    meta.mode() & 0o022,
                    0,
                    "{label}: `{}` is writable by others",
                    at.display()
                );
            }
        }

        // The token is in its file and nowhere else: not in any command
        // (argv is world-readable in /proc), not in the installer, not in
        // the unit.
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
        let installer = d.file(&format!(
            "/var/lib/cloud/scripts/per-instance/{INSTALLER_NAME}"
        ));
        let installer = std::fs::read_to_string(&installer).unwrap();
        assert!(installer.starts_with("#!/bin/sh\n"));
        assert!(
            !installer.contains(TOKEN),
            "{label}: token in the installer"
        );
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
