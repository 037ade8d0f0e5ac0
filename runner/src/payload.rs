//! A lab rendered into its payload (the generator's [`lab_payload`]) and
//! written out, with the error the verbs report: `labctl secret` writes the
//! Secret, a VM ([`crate::vm`]) the seed, `lint` counts the budget.

use lab_agent_cloudinit::agent_bin::{AgentBinError, AgentBinary};
use lab_agent_cloudinit::lab_payload::{self, RenderLabError};
pub use lab_agent_cloudinit::lab_payload::{BudgetReport, RenderOptions, Rendered};
use lab_agent_proto::lab::{Lab, LabError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why rendering or writing a payload failed (`labctl secret`, `try --vm`,
/// `lint`'s budget).
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error("failed to read {what} `{}`", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Render(#[from] lab_agent_cloudinit::Error),
    #[error(transparent)]
    Token(#[from] lab_agent_proto::token_file::TokenFileError),
    #[error(transparent)]
    Agent(#[from] AgentBinError),
    #[error("failed to get random bytes for the token from the OS: {0}")]
    Random(getrandom::Error),
    #[error("failed to write {what} to `{}`", path.display())]
    Write {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl From<RenderLabError> for PayloadError {
    fn from(e: RenderLabError) -> PayloadError {
        match e {
            RenderLabError::Lab(e) => PayloadError::Lab(e),
            RenderLabError::Read { what, path, source } => {
                PayloadError::Read { what, path, source }
            }
            RenderLabError::Render(e) => PayloadError::Render(e),
        }
    }
}

impl PayloadError {
    /// What to try, printed as `hint: …` after the error.
    pub fn hint(&self) -> Option<String> {
        match self {
            PayloadError::Agent(e) => e.hint(),
            PayloadError::Lab(e) => e.hint().map(str::to_owned),
            PayloadError::Render(e) => e.hint().map(str::to_owned),
            _ => None,
        }
    }
}

/// Renders `lab`'s payload ([`lab_payload::render`], the generator's edge),
/// with the error the verbs report. `labctl secret`, `try --vm` and `lint`
/// call this.
pub fn render(
    lab: &Lab,
    agent: &AgentBinary,
    token: &str,
    opts: &RenderOptions,
) -> Result<Rendered, PayloadError> {
    lab_payload::render(lab, agent, token, opts).map_err(PayloadError::from)
}

/// [`render`] with what a person wants to see on the way: which agent, and
/// the budget line (also when the payload is over the limit, before the
/// error).
pub fn render_logged(
    lab: &Lab,
    agent: &AgentBinary,
    token: &str,
    opts: &RenderOptions,
    log: &mut dyn Write,
) -> Result<Rendered, PayloadError> {
    let _ = writeln!(
        log,
        "agent: `{}` ({} bytes)",
        agent.path.display(),
        agent.bytes.len()
    );
    let rendered = render(lab, agent, token, opts);
    let budget = match &rendered {
        Ok(r) => Some(r.user_data.budget()),
        Err(PayloadError::Render(lab_agent_cloudinit::Error::TooLarge(t))) => Some(&t.budget),
        Err(_) => None,
    };
    if let Some(budget) = budget {
        let _ = writeln!(log, "{budget}");
    }
    rendered
}

/// Writes `bytes` to `path` readable by its owner only (everything we write
/// holds the token), atomically: a temporary file in the same folder,
/// renamed over the target, so a reader never sees half a Secret.
///
/// A target that exists and is not a regular file (`/dev/null`, a FIFO, a
/// terminal) is written in place: renaming over it would replace a device
/// node with a file.
pub fn write_private(path: &Path, bytes: &[u8], what: &'static str) -> Result<(), PayloadError> {
    write_atomic(path, bytes, what, 0o600)
}

/// [`write_private`] with `mode` (e.g. 0644 for the agent's disk, which
/// holds no secret).
pub fn write_atomic(
    path: &Path,
    bytes: &[u8],
    what: &'static str,
    mode: u32,
) -> Result<(), PayloadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| PayloadError::Write {
        what,
        path: path.to_owned(),
        source,
    };
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
    {
        if meta.is_dir() {
            return Err(err(std::io::Error::other("it is a directory")));
        }
        return std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(err);
    }
    let name = path
        .file_name()
        .ok_or_else(|| err(std::io::Error::other("the path names no file")))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_target_is_written_in_place_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        use std::os::unix::fs::MetadataExt;
        // CI runs as root: without it this fails, never passes unrun.
        assert_eq!(
            std::fs::metadata("/proc/self").map(|m| m.uid()).ok(),
            Some(0),
            "mknod needs root\nhint: run the tests as root, as CI does"
        );
        let dir = std::env::temp_dir().join(format!("labctl-null-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Our own /dev/null node, so a regression cannot break the machine's.
        let null = dir.join("null");
        let made = std::process::Command::new("mknod")
            .arg(&null)
            .args(["c", "1", "3"])
            .status()
            .unwrap();
        assert!(made.success());
        write_private(&null, b"secret", "the Secret").unwrap();
        let kind = std::fs::symlink_metadata(&null).unwrap().file_type();
        assert!(
            kind.is_char_device(),
            "the device node was replaced: {kind:?}"
        );
        let err = write_private(&dir, b"x", "the Secret").unwrap_err();
        let cause = std::error::Error::source(&err).map(|c| c.to_string());
        assert_eq!(cause.as_deref(), Some("it is a directory"), "{err}");
        // A regular file is still replaced atomically, mode 0600.
        let file = dir.join("out.yaml");
        std::fs::write(&file, "old").unwrap();
        write_private(&file, b"new", "the Secret").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
