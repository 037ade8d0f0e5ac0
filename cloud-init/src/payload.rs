//! The user-data: a pure function from a [`PayloadSpec`] to a MIME
//! multipart message of two parts.
//!
//! 1. `#cloud-config` ([`crate::cloud_config`]): token, unit, serial
//!    autologin, `bootcmd` and `runcmd`. A few KiB whatever the lab, because
//!    cloud-init YAML-parses it (pure-Python PyYAML) about ten times on every
//!    boot.
//! 2. the installer ([`crate::installer`]): a `sh` script with the agent, the
//!    lab's files and the setup script, compressed and base64-encoded inside.
//!    cloud-init runs it once per instance before `runcmd`, and never parses
//!    it as YAML: the payload's size no longer costs boot time.
//!
//! (Before, everything was one `#cloud-config` with the agent in
//! `write_files`: its 640 KiB of base64 cost a TCG guest ~55 s on every boot.)

use crate::budget::{Budget, Part};
use crate::error::Error;
use crate::mime;
use crate::{cloud_config, installer};
use lab_agent_proto::lab::{LabFile, MAX_TIMEOUT_SECS};
use std::collections::BTreeSet;
use std::fmt;

// The guest contract is `lab-agent-proto`'s; re-exported here because the
// payload is where each of these paths is written.
pub use lab_agent_proto::guest::{
    AGENT_PATH, AUTOLOGIN_DROPIN_PATH, CONFIG_DIR, INSTALL_ERROR_PATH, MIN_TOKEN_LEN,
    SETUP_SCRIPT_PATH, STATE_DIR, TOKEN_PATH, UNIT_PATH,
};

/// The systemd unit, one copy for the whole project: `packaging/` owns it.
pub const UNIT: &str = include_str!("../../packaging/lab-agent.service");

/// The unit as a lab VM gets it: [`UNIT`]'s settings, its comments (the
/// why of each setting, 1.2 KiB) replaced by a pointer to them. The unit
/// rides in the cloud-config, which cloud-init parses on every boot.
pub fn guest_unit() -> String {
    let mut out = String::from(
        "# lab-agent: readiness and grading endpoint of a lab VM, written by cloud-init.\n\
         # Why each setting: packaging/lab-agent.service in lab-agent's source.\n",
    );
    for line in UNIT.lines().filter(|l| !l.starts_with('#')) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Replaces the getty's command line so that it logs root in at once. The
/// first, empty `ExecStart=` clears the packaged one (systemd appends
/// otherwise). The rest is Debian 12's own `serial-getty@.service` line plus
/// `-f` in the login options and `--autologin root`: with `-o`, agetty passes
/// exactly those options to login(1), so `-f` (no password) must be there.
/// `\\u` is systemd's escape for the `\u` agetty replaces with the user name.
pub const AUTOLOGIN_DROPIN: &str = "\
# lab-agent payload: no passwords in lab VMs; the web terminal is this console.
[Service]
ExecStart=
ExecStart=-/sbin/agetty -o '-p -f -- \\\\u' --autologin root --keep-baud 115200,57600,38400,9600 - $TERM
";

/// Everything that goes into one lab VM's user-data. Files are read by the
/// caller (`labctl secret`); this crate only renders.
#[derive(Clone)]
pub struct PayloadSpec {
    /// The lab's name, as in `lab.toml` (written into a comment).
    pub lab_name: String,
    /// The static `lab-agent` binary.
    pub agent: Vec<u8>,
    /// The per-VM token, at least [`MIN_TOKEN_LEN`] visible ASCII characters.
    pub token: String,
    /// Files for `/opt/lab/`, paths relative to it.
    pub files: Vec<LabFile>,
    /// The lab's setup script, if it has one.
    pub setup: Option<SetupScript>,
    /// Root autologin on the serial console (`ttyS0`); on by default.
    pub serial_autologin: bool,
}

/// The setup script and how long `lab-agent setup` lets it run.
#[derive(Clone)]
pub struct SetupScript {
    pub contents: Vec<u8>,
    pub timeout_secs: u64,
}

impl PayloadSpec {
    /// A spec with no lab files, no setup script, and serial autologin on.
    pub fn new(lab_name: impl Into<String>, agent: Vec<u8>, token: impl Into<String>) -> Self {
        PayloadSpec {
            lab_name: lab_name.into(),
            agent,
            token: token.into(),
            files: Vec::new(),
            setup: None,
            serial_autologin: true,
        }
    }
}

// Never print the token or a megabyte of agent.
impl fmt::Debug for PayloadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadSpec")
            .field("lab_name", &self.lab_name)
            .field("agent_len", &self.agent.len())
            .field("token", &"<redacted>")
            .field("files", &self.files)
            .field("setup", &self.setup)
            .field("serial_autologin", &self.serial_autologin)
            .finish()
    }
}

