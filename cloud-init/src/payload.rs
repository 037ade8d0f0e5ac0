//! The `#cloud-config` user-data: a pure function from a [`PayloadSpec`] to
//! text.
//!
//! What cloud-init does with it on the first boot, in its own order
//! (observed on Debian 12's cloud-init 22.4, `../shared/notes/vm-guest-facts.md`):
//! 1. network stage: `bootcmd` (every boot) makes the private directories,
//!    then `write_files` writes the agent, token, unit, lab files and setup
//!    script;
//! 2. final stage: `runcmd` reloads systemd, enables and starts the agent
//!    without waiting for it, and runs the setup script through
//!    `lab-agent setup`, which records its outcome for `/v1/ready`.
//!
//! After a reboot only `bootcmd` runs again; the agent comes back as an
//! enabled unit and the files are already on disk.

use crate::budget::{Budget, Part};
use crate::error::Error;
use crate::yaml::{quoted, quoted_lines};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::write::GzEncoder;
use lab_agent_proto::lab::{GUEST_LAB_DIR, LabFile, MAX_TIMEOUT_SECS};
use std::collections::BTreeSet;
use std::fmt;
use std::io::Write as _;

/// Where the agent binary goes.
pub const AGENT_PATH: &str = "/usr/local/bin/lab-agent";
/// The agent's private directory: token and setup script (mode 0700).
pub const CONFIG_DIR: &str = "/etc/lab-agent";
/// The per-VM token; `lab-agent serve`'s default `--token-file`.
pub const TOKEN_PATH: &str = "/etc/lab-agent/token";
/// The lab's setup script, run by `lab-agent setup --script`.
pub const SETUP_SCRIPT_PATH: &str = "/etc/lab-agent/setup.sh";
/// `lab-agent`'s default `--state-dir` (setup.json, setup.log), mode 0700.
pub const STATE_DIR: &str = "/var/lib/lab-agent";
/// The systemd unit.
pub const UNIT_PATH: &str = "/etc/systemd/system/lab-agent.service";
/// The drop-in that turns the serial console's login prompt into a root shell.
pub const AUTOLOGIN_DROPIN_PATH: &str =
    "/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf";
/// The shortest token the agent accepts.
pub const MIN_TOKEN_LEN: usize = 32;

/// The systemd unit, one copy for the whole project: `packaging/` owns it.
pub const UNIT: &str = include_str!("../../packaging/lab-agent.service");

/// Replaces the getty's command line so that it logs root in at once. The
/// first, empty `ExecStart=` clears the packaged one (systemd appends
/// otherwise). The rest is Debian 12's own `serial-getty@.service` line plus
/// `-f` in the login options and `--autologin root`: with `-o`, agetty passes
/// exactly those options to login(1), so `-f` (no password) must be there.
/// `\\u` is systemd's escape for the `\u` agetty replaces with the user name.
pub const AUTOLOGIN_DROPIN: &str = "\
# Written by cloud-init (lab-agent payload): lab VMs have no passwords and the
# web terminal attaches to the serial console, so log root in at once.
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

    pub fn into_string(self) -> String {
        self.text
    }
}

