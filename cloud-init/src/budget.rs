//! Where the bytes of the user-data go, against the 1 MiB Secret limit.
//!
//! What is counted: the user-data itself, i.e. the *decoded* value of the
//! Secret's `data.userdata`. That is what the API server sums
//! (`ValidateSecret`: `len(value)` over `data`, rejected when it exceeds
//! `MaxSecretSize` = 1 MiB), not the base64 text in the manifest, which is a
//! third larger. Of it, only the `#cloud-config` part is YAML-parsed by
//! cloud-init on every boot, so that figure is the one that costs boot time;
//! the rest is written out once as a script.

use std::fmt;

/// Kubernetes' `MaxSecretSize`: the sum of a Secret's decoded data values.
pub const SECRET_LIMIT: usize = 1024 * 1024;

/// One accountable piece of the user-data (a file the installer writes, the
/// cloud-config part, or the rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// What it is: a guest path such as `/usr/local/bin/lab-agent`, the
    /// cloud-config, or the rest.
    pub name: String,
    /// Bytes of user-data text it takes (encoding and framing included).
    pub bytes: usize,
}

/// How the user-data's bytes split up. `agent + lab_files + rest == total`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The payload's architecture: its agent is that machine's, and the two
    /// agents differ in size.
    pub arch: crate::Arch,
    /// The agent's block in the installer (gzip, base64, framing included).
    pub agent: usize,
    /// The lab's files and its setup script.
    pub lab_files: usize,
    /// Everything else: MIME headers, the cloud-config part (token, unit,
    /// autologin, commands), the installer's own code.
    pub rest: usize,
    /// The `#cloud-config` part: what cloud-init YAML-parses on every boot.
    pub cloud_config: usize,
    /// The whole user-data as a MIME message.
    pub total: usize,
    /// The message gzip'd, when that is what the Secret holds
    /// (`--agent-from disk`): then this, not `total`, is what Kubernetes
    /// counts against [`SECRET_LIMIT`].
    pub gzipped: Option<usize>,
    /// Every entry, largest first, for "what is large" in errors.
    pub parts: Vec<Part>,
}

impl Budget {
    pub(crate) fn new(
        arch: crate::Arch,
        agent: usize,
        lab_files: usize,
        cloud_config: usize,
        total: usize,
        mut parts: Vec<Part>,
    ) -> Self {
        let rest = total - agent - lab_files;
        parts.push(Part {
            name: "rest (MIME headers, installer code)".into(),
            bytes: parts.iter().fold(total, |left, p| left - p.bytes),
        });
        // Largest first; equal sizes keep their document order.
        parts.sort_by_key(|p| std::cmp::Reverse(p.bytes));
        Budget {
            arch,
            agent,
            lab_files,
            rest,
            cloud_config,
            total,
            gzipped: None,
            parts,
        }
    }

    /// What the Secret holds: [`Budget::gzipped`], else [`Budget::total`].
    pub fn secret_bytes(&self) -> usize {
        self.gzipped.unwrap_or(self.total)
    }

    /// [`Budget::secret_bytes`] as a percentage of [`SECRET_LIMIT`].
    pub fn percent_of_limit(&self) -> f64 {
        self.secret_bytes() as f64 * 100.0 / SECRET_LIMIT as f64
    }

    /// Bytes over the limit, if any.
    pub fn excess(&self) -> Option<usize> {
        self.secret_bytes()
            .checked_sub(SECRET_LIMIT)
            .filter(|&over| over > 0)
    }
}

/// The one-line summary `labctl secret` prints on stderr, e.g.
/// `budget (amd64): agent 301.2 KiB + lab files 1.1 KiB + rest 2.0 KiB = 304.3 KiB (29.7% of the 1 MiB Secret limit); cloud-init parses 1.8 KiB of it as YAML`.
impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (agent, gzipped) = match self.gzipped {
            None => ("agent", String::new()),
            Some(gz) => ("agent from its disk", format!(", {gz} bytes gzip'd")),
        };
        write!(
            f,
            "budget ({}): {agent} {} + lab files {} + rest {} = {}{gzipped} ({:.1}% of the 1 MiB \
             Secret limit); cloud-init parses {} of it as YAML",
            self.arch,
            Kib(self.agent),
            Kib(self.lab_files),
            Kib(self.rest),
            Kib(self.total),
            self.percent_of_limit(),
            Kib(self.cloud_config),
        )
    }
}

/// A byte count shown as KiB with one decimal.
#[derive(Debug, Clone, Copy)]
pub struct Kib(pub usize);

impl fmt::Display for Kib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} KiB", self.0 as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, bytes: usize) -> Part {
        Part {
            name: name.into(),
            bytes,
        }
    }

    #[test]
    fn rest_is_what_the_entries_do_not_explain() {
        let b = Budget::new(
            crate::Arch::Arm64,
            600,
            300,
            50,
            1000,
            vec![part("agent", 600), part("a", 100), part("b", 200)],
        );
        assert_eq!(b.rest, 100);
        let names: Vec<_> = b.parts.iter().map(|p| (p.name.as_str(), p.bytes)).collect();
        assert_eq!(
            names,
            [
                ("agent", 600),
                ("b", 200),
                ("a", 100),
                ("rest (MIME headers, installer code)", 100)
            ]
        );
        assert_eq!(b.excess(), None);
        assert_eq!(
            b.to_string(),
            "budget (arm64): agent 0.6 KiB + lab files 0.3 KiB + rest 0.1 KiB = 1.0 KiB (0.1% of the 1 MiB \
             Secret limit); cloud-init parses 0.0 KiB of it as YAML"
        );
    }

    #[test]
    fn exactly_the_limit_is_allowed() {
        let at = Budget::new(crate::Arch::Amd64, 0, 0, 0, SECRET_LIMIT, vec![]);
        assert_eq!(at.excess(), None);
        assert_eq!(at.percent_of_limit(), 100.0);
        let over = Budget::new(crate::Arch::Amd64, 0, 0, 0, SECRET_LIMIT + 7, vec![]);
        assert_eq!(over.excess(), Some(7));
    }
}
