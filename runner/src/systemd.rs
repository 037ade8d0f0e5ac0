//! The sandbox runs no systemd (its PID 1 is `labctl`'s init) and has no
//! network but loopback: a lab that needs either is told to use `--vm`,
//! instead of failing without a word of why.

use lab_agent_proto::lab::Lab;

/// What `labctl try` prints when systemd's absence shows in an output.
pub(crate) const HINT: &str = "hint: this needs systemd, which the sandbox of `labctl try` does not run: \
                        try the lab in a VM with `--vm IMAGE` (see docs/lab-toml.md, \
                        \"What the sandbox cannot hold\")";

/// What systemctl, journalctl and `service` say without a running systemd.
const SIGNS: [&str; 4] = [
    "System has not been booted with systemd",
    "Failed to connect to bus",
    "Failed to connect to system scope bus",
    "Running in chroot, ignoring",
];

/// What `labctl try` prints when the lack of a network shows in an output.
pub(crate) const NETWORK_HINT: &str = "hint: this needs the network, and the sandbox of `labctl try` \
                                has only loopback: try the lab in a VM with `--vm IMAGE`, or on \
                                this machine itself with `--host`";

/// What apt, curl, getent and the resolver say without a network.
const NETWORK_SIGNS: [&str; 5] = [
    "Temporary failure resolving",
    "Temporary failure in name resolution",
    "Could not resolve host",
    "Network is unreachable",
    "Name or service not known",
];

/// Whether an output shows that systemd was needed.
pub(crate) fn needed(output: &str) -> bool {
    SIGNS.iter().any(|s| output.contains(s))
}

/// The hints an output calls for (systemd, the network), one a line.
pub fn hints(output: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if needed(output) {
        out.push(HINT);
    }
    if NETWORK_SIGNS.iter().any(|s| output.contains(s)) {
        out.push(NETWORK_HINT);
    }
    out
}

/// Which part of the lab calls `systemctl` (or `journalctl`), if any: the
/// setup script or a check, named for the note printed before the try.
pub fn mentioned(lab: &Lab) -> Option<String> {
    let calls = |text: &str| text.contains("systemctl") || text.contains("journalctl");
    if let Some(path) = lab.setup_script_path() {
        if std::fs::read_to_string(&path).is_ok_and(|t| calls(&t)) {
            return Some(format!(
                "the setup script `{}` calls",
                path.file_name().unwrap_or_default().to_string_lossy()
            ));
        }
    }
    lab.checks
        .iter()
        .find(|c| calls(&c.run))
        .map(|c| format!("the check \"{}\" calls", c.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemctl_without_systemd_is_recognised() {
        assert!(needed(
            "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
        ));
        assert!(!needed("nginx: [emerg] bind() to 0.0.0.0:80 failed"));
        assert_eq!(
            hints(
                "E: Failed to fetch http://deb.debian.org/  Temporary failure resolving 'deb.debian.org'"
            ),
            [NETWORK_HINT]
        );
    }
}
