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
use crate::spec::PayloadSpec;
use crate::{cloud_config, installer};

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
    Ok(UserData {
        budget: Budget::new(
            spec.arch,
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