/// Renders the `#cloud-config` user-data for `spec`.
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

    let mut doc = Doc::default();
    let out = &mut doc.text;
    out.push_str("#cloud-config\n");
    out.push_str(&format!(
        "# lab-agent payload for lab {}: agent, token, lab files, setup.\n",
        spec.lab_name
    ));

    // bootcmd runs before write_files, on every boot. cloud-init creates a
    // file with the default umask and chmods it afterwards, and creates
    // missing parents 0755: making the private directories 0700 first means
    // the token is never readable by others, not even for a moment, and the
    // agent's state (setup log) is root's only. `/opt/lab` must exist for
    // `--lab-dir` even when the lab ships no files.
    out.push_str("bootcmd:\n");
    command(out, &["install", "-d", "-m", "0700", CONFIG_DIR, STATE_DIR]);
    command(out, &["mkdir", "-p", GUEST_LAB_DIR]);

    doc.text.push_str("write_files:\n");
    let mut token = spec.token.clone();
    token.push('\n');
    doc.entry(TOKEN_PATH, 0o600, Content::text(&token));
    doc.entry(UNIT_PATH, 0o644, Content::text(UNIT));
    if spec.serial_autologin {
        doc.entry(
            AUTOLOGIN_DROPIN_PATH,
            0o644,
            Content::text(AUTOLOGIN_DROPIN),
        );
    }
    let mut lab_bytes = 0;
    if let Some(setup) = &spec.setup {
        lab_bytes += doc.entry(SETUP_SCRIPT_PATH, 0o700, Content::for_file(&setup.contents));
    }
    for file in &spec.files {
        let path = format!("{GUEST_LAB_DIR}/{}", file.path);
        lab_bytes += doc.entry(&path, file.mode, Content::for_file(&file.contents));
    }
    // The agent is by far the largest entry; it goes last so that the
    // interesting part of the user-data reads first.
    let agent_bytes = doc.entry(AGENT_PATH, 0o755, Content::gzip(&spec.agent));

    let out = &mut doc.text;
    out.push_str("runcmd:\n");
    command(out, &["systemctl", "daemon-reload"]);
    // --no-block: runcmd runs inside cloud-final.service; waiting here for a
    // job is how boots deadlock. The agent starts now and answers
    // `setting_up` while the setup script below runs.
    command(
        out,
        &[
            "systemctl",
            "enable",
            "--now",
            "--no-block",
            "lab-agent.service",
        ],
    );
    if spec.serial_autologin {
        // The getty on ttyS0 started (after systemd-user-sessions) from the
        // unit as systemd loaded it at boot, before write_files created the
        // drop-in; the daemon-reload above makes systemd read the drop-in,
        // and this restart applies it on the first boot too. Later boots
        // read it from the start. --no-block for the same reason as above.
        command(
            out,
            &[
                "systemctl",
                "restart",
                "--no-block",
                "serial-getty@ttyS0.service",
            ],
        );
    }
    let timeout;
    let mut setup = vec![AGENT_PATH, "setup"];
    if let Some(script) = &spec.setup {
        timeout = script.timeout_secs.to_string();
        setup.extend(["--script", SETUP_SCRIPT_PATH, "--timeout", &timeout]);
    }
    // Run even without a script: it records "succeeded", and a cloud-init
    // that finished without a setup record means "failed" to the agent.
    setup.extend(["--lab-dir", GUEST_LAB_DIR]);
    command(out, &setup);

    let total = doc.text.len();
    Ok(UserData {
        budget: Budget::new(agent_bytes, lab_bytes, total, doc.parts),
        text: doc.text,
    })
}

/// The document being written, and the size of each `write_files` entry.
#[derive(Default)]
struct Doc {
    text: String,
    parts: Vec<Part>,
}

impl Doc {
    /// Appends one `write_files` entry owned by root; returns its size.
    fn entry(&mut self, path: &str, mode: u32, content: Content) -> usize {
        let start = self.text.len();
        let out = &mut self.text;
        out.push_str("- path: ");
        quoted(out, path);
        // Quoted octal: cloud-init's schema rejects integers, and YAML 1.1
        // would read an unquoted 0644 as the integer 420 anyway.
        out.push_str(&format!(
            "\n  owner: \"root:root\"\n  permissions: \"0{mode:03o}\"\n"
        ));
        if let Some(encoding) = content.encoding {
            out.push_str(&format!("  encoding: \"{encoding}\"\n"));
        }
        out.push_str("  content: ");
        out.push_str(&content.scalar);
        out.push('\n');
        let bytes = self.text.len() - start;
        self.parts.push(Part {
            name: path.to_owned(),
            bytes,
        });
        bytes
    }
}

/// A `write_files` content scalar and the `encoding` cloud-init needs for it.
struct Content {
    encoding: Option<&'static str>,
    /// The YAML scalar, quotes included.
    scalar: String,
}

/// Fewest bytes an encoding must save before a text file loses readability.
const MIN_SAVING: usize = 2048;

/// Continuation lines of a multi-line `content:` scalar.
const CONTENT_INDENT: usize = 4;

impl Content {
    fn text(s: &str) -> Content {
        let mut scalar = String::with_capacity(s.len() + 2);
        quoted_lines(&mut scalar, s, CONTENT_INDENT);
        Content {
            encoding: None,
            scalar,
        }
    }

