//! `STATE_DIR/setup.json`: what `lab-agent setup` records and what readiness
//! reads. Written atomically (temp file, fsync, rename, fsync dir), so a
//! reader sees the previous record or the new one, never a torn one — even
//! when the writer is killed with SIGKILL mid-write.

use lab_agent_proto::SetupState;
use nix::libc;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const SETUP_JSON: &str = "setup.json";
pub const SETUP_LOG: &str = "setup.log";
/// Largest state file (`setup.json`, cloud-init's `result.json`) read; real
/// ones are well under a KiB.
pub const MAX_STATE_FILE_BYTES: u64 = 1024 * 1024;

/// Opens a state file for reading only if it is a regular file, never
/// through a symlink, and without ever blocking: a named pipe or device
/// put in its place gives an error to report, never a hung agent; a
/// symlink (`setup.log` → the token) is refused rather than followed.
pub fn open_regular(path: &Path) -> io::Result<std::fs::File> {
    open_checked(path, libc::O_NOFOLLOW)
}

fn open_checked(path: &Path, flags: i32) -> io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(e.kind(), "it is a symlink, which state files never are")
            } else {
                e
            }
        })?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(f)
}

/// Reads a whole state file: a regular file of at most `limit` bytes, not
/// a symlink.
pub fn read_state_file(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_limited(open_regular(path)?, limit)
}

/// As [`read_state_file`], following a symlink: cloud-init's `result.json`
/// is one by design.
pub fn read_followed(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_limited(open_checked(path, 0)?, limit)
}

fn read_limited(f: std::fs::File, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    f.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(bytes)
}

/// Refuses a state dir (or file) that another user owns: whoever owns it
/// can replace `setup.json` and so decide readiness, or plant links.
pub fn check_owner(path: &Path, meta: &std::fs::Metadata) -> io::Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "`{}` is owned by uid {}, not by the agent's user (uid {me}); its contents cannot be trusted: run `chown {me} {}` or use another `--state-dir`",
                path.display(),
                meta.uid(),
                path.display()
            ),
        ));
    }
    Ok(())
}

/// One record of the setup's progress. Unknown fields are tolerated so that a
/// newer `lab-agent setup` and an older server can share a state dir.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupRecord {
    pub state: SetupState,
    /// RFC 3339, UTC.
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Why setup failed when the script itself could not say (did not start,
    /// timed out, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Process that is running the setup; with `boot_id` it lets readiness
    /// tell a running setup from one that died or was cut by a reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// When the script started and finished, in ms since the kernel booted
    /// (with `boot_id`: the setup's place in that boot's timeline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_boot_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_boot_ms: Option<u64>,
    /// The lab's `[readiness] min_root_bytes`, for readiness to hold the
    /// root against on every answer (`root.min_bytes`, `below_min`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_root_bytes: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("failed to read `{path}`: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("`{path}` is not a valid setup record: {source}")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("failed to write `{path}`: {source}")]
    Write { path: PathBuf, source: io::Error },
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(SETUP_JSON)
}

/// The current record, or `None` when setup has never started.
pub fn read(state_dir: &Path) -> Result<Option<SetupRecord>, RecordError> {
    let path = path(state_dir);
    let owned = |p: &Path| std::fs::symlink_metadata(p).and_then(|m| check_owner(p, &m));
    match owned(state_dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(RecordError::Read { path, source }),
        Ok(()) => {}
    }
    let read = read_owned(&path, MAX_STATE_FILE_BYTES);
    match read {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| RecordError::Corrupt { path, source }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(RecordError::Read { path, source }),
    }
}

/// Replaces the record atomically.
pub fn write(state_dir: &Path, record: &SetupRecord) -> Result<(), RecordError> {
    let err = |source| RecordError::Write {
        path: path(state_dir),
        source,
    };
    let mut bytes = serde_json::to_vec(record).map_err(|e| err(io::Error::other(e)))?;
    bytes.push(b'\n');
    write_atomic(state_dir, SETUP_JSON, &bytes).map_err(err)
}

/// Replaces `state_dir/name` with `bytes` atomically: a reader sees the old
/// file or the new one, never a torn one, and a link planted under the
/// name is replaced, never written through.
pub fn write_atomic(state_dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let path = state_dir.join(name);
    let mut tmp_name = String::from(".");
    tmp_name.push_str(name);
    tmp_name.push('.');
    tmp_name.push_str(&std::process::id().to_string());
    tmp_name.push_str(".tmp");
    let tmp = state_dir.join(tmp_name);
    let result = (|| {
        // A fresh file, never a link planted under the temp name: a stale
        // one is removed and O_EXCL|O_NOFOLLOW creates it anew.
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        // Make the rename itself durable: a power cut must not bring back
        // the previous state.
        if let Ok(dir) = std::fs::File::open(state_dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Reads a state file that must be a regular file (not a symlink) owned by
/// the agent's user, of at most `limit` bytes.
pub fn read_owned(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let f = open_regular(path)?;
    check_owner(path, &f.metadata()?)?;
    read_limited(f, limit)
}

/// Creates the state dir if needed and makes sure it can be trusted: a
/// directory (not a symlink to one), ours, never group/world-writable.
pub fn prepare_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    // Ours, and never world-writable: anyone who can write setup.json
    // decides readiness, and could plant links for us to write through.
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a directory (a symlink to one is not accepted)",
        ));
    }
    check_owner(dir, &meta)?;
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & !0o022 & 0o7777))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_round_trips_and_leaves_no_temp_file() {
        let dir = std::env::temp_dir().join(format!("lab-agent-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read(&dir).unwrap(), None);
        let rec = SetupRecord {
            state: SetupState::Failed,
            started_at: "2026-11-29T08:56:44Z".into(),
            finished_at: None,
            exit_code: Some(3),
            signal: None,
            timed_out: false,
            duration_ms: Some(12),
            error: None,
            script: Some("/x".into()),
            pid: Some(1),
            boot_id: None,
            started_boot_ms: None,
            finished_boot_ms: None,
            min_root_bytes: None,
        };
        write(&dir, &rec).unwrap();
        assert_eq!(read(&dir).unwrap(), Some(rec));
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(SETUP_JSON)]);
        std::fs::write(dir.join(SETUP_JSON), b"{\"state\":").unwrap();
        assert!(matches!(read(&dir), Err(RecordError::Corrupt { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Regression: a named pipe in place of `setup.json` blocked the read
    /// (and with it the single-threaded agent) forever.
    #[test]
    fn a_fifo_or_an_enormous_file_is_an_error_not_a_hang() {
        let dir = std::env::temp_dir().join(format!("lab-agent-rec-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = path(&dir);
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read(&dir).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, vec![b' '; MAX_STATE_FILE_BYTES as usize + 1]).unwrap();
        let err = read(&dir).unwrap_err().to_string();
        assert!(err.contains("larger than 1048576 bytes"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
