//! A lab folder rendered into its payload (feature `fs`): the edge where
//! the generator reads (the lab's files and setup script), then calls its
//! pure functions. `labctl secret`, `labctl try --vm`, `labctl lint` and
//! the Python package's `render_secret` all render through [`render`], so
//! a VM boots what a Secret holds, byte for byte.

use crate::agent_bin::{self, AgentBinError, AgentBinary};
use crate::arch::Arch;
use crate::budget::{Budget, SECRET_LIMIT};
use crate::payload::{UserData, render_user_data};
use crate::secret::{Format, SecretMeta, render_secret};
use crate::spec::{AgentFrom, Channel, PayloadSpec, SetupScript};
use lab_agent_proto::lab::{Lab, LabError, READY_TIMEOUT_ANNOTATION};
use std::path::{Path, PathBuf};

/// How to render a payload, beyond the lab, the agent and the token.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// The lab VM's architecture (the agent must be built for it).
    pub arch: Arch,
    /// The Secret's name, namespace and labels.
    pub meta: SecretMeta,
    pub format: Format,
    /// Log root in on the serial console.
    pub serial_autologin: bool,
    /// The agent in the payload, or only its pin (`--agent-from disk`).
    pub agent_from: AgentFrom,
    /// Where the agent listens (`--channel`).
    pub channel: Channel,
}

/// A lab's payload: the user-data and the Secret that carries it.
#[derive(Debug)]
pub struct Rendered {
    pub user_data: UserData,
    /// The Secret manifest, in the format asked for.
    pub manifest: String,
}

/// Why a lab could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderLabError {
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error("failed to read {what} `{}`", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Render(#[from] crate::Error),
    /// The VM asked for (`--vm`) or a parameter (`--param`).
    #[error(transparent)]
    Vm(#[from] lab_agent_proto::lab::VmError),
    /// Inputs of the objects around the Secret that cannot work together.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    #[error("failed to get random bytes for a token from the OS: {0}")]
    Random(getrandom::Error),
}

impl RenderLabError {
    /// What to try, printed as `hint: …` after the error.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            RenderLabError::Lab(e) => e.hint(),
            RenderLabError::Render(e) => e.hint(),
            RenderLabError::Read { .. }
            | RenderLabError::Vm(_)
            | RenderLabError::Manifest(_)
            | RenderLabError::Random(_) => None,
        }
    }
}

/// Renders `lab`'s payload for `agent` with `token`: reads the lab's files
/// and setup script, then the generator's pure functions.
pub fn render(
    lab: &Lab,
    agent: &AgentBinary,
    token: &str,
    opts: &RenderOptions,
) -> Result<Rendered, RenderLabError> {
    let files = lab.collect_files()?;
    let setup = match lab.setup_script_path() {
        None => None,
        Some(path) => Some(SetupScript {
            contents: std::fs::read(&path).map_err(|source| RenderLabError::Read {
                what: "the setup script",
                path,
                source,
            })?,
            timeout_secs: lab.setup_timeout_secs(),
        }),
    };
    let spec = PayloadSpec {
        lab_name: lab.name.clone(),
        arch: opts.arch,
        agent: opts.agent_from.source(&agent.bytes),
        token: token.to_owned(),
        files,
        setup,
        serial_autologin: opts.serial_autologin,
        readiness: lab.readiness,
        env: lab.vm_env.clone(),
        channel: opts.channel,
    };
    let user_data = render_user_data(&spec)?;
    let manifest = render_secret(&user_data, &secret_meta(lab, &opts.meta), opts.format)?;
    Ok(Rendered {
        user_data,
        manifest,
    })
}

/// The Secret's metadata for `lab`: `meta` and the lab's readiness
/// deadline. The backend applies the Secret, not the lab folder: the
/// deadline it waits for this VM travels with it.
pub fn secret_meta(lab: &Lab, meta: &SecretMeta) -> SecretMeta {
    let mut meta = meta.clone();
    meta.annotations.insert(
        READY_TIMEOUT_ANNOTATION.to_owned(),
        lab.readiness.timeout_secs.to_string(),
    );
    meta
}

