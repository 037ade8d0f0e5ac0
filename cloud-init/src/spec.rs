//! What one lab VM's user-data is made of ([`PayloadSpec`]) and the rules
//! its inputs must keep before anything is rendered ([`PayloadSpec::check`]).
//! The caller reads the files; nothing here does I/O.

use crate::arch::Arch;
use crate::error::Error;
use crate::pin::AgentPin;
use lab_agent_proto::lab::{LabFile, MAX_SETUP_TIMEOUT_SECS, Readiness};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Everything that goes into one lab VM's user-data. Files are read by the
/// caller (`labctl secret`); this crate only renders.
#[derive(Clone)]
pub struct PayloadSpec {
    /// The lab's name, as in `lab.toml` (written into a comment).
    pub lab_name: String,
    /// The machine the VM runs on: picks the serial console, and the agent
    /// must be built for it.
    pub arch: Arch,
    /// The static `lab-agent` for [`PayloadSpec::arch`]: its bytes, or the
    /// pin of the one the agent disk must hold.
    pub agent: AgentSource,
    /// The per-VM token, at least
    /// [`MIN_TOKEN_LEN`](lab_agent_proto::guest::MIN_TOKEN_LEN) visible ASCII characters.
    pub token: String,
    /// Files for `/opt/lab/`, paths relative to it.
    pub files: Vec<LabFile>,
    /// The lab's setup script, if it has one.
    pub setup: Option<SetupScript>,
    /// Root autologin on the serial console ([`Arch::serial_console`]); on
    /// by default.
    pub serial_autologin: bool,
    /// The lab's `[readiness]`: `lab-agent setup` checks the root
    /// filesystem against its `min_root_bytes`.
    pub readiness: Readiness,
    /// The variables every command on this VM gets (`LAB_VM`, `LAB_VMS`,
    /// `LAB_PARAM_<KEY>`: `Lab::vm_env`), written to the guest's
    /// `/etc/lab-agent/env` by the installer; none: no file, and the
    /// payload is byte for byte what it was before sessions.
    pub env: BTreeMap<String, String>,
    /// Where the agent listens (`--channel`): TCP, virtio-vsock, or both.
    pub channel: Channel,
}

/// How the backend reaches the agent (`labctl secret --channel`): what the
/// unit's `lab-agent serve` listens on. With `vsock` alone the agent
/// listens on no network at all; a guest without a vsock device logs one
/// line and goes on with TCP under `both`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Channel {
    /// TCP 8899 on every address.
    Tcp,
    /// virtio-vsock port 8899, any CID (KubeVirt: `autoattachVSOCK`).
    Vsock,
    /// Both: the default.
    #[default]
    Both,
}

impl Channel {
    pub fn name(self) -> &'static str {
        match self {
            Channel::Tcp => "tcp",
            Channel::Vsock => "vsock",
            Channel::Both => "both",
        }
    }

    /// Whether the agent listens on TCP 8899 (a NetworkPolicy hole).
    pub fn tcp(self) -> bool {
        self != Channel::Vsock
    }

    /// Whether the agent listens on vsock (the VM needs a vsock device).
    pub fn vsock(self) -> bool {
        self != Channel::Tcp
    }

    /// `lab-agent serve`'s `--listen` arguments for this channel (none for
    /// TCP: the agent's default, `0.0.0.0:8899`).
    pub fn listen_args(self) -> Vec<String> {
        let port = lab_agent_proto::guest::PORT;
        let tcp = format!("0.0.0.0:{port}");
        let vsock = format!("vsock:{port}");
        let addrs = match self {
            Channel::Tcp => vec![],
            Channel::Vsock => vec![vsock],
            Channel::Both => vec![tcp, vsock],
        };
        addrs
            .into_iter()
            .flat_map(|a| ["--listen".to_owned(), a])
            .collect()
    }
}

