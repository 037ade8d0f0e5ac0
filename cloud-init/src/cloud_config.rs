//! The `#cloud-config` part: small and of fixed size whatever the lab
//! (token, unit, serial autologin, commands), because cloud-init YAML-parses
//! it about ten times on every boot in pure Python.
//!
//! What cloud-init does with it, in its own order (observed on Debian 12's
//! cloud-init 22.4 by the VM tests, `tests/vm/README.md`):
//! 1. network stage: `bootcmd` (every boot) makes the private directories,
//!    then `write_files` writes the token, the unit and the autologin drop-in;
//! 2. final stage: the installer part ([`crate::installer`]) has put the agent
//!    and the lab in place; `runcmd` reloads systemd, enables and starts the
//!    agent without waiting for it, and runs the setup script through
//!    `lab-agent setup`, which records its outcome for `/v1/ready`.
//!
//! After a reboot only `bootcmd` runs again; the agent comes back as an
//! enabled unit and the files are already on disk.

use crate::spec::PayloadSpec;
use crate::unit::{AUTOLOGIN_DROPIN, guest_unit};
use crate::yaml::{quoted, quoted_lines};
use lab_agent_proto::guest::{
    AGENT_PATH, CONFIG_DIR, SETUP_SCRIPT_PATH, STATE_DIR, TOKEN_PATH, UNIT_PATH,
    autologin_dropin_path,
};
use lab_agent_proto::lab::GUEST_LAB_DIR;

/// Continuation lines of a multi-line `content:` scalar.
const CONTENT_INDENT: usize = 4;

pub fn render(spec: &PayloadSpec) -> String {
    let mut out = String::with_capacity(4096);
    out.push_str("#cloud-config\n");
    out.push_str(&format!(
        "# lab-agent payload for lab {}; the agent and lab files are in part 2.\n\
         # The backend waits {} s for ready ([readiness] timeout_secs).\n",
        spec.lab_name, spec.readiness.timeout_secs
    ));

    // bootcmd runs before write_files, on every boot. cloud-init creates a
    // file with the default umask and chmods it afterwards, and creates
    // missing parents 0755: making the private directories 0700 first means
    // the token is never readable by others, not even for a moment, and the
    // agent's state (setup log) is root's only. `/opt/lab` must exist for
    // `--lab-dir` even when the lab ships no files.
    out.push_str("bootcmd:\n");
    command(
        &mut out,
        &["install", "-d", "-m", "0700", CONFIG_DIR, STATE_DIR],
    );
    command(&mut out, &["mkdir", "-p", GUEST_LAB_DIR]);

    out.push_str("write_files:\n");
    let mut token = spec.token.clone();
    token.push('\n');
    entry(&mut out, TOKEN_PATH, 0o600, &token);
    entry(&mut out, UNIT_PATH, 0o644, &guest_unit(spec.channel));
    // The drop-in goes to the one console the platform attaches to on this
    // architecture (a template-wide one would also log root in on any other
    // serial port a VM has).
    let console = spec.arch.serial_console();
    if spec.serial_autologin {
        entry(
            &mut out,
            &autologin_dropin_path(console),
            0o644,
            AUTOLOGIN_DROPIN,
        );
    }

    out.push_str("runcmd:\n");
    command(&mut out, &["systemctl", "daemon-reload"]);
    // --no-block: runcmd runs inside cloud-final.service; waiting here for a
    // job is how boots deadlock. The agent starts now and answers
    // `setting_up` while the setup script below runs.
    command(
        &mut out,
        &[
            "systemctl",
            "enable",
            "--now",
            "--no-block",
            "lab-agent.service",
        ],
    );
    if spec.serial_autologin {
        // The getty on the console started (after systemd-user-sessions)
        // from the unit as systemd loaded it at boot, before write_files
        // created the drop-in; the daemon-reload above makes systemd read
        // the drop-in, and this restart applies it on the first boot too.
        // Later boots read it from the start. --no-block for the same
        // reason as above.
        let getty = format!("serial-getty@{console}.service");
        command(&mut out, &["systemctl", "restart", "--no-block", &getty]);
    }
    let timeout;
    let mut setup = vec![AGENT_PATH, "setup"];
    if let Some(script) = &spec.setup {
        timeout = script.timeout_secs.to_string();
        setup.extend(["--script", SETUP_SCRIPT_PATH, "--timeout", &timeout]);
    }
    // Checked even without a script: a disk too small for the lab is too
    // small for the student's work in it as well. What a smaller one does
    // (`warn`: ready, flagged, the student's banner; `fail`) is said
    // always, never left to the agent's default.
    let min_root;
    if let Some(bytes) = spec.readiness.min_root_bytes {
        min_root = bytes.to_string();
        setup.extend([
            "--min-root-bytes",
            &min_root,
            "--on-small-root",
            spec.readiness.on_small_root.as_str(),
        ]);
    }
    // Run even without a script: it records "succeeded", and a cloud-init
    // that finished without a setup record means "failed" to the agent. It
    // also reports an installer failure as a failed setup.
    setup.extend(["--lab-dir", GUEST_LAB_DIR]);
    command(&mut out, &setup);
    out
}

/// Appends one `write_files` entry owned by root, its content as text.
fn entry(out: &mut String, path: &str, mode: u32, content: &str) {
    out.push_str("- path: ");
    quoted(out, path);
    // Quoted octal: cloud-init's schema rejects integers, and YAML 1.1
    // would read an unquoted 0644 as the integer 420 anyway.
    out.push_str(&format!(
        "\n  owner: \"root:root\"\n  permissions: \"0{mode:03o}\"\n  content: "
    ));
    quoted_lines(out, content, CONTENT_INDENT);
    out.push('\n');
}

/// Appends one command as a flow sequence of quoted words: cloud-init
/// single-quotes each word for the shell, so nothing in it is interpreted.
fn command(out: &mut String, argv: &[&str]) {
    out.push_str("- [");
    for (i, word) in argv.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        quoted(out, word);
    }
    out.push_str("]\n");
}