/// The architecture a payload is for: `arch` when given, else that of the
/// `agent` given (an ELF file of a known machine), else amd64. A given
/// agent is used as it is and must match (`labctl secret --arch`,
/// `render_secret(arch=)`).
pub fn payload_arch(arch: Option<Arch>, agent: Option<&Path>) -> Result<Arch, AgentBinError> {
    Ok(match (arch, agent) {
        (Some(arch), _) => arch,
        (None, Some(agent)) => agent_bin::arch_of(agent)?.unwrap_or_default(),
        (None, None) => Arch::default(),
    })
}

/// The budget in bytes of user-data (= decoded Secret data, what Kubernetes
/// limits), as `labctl secret --json` and the Python package report it.
#[derive(Debug, serde::Serialize)]
pub struct BudgetReport {
    /// The payload's architecture, `amd64` or `arm64`.
    pub arch: &'static str,
    /// `embedded` or `disk`: the agent in the payload, or only its pin.
    pub agent_from: &'static str,
    pub agent_bytes: usize,
    pub lab_files_bytes: usize,
    pub rest_bytes: usize,
    /// The user-data as a MIME message: agent + lab files + rest.
    pub total_bytes: usize,
    /// What the Secret holds: `total_bytes`, or the message gzip'd
    /// (`agent_from` = `disk`). Counted against `limit_bytes`.
    pub secret_bytes: usize,
    /// Of the total, the `#cloud-config` part: all cloud-init YAML-parses
    /// on every boot (the rest is an installer script it runs once).
    pub cloud_config_bytes: usize,
    pub limit_bytes: usize,
    pub percent_of_limit: f64,
}

impl From<&Budget> for BudgetReport {
    fn from(b: &Budget) -> Self {
        BudgetReport {
            arch: b.arch.name(),
            agent_from: if b.gzipped.is_some() {
                AgentFrom::Disk.name()
            } else {
                AgentFrom::Embedded.name()
            },
            agent_bytes: b.agent,
            lab_files_bytes: b.lab_files,
            rest_bytes: b.rest,
            total_bytes: b.total,
            secret_bytes: b.secret_bytes(),
            cloud_config_bytes: b.cloud_config,
            limit_bytes: SECRET_LIMIT,
            percent_of_limit: (b.percent_of_limit() * 10.0).round() / 10.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lab's `[readiness]` goes both ways a backend sees: the deadline
    /// as the Secret's annotation, the root's least size to the guest's
    /// `lab-agent setup`.
    #[test]
    fn the_readiness_table_reaches_the_secret_and_the_guest() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fixture-lab");
        let lab = Lab::load(&dir).unwrap();
        let agent = AgentBinary {
            path: "lab-agent".into(),
            bytes: b"\x7fELF fake lab-agent for tests\n".to_vec(),
        };
        let opts = RenderOptions {
            arch: Arch::Amd64,
            meta: SecretMeta::new("fixture"),
            format: Format::Json,
            serial_autologin: true,
            agent_from: AgentFrom::Embedded,
            channel: Channel::Both,
        };
        let token = "test-token-0123456789abcdefghijklmnopqrstuv";
        let rendered = render(&lab, &agent, token, &opts).unwrap();
        let v: serde_json::Value = serde_json::from_str(&rendered.manifest).unwrap();
        assert_eq!(
            v["metadata"]["annotations"][READY_TIMEOUT_ANNOTATION], "269",
            "{v}"
        );
        assert!(
            rendered
                .user_data
                .as_str()
                .contains(r#""--min-root-bytes", "4294967296""#)
        );
        // The caller's own annotations stay.
        let mut opts = opts;
        opts.meta
            .annotations
            .insert("a.example/b".into(), "c".into());
        let rendered = render(&lab, &agent, token, &opts).unwrap();
        let v: serde_json::Value = serde_json::from_str(&rendered.manifest).unwrap();
        assert_eq!(v["metadata"]["annotations"]["a.example/b"], "c");
    }
}