impl fmt::Debug for SetupScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetupScript")
            .field("len", &self.contents.len())
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

/// Rendered user-data and where its bytes went.
#[derive(Debug, Clone)]
pub struct UserData {
    text: String,
    /// Where the `#cloud-config` part's body is in `text`.
    cloud_config: std::ops::Range<usize>,
    budget: Budget,
}

impl UserData {
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.text.as_bytes()
    }

    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The `#cloud-config` part alone: the only YAML cloud-init parses.
    pub fn cloud_config(&self) -> &str {
        &self.text[self.cloud_config.clone()]
    }

    pub fn into_string(self) -> String {
        self.text
    }
}

/// Renders the user-data for `spec`: the MIME message described above.
///
/// Validates the token, the lab name, every lab file's path and mode, and the
/// setup timeout. The size budget is *not* enforced here (a NoCloud seed has
/// no 1 MiB limit); [`crate::render_secret`] enforces it.
pub fn render_user_data(spec: &PayloadSpec) -> Result<UserData, Error> {
    check_token(&spec.token)?;
    check_lab_name(&spec.lab_name)?;
    check_lab_files(&spec.files)?;
    if let Some(setup) = &spec.setup {
        if !(1..=MAX_TIMEOUT_SECS).contains(&setup.timeout_secs) {
            return Err(Error::SetupTimeout {
                secs: setup.timeout_secs,
            });
        }
    }

    let config = cloud_config::render(spec);
    let install = installer::render(spec);
    let (text, ranges) = mime::multipart(&[
        mime::Part {
            content_type: "text/cloud-config",
            filename: None,
            body: &config,
        },
        mime::Part {
            content_type: mime::INSTALLER_TYPE,
            filename: Some(mime::INSTALLER_NAME),
            body: &install.text,
        },
    ]);
    let mut parts = install.parts;
    parts.push(Part {
        name: "cloud-config (token, unit, commands)".into(),
        bytes: config.len(),
    });
    Ok(UserData {
        budget: Budget::new(
            install.agent_bytes,
            install.lab_bytes,
            config.len(),
            text.len(),
            parts,
        ),
        cloud_config: ranges[0].clone(),
        text,
    })
}

fn check_token(token: &str) -> Result<(), Error> {
    lab_agent_proto::guest::check_token(token).map_err(|p| Error::Token {
        problem: p.to_string(),
    })
}

fn check_lab_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        return Ok(());
    }
    Err(Error::LabName {
        name: name.to_owned(),
        problem: "use 1 to 63 of `A-Z a-z 0-9 - _ .`, as lab.toml requires".into(),
    })
}