impl std::str::FromStr for Channel {
    type Err = String;
    fn from_str(s: &str) -> Result<Channel, String> {
        match s {
            "tcp" => Ok(Channel::Tcp),
            "vsock" => Ok(Channel::Vsock),
            "both" => Ok(Channel::Both),
            other => Err(format!(
                "channel must be \"tcp\", \"vsock\" or \"both\", not {other:?}"
            )),
        }
    }
}

/// Where a payload takes its agent from, as `--agent-from` says it; the
/// renderer turns the agent binary into the matching [`AgentSource`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AgentFrom {
    #[default]
    Embedded,
    Disk,
}

impl AgentFrom {
    pub fn name(self) -> &'static str {
        match self {
            AgentFrom::Embedded => "embedded",
            AgentFrom::Disk => "disk",
        }
    }

    /// The agent's place in a payload of this kind.
    pub fn source(self, agent: &[u8]) -> AgentSource {
        match self {
            AgentFrom::Embedded => AgentSource::Embedded(agent.to_vec()),
            AgentFrom::Disk => AgentSource::Disk(AgentPin::of(agent)),
        }
    }
}

impl std::str::FromStr for AgentFrom {
    type Err = String;
    fn from_str(s: &str) -> Result<AgentFrom, String> {
        match s {
            "embedded" => Ok(AgentFrom::Embedded),
            "disk" => Ok(AgentFrom::Disk),
            other => Err(format!(
                "agent_from must be \"embedded\" or \"disk\", not {other:?}"
            )),
        }
    }
}

/// Where a VM's agent comes from (`labctl secret --agent-from`).
#[derive(Clone, PartialEq, Eq)]
pub enum AgentSource {
    /// The agent's bytes ride in the installer (`embedded`, the default):
    /// the VM needs nothing else, and its Secret holds ~600 KiB.
    Embedded(Vec<u8>),
    /// Only the agent's SHA-256 and size ride in the payload (`disk`): the
    /// installer takes the agent from the agent disk
    /// ([`crate::agent_disk`]), checks it against the pin, and installs
    /// nothing else.
    Disk(AgentPin),
}

impl AgentSource {
    /// `embedded` or `disk`, as the flag says it.
    pub fn name(&self) -> &'static str {
        match self {
            AgentSource::Embedded(_) => "embedded",
            AgentSource::Disk(_) => "disk",
        }
    }
}

impl fmt::Debug for AgentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentSource::Embedded(bytes) => write!(f, "Embedded({} bytes)", bytes.len()),
            AgentSource::Disk(pin) => write!(f, "Disk({pin:?})"),
        }
    }
}

/// The setup script and how long `lab-agent setup` lets it run.
#[derive(Clone)]
pub struct SetupScript {
    pub contents: Vec<u8>,
    pub timeout_secs: u64,
}

impl PayloadSpec {
    /// An amd64 spec with no lab files, no setup script, and serial
    /// autologin on.
    pub fn new(lab_name: impl Into<String>, agent: Vec<u8>, token: impl Into<String>) -> Self {
        PayloadSpec {
            lab_name: lab_name.into(),
            arch: Arch::Amd64,
            agent: AgentSource::Embedded(agent),
            token: token.into(),
            files: Vec::new(),
            setup: None,
            serial_autologin: true,
            readiness: Readiness::default(),
            env: BTreeMap::new(),
            channel: Channel::default(),
        }
    }
}

// Never print the token or a megabyte of agent.
impl fmt::Debug for PayloadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadSpec")
            .field("lab_name", &self.lab_name)
            .field("arch", &self.arch)
            .field("agent", &self.agent)
            .field("token", &"<redacted>")
            .field("files", &self.files)
            .field("setup", &self.setup)
            .field("serial_autologin", &self.serial_autologin)
            .field("readiness", &self.readiness)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("channel", &self.channel)
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