    fn base64(bytes: &[u8], encoding: &'static str) -> Content {
        // Base64 needs no escaping, and one line parses fastest: for 600 KB
        // of base64, cloud-init's loader took 0.41 s on one line against
        // 0.57 s wrapped at 76 columns (escaped breaks or a block literal).
        let mut scalar = String::with_capacity(bytes.len() * 4 / 3 + 6);
        scalar.push('"');
        STANDARD.encode_string(bytes, &mut scalar);
        scalar.push('"');
        Content {
            encoding: Some(encoding),
            scalar,
        }
    }

    fn gzip(bytes: &[u8]) -> Content {
        Content::base64(&gzip_best(bytes), "gz+b64")
    }

    /// Text when the bytes are UTF-8, else the smaller of base64 and gzip +
    /// base64. Every byte of user-data is read and YAML-parsed by cloud-init
    /// in several boot stages (pure-Python PyYAML; ~25 µs a byte under TCG,
    /// `notes/vm-guest-facts.md`), so fewer bytes is less boot time; but text
    /// keeps scripts readable in the user-data, which an operator reads when
    /// a lab fails. So text gives way only when an encoding saves at least a
    /// quarter and at least [`MIN_SAVING`] bytes: large or repetitive files,
    /// or text that is mostly escapes, not a 2 KiB setup script.
    fn for_file(bytes: &[u8]) -> Content {
        let encoded = {
            let b64 = Content::base64(bytes, "b64");
            // Compression cannot win below a gzip header plus trailer.
            let gz = (bytes.len() > 32).then(|| Content::gzip(bytes));
            match gz {
                Some(gz) if gz.cost() < b64.cost() => gz,
                _ => b64,
            }
        };
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                let text = Content::text(s);
                let saving = text.cost().saturating_sub(encoded.cost());
                if encoded.cost() * 4 < text.cost() * 3 && saving >= MIN_SAVING {
                    encoded
                } else {
                    text
                }
            }
            Err(_) => encoded,
        }
    }

    /// Bytes this content adds to the entry (scalar plus encoding line).
    fn cost(&self) -> usize {
        self.scalar.len() + self.encoding.map_or(0, |e| e.len() + 15)
    }
}

/// gzip at the best level. The header carries no name and mtime 0, so the
/// output depends only on the input (snapshots stay stable).
fn gzip_best(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::best());
    // Writing into a Vec cannot fail.
    gz.write_all(bytes).expect("gzip into memory");
    gz.finish().expect("gzip into memory")
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

fn check_token(token: &str) -> Result<(), Error> {
    let problem = if token.len() < MIN_TOKEN_LEN {
        format!(
            "it is {} characters long; the agent refuses tokens shorter than {MIN_TOKEN_LEN} \
             (a generated token is 43)",
            token.len()
        )
    } else if let Some(bad) = token.chars().find(|c| !c.is_ascii_graphic()) {
        format!(
            "it contains {bad:?}; a token travels in an HTTP header, so use only visible \
             ASCII characters (a generated token is base64url)"
        )
    } else {
        return Ok(());
    };
    Err(Error::Token { problem })
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
    fn text_unless_an_encoding_saves_much() {
        assert_eq!(Content::for_file(b"hello\n").encoding, None);
        let script = b"#!/bin/sh\nset -eu\necho one\necho two\necho three\necho four\n";
        assert_eq!(Content::for_file(script).encoding, None);
        // Mostly escapes, but too small to be worth it; then large enough.
        assert_eq!(Content::for_file(&[1; 40]).encoding, None);
        assert_eq!(Content::for_file(&[1; 1000]).encoding, Some("gz+b64"));
        assert_eq!(Content::for_file(&[0xff, 0xfe, 0]).encoding, Some("b64"));
        let text = "the same line again\n".repeat(200);
        assert_eq!(Content::for_file(text.as_bytes()).encoding, Some("gz+b64"));
        // Incompressible binary: plain base64 beats gzip's framing.
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                // xorshift64: incompressible enough for deflate.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        assert_eq!(Content::for_file(&noise).encoding, Some("b64"));
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
    fn debug_never_shows_the_token() {
        let spec = PayloadSpec::new("l", vec![1, 2, 3], "secret-token-value-that-is-long-enough");
        let dbg = format!("{spec:?}");
        assert!(!dbg.contains("secret-token"), "{dbg}");
        assert!(dbg.contains("agent_len: 3"), "{dbg}");
    }
}