/// Paths must stay inside `/opt/lab/`, be unique, and not use a file as a
/// folder; modes are permission bits only. Names may be any UTF-8 without
/// control characters: quoting makes them safe for YAML, and cloud-init
/// writes them as given.
fn check_lab_files(files: &[LabFile]) -> Result<(), Error> {
    let bad = |path: &str, problem: &str| Error::LabFile {
        path: path.escape_debug().to_string(),
        problem: problem.to_owned(),
    };
    let mut seen = BTreeSet::new();
    for f in files {
        let path = f.path.as_str();
        if path.is_empty() {
            return Err(bad(path, "the path is empty"));
        }
        if path.starts_with('/') {
            return Err(bad(
                path,
                "the path is absolute: give it relative to the lab's files folder",
            ));
        }
        if let Some(c) = path.chars().find(|c| c.is_control()) {
            return Err(bad(
                path,
                &format!("the name contains the control character {c:?}: rename the file"),
            ));
        }
        for part in path.split('/') {
            if part.is_empty() || part == "." || part == ".." {
                return Err(bad(
                    path,
                    "the path has an empty, `.` or `..` part: use a plain relative path",
                ));
            }
            if part.len() > 255 {
                return Err(bad(path, "a name is longer than 255 bytes: shorten it"));
            }
        }
        if f.mode & !0o7777 != 0 {
            return Err(bad(
                path,
                &format!("mode {:o} has bits other than permissions", f.mode),
            ));
        }
        if !seen.insert(path) {
            return Err(bad(path, "the path appears twice"));
        }
    }
    for path in &seen {
        if let Some(folder) = path
            .match_indices('/')
            .map(|(i, _)| &path[..i])
            .find(|folder| seen.contains(folder))
        {
            return Err(bad(
                path,
                &format!(
                    "`{}` is a file, so it cannot also be a folder",
                    folder.escape_debug()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, mode: u32, contents: &[u8]) -> LabFile {
        LabFile {
            path: path.into(),
            mode,
            contents: contents.into(),
        }
    }

    #[test]
    fn refuses_paths_that_leave_or_clash() {
        let cases: &[(&[&str], &str)] = &[
            (&[""], "empty"),
            (&["/etc/passwd"], "absolute"),
            (&["a/../b"], "`..` part"),
            (&["a//b"], "empty"),
            (&["./a"], "`.`"),
            (&["a\nb"], "control character"),
            (&["x", "x"], "appears twice"),
            (&["a", "a-x", "a/b"], "`a` is a file"),
        ];
        for (paths, want) in cases {
            let files: Vec<_> = paths.iter().map(|p| file(p, 0o644, b"")).collect();
            let err = check_lab_files(&files).unwrap_err().to_string();
            assert!(err.contains(want), "{paths:?}: {err}");
        }
        assert!(check_lab_files(&[file("ok", 0o100644, b"")]).is_err());
        assert!(check_lab_files(&[file("ünï côdé/ファイル: #x", 0o4755, b"")]).is_ok());
    }

    #[test]
    fn token_rules() {
        assert!(check_token(&"a".repeat(32)).is_ok());
        let short = check_token("short").unwrap_err().to_string();
        assert!(short.contains("5 characters long"), "{short}");
        let space = check_token(&format!("{} x", "a".repeat(32)))
            .unwrap_err()
            .to_string();
        assert!(space.contains("contains ' '"), "{space}");
    }

    #[test]
    fn the_guest_unit_keeps_every_setting_in_order() {
        let settings = |u: &str| -> Vec<String> {
            u.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_owned)
                .collect()
        };
        let guest = guest_unit();
        assert_eq!(settings(&guest), settings(UNIT));
        assert!(settings(UNIT).contains(&"ExecStart=/usr/local/bin/lab-agent serve".to_owned()));
        assert!(guest.len() < UNIT.len() / 2, "{}", guest.len());
    }

    #[test]
    fn debug_never_shows_the_token() {
        let spec = PayloadSpec::new("l", vec![1, 2, 3], "secret-token-value-that-is-long-enough");
        let dbg = format!("{spec:?}");
        assert!(!dbg.contains("secret-token"), "{dbg}");
        assert!(dbg.contains("agent_len: 3"), "{dbg}");
    }
}