impl PayloadSpec {
    /// Checks every input the renderer writes into the guest: the token,
    /// the lab name, the agent's machine (when it is an ELF file), every lab
    /// file's path and mode, and the setup timeout.
    pub fn check(&self) -> Result<(), Error> {
        check_token(&self.token)?;
        if let AgentSource::Embedded(agent) = &self.agent {
            check_agent_arch(agent, self.arch)?;
        }
        check_lab_name(&self.lab_name)?;
        check_lab_files(&self.files)?;
        check_env(&self.env)?;
        if let Some(setup) = &self.setup {
            if !(1..=MAX_SETUP_TIMEOUT_SECS).contains(&setup.timeout_secs) {
                return Err(Error::SetupTimeout {
                    secs: setup.timeout_secs,
                });
            }
        }
        Ok(())
    }
}

fn check_token(token: &str) -> Result<(), Error> {
    lab_agent_proto::guest::check_token(token).map_err(|p| Error::Token {
        problem: p.to_string(),
    })
}

/// An ELF agent must be built for the payload's architecture: the guest's
/// installer would refuse it, and that VM would never be ready. (Bytes that
/// are no little-endian ELF header are the caller's business: tests render
/// fakes.)
pub(crate) fn check_agent_arch(agent: &[u8], arch: Arch) -> Result<(), Error> {
    let elf = agent.len() >= 20
        && agent.starts_with(b"\x7fELF")
        && matches!(agent[4], 1 | 2) // ELFCLASS32, ELFCLASS64
        && agent[5] == 1; // ELFDATA2LSB
    if !elf {
        return Ok(());
    }
    let machine = u16::from_le_bytes([agent[18], agent[19]]);
    if machine == arch.elf_machine() {
        return Ok(());
    }
    Err(Error::AgentArch {
        agent: Arch::from_elf_machine(machine)
            .map_or_else(|| format!("ELF machine {machine}"), |a| a.to_string()),
        arch,
    })
}

/// Names a shell can set (`[A-Za-z_][A-Za-z0-9_]*`), values without NUL
/// (the env file's separator, and the one byte no environment holds).
fn check_env(env: &BTreeMap<String, String>) -> Result<(), Error> {
    for (name, value) in env {
        let shell_name = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let problem = if !shell_name {
            "is not a variable name: use letters, digits and `_`"
        } else if value.contains('\0') {
            "its value has a NUL byte, which no environment variable can hold"
        } else {
            continue;
        };
        return Err(Error::Env {
            name: name.escape_debug().to_string(),
            problem: problem.into(),
        });
    }
    Ok(())
}

fn check_lab_name(name: &str) -> Result<(), Error> {
    lab_agent_proto::lab::check_lab_name(name).map_err(|p| Error::LabName {
        name: name.to_owned(),
        problem: p.to_string(),
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
    fn the_agent_must_be_built_for_the_payloads_architecture() {
        let elf = |machine: u16| {
            let mut b = b"\x7fELF\x02\x01\x01\x00".to_vec();
            b.extend_from_slice(&[0; 10]);
            b.extend_from_slice(&machine.to_le_bytes());
            b
        };
        assert!(check_agent_arch(&elf(62), Arch::Amd64).is_ok());
        assert!(check_agent_arch(&elf(183), Arch::Arm64).is_ok());
        let err = check_agent_arch(&elf(183), Arch::Amd64).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the agent is built for arm64, and the payload is for amd64"
        );
        assert!(
            err.hint().unwrap().contains("--arch amd64"),
            "{:?}",
            err.hint()
        );
        let odd = check_agent_arch(&elf(40), Arch::Arm64).unwrap_err();
        assert!(odd.to_string().contains("ELF machine 40"), "{odd}");
        assert!(check_agent_arch(b"#!/bin/sh\n", Arch::Arm64).is_ok());
    }

    #[test]
    fn debug_never_shows_the_token() {
        let spec = PayloadSpec::new("l", vec![1, 2, 3], "secret-token-value-that-is-long-enough");
        let dbg = format!("{spec:?}");
        assert!(!dbg.contains("secret-token"), "{dbg}");
        assert!(dbg.contains("Embedded(3 bytes)"), "{dbg}");
    }
}
