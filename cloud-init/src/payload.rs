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
//!
//! With the agent on its disk ([`AgentSource::Disk`]) the message is
//! gzip'd whole: cloud-init decompresses a gzip'd user-data before it
//! splits it (`cloudinit.user_data.convert_string`, 22.4 and 25.1 alike),
//! and what is left — lab files, scripts, a unit — compresses ~2.5×, which
//! keeps a small lab's Secret within 7,000 bytes. (The embedded agent is
//! gzip'd already; compressing its base64 again would save a quarter, but
//! keep the Secret unreadable for a `kubectl get`: not worth it there.)

use crate::budget::{Budget, Part};
use crate::error::Error;
use crate::mime;
use crate::spec::{AgentSource, PayloadSpec};
use crate::{cloud_config, installer};

/// Rendered user-data and where its bytes went.
#[derive(Debug, Clone)]
pub struct UserData {
    /// The MIME message.
    text: String,
    /// `text` gzip'd, when that is what the VM gets (`--agent-from disk`).
    gzipped: Option<Vec<u8>>,
    /// Where the `#cloud-config` part's body is in `text`.
    cloud_config: std::ops::Range<usize>,
    budget: Budget,
}

impl UserData {
    /// The MIME message as text: what cloud-init splits, after it
    /// decompressed [`UserData::as_bytes`] when that is gzip'd.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// What the VM gets and the Secret holds: the message, gzip'd when
    /// [`UserData::is_gzipped`].
    pub fn as_bytes(&self) -> &[u8] {
        self.gzipped.as_deref().unwrap_or(self.text.as_bytes())
    }

    /// Whether [`UserData::as_bytes`] is the message gzip'd
    /// (`--agent-from disk`).
    pub fn is_gzipped(&self) -> bool {
        self.gzipped.is_some()
    }

    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The `#cloud-config` part alone: the only YAML cloud-init parses.
    pub fn cloud_config(&self) -> &str {
        &self.text[self.cloud_config.clone()]
    }

    /// The MIME message as text (see [`UserData::as_str`]).
    pub fn into_string(self) -> String {
        self.text
    }
}

/// Renders the user-data for `spec`: the MIME message described above.
///
/// Checks the spec first ([`PayloadSpec::check`]). The size budget is *not* enforced here (a NoCloud seed has
/// no 1 MiB limit); [`crate::render_secret`] enforces it.
pub fn render_user_data(spec: &PayloadSpec) -> Result<UserData, Error> {
    spec.check()?;

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
    let gzipped = matches!(spec.agent, AgentSource::Disk(_)).then(|| gzip(text.as_bytes()));
    let mut budget = Budget::new(
        spec.arch,
        install.agent_bytes,
        install.lab_bytes,
        config.len(),
        text.len(),
        parts,
    );
    budget.gzipped = gzipped.as_ref().map(Vec::len);
    Ok(UserData {
        budget,
        cloud_config: ranges[0].clone(),
        text,
        gzipped,
    })
}

/// gzip at the highest level with no name and mtime 0: the same spec
/// gives the same bytes.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 2),
        flate2::Compression::new(9),
    );
    gz.write_all(bytes).expect("gzip into memory");
    gz.finish().expect("gzip into memory")
}
