//! The sandbox runs no systemd (its PID 1 is `labctl`'s init) and has no
//! network but loopback: a lab that needs either is told to use `--vm`,
//! instead of failing without a word of why. And a check that exits 127
//! ran a command the guest does not have: said as such, not left to read
//! as the student's failure.

use lab_agent_client::{CheckResult, CheckStatus, GradeReport};
use lab_agent_proto::lab::Lab;
use lab_agent_proto::text::escape;

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

/// The hints a check that ran and failed calls for: systemd's and the
/// network's where they are missing (`sandbox`: only the sandbox lacks
/// them), and a command missing in the guest (exit 127), named when its
/// shell said which.
pub fn check_hints(r: &CheckResult, sandbox: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if r.status != CheckStatus::Failed {
        return out;
    }
    if sandbox {
        for output in [&r.stdout, &r.stderr] {
            out.extend(hints(output).into_iter().map(str::to_owned));
        }
    }
    if r.exit_code == Some(127) {
        let name =
            missing_command(&r.stderr).map_or(String::new(), |n| format!(" (`{}`?)", escape(n)));
        out.push(format!(
            "hint: a command of this check is missing in the guest{name}: exit 127 is the \
             shell's \"command not found\"; install it in the setup, or check with what the \
             guest has"
        ));
    }
    out.dedup();
    out
}

/// Every check's [`check_hints`] in a report, each once.
pub fn report_hints(report: &GradeReport, sandbox: bool) -> Vec<String> {
    let mut all: Vec<String> = report
        .checks
        .iter()
        .flat_map(|c| check_hints(c, sandbox))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// The command bash (or sh) said it could not find:
/// `bash: line 1: curl: command not found`, `sh: 1: curl: not found`.
fn missing_command(stderr: &str) -> Option<&str> {
    stderr.lines().find_map(|line| {
        let rest = line
            .strip_suffix(": command not found")
            .or_else(|| line.strip_suffix(": not found"))
            .or_else(|| line.strip_suffix(": No such file or directory"))?;
        rest.rsplit(": ").next().filter(|n| !n.is_empty())
    })
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

    #[test]
    fn exit_127_names_the_missing_command() {
        let mut r = CheckResult::error("c", 1, "x");
        (r.status, r.error, r.exit_code) = (CheckStatus::Failed, None, Some(127));
        r.stderr = "bash: line 1: curl: command not found\n".into();
        let hints = check_hints(&r, false);
        assert_eq!(hints.len(), 1, "{hints:?}");
        assert!(
            hints[0].starts_with("hint: a command of this check is missing in the guest (`curl`?)"),
            "{hints:?}"
        );
        assert_eq!(missing_command("sh: 1: jq: not found"), Some("jq"));
        r.exit_code = Some(1);
        assert!(check_hints(&r, false).is_empty());
        r.stderr = "System has not been booted with systemd".into();
        assert_eq!(check_hints(&r, true), [HINT]);
        assert!(check_hints(&r, false).is_empty(), "a VM has systemd");
    }
}
