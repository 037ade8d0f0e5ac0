//! The one token-file reader: the agent (`--token-file`), `labctl`
//! (`--token-file`, `secret --token-file`) and the Python package
//! (`token_file=`) read a token file by this one rule.
//!
//! The token lets whoever holds it run commands as root in a lab VM, so its
//! file is held to the rule the agent has always applied to its own: opened
//! without following a FIFO into a hang (non-blocking, a regular file only,
//! at most [`MAX_TOKEN_FILE_BYTES`]), readable by its owner alone, owned by
//! the user reading it (whoever owns it can change the token or make it
//! readable), trimmed of trailing whitespace (a newline from `echo` is
//! normal), then the token rule ([`check_token`]). std only: the agent
//! links this, and its size is a budget.

use crate::guest::{MIN_TOKEN_LEN, TokenProblem, check_token};
use std::fmt;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// More than any token needs; a bigger file is not a token file.
pub const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// `O_NONBLOCK` (the same on every Linux architecture the agent ships for):
/// opening a FIFO put where the token file should be must not hang.
const O_NONBLOCK: i32 = 0o4000;

unsafe extern "C" {
    /// libc's, which std already links: no dependency for one call.
    safe fn geteuid() -> u32;
}

/// Why a token file was refused; each says how to fix it.
#[derive(Debug)]
pub enum TokenFileError {
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    NotAFile {
        path: PathBuf,
    },
    TooBig {
        path: PathBuf,
    },
    Exposed {
        path: PathBuf,
        mode: u32,
    },
    Owner {
        path: PathBuf,
        owner: u32,
        me: u32,
    },
    Invalid {
        path: PathBuf,
        problem: TokenProblem,
    },
}

impl fmt::Display for TokenFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenFileError::Read { path, source } => write!(
                f,
                "failed to read token file `{}`: {source}",
                path.display()
            ),
            TokenFileError::NotAFile { path } => write!(
                f,
                "token file `{}` is not a regular file\nhint: point at the file that holds the token",
                path.display()
            ),
            TokenFileError::TooBig { path } => write!(
                f,
                "token file `{}` is larger than {MAX_TOKEN_FILE_BYTES} bytes: it should hold the token alone",
                path.display()
            ),
            TokenFileError::Exposed { path, mode } => write!(
                f,
                "token file `{p}` is readable by group or others (mode {mode:04o})\nhint: run `chmod 600 {p}`",
                p = path.display()
            ),
            TokenFileError::Owner { path, owner, me } => write!(
                f,
                "token file `{p}` is owned by uid {owner}, not by this user (uid {me}): whoever owns it can change the token\nhint: run `chown {me} {p}`",
                p = path.display()
            ),
            TokenFileError::Invalid { path, problem } => {
                write!(f, "invalid token in `{}`: {problem}", path.display())
            }
        }
    }
}

impl std::error::Error for TokenFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TokenFileError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads `path` by the rule above; the token, trimmed.
pub fn read_token_file(path: &Path) -> Result<String, TokenFileError> {
    let read_err = |source| TokenFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Checked on the open file, so what is checked is what is read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    let path = path.to_path_buf();
    if !meta.is_file() {
        return Err(TokenFileError::NotAFile { path });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(TokenFileError::Exposed { path, mode });
    }
    let me = geteuid();
    if meta.uid() != me {
        return Err(TokenFileError::Owner {
            path,
            owner: meta.uid(),
            me,
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| TokenFileError::Read {
            path: path.clone(),
            source,
        })?;
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(TokenFileError::TooBig { path });
    }
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    bytes.truncate(end);
    // Not UTF-8 is not visible ASCII either.
    let token = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let len = e.as_bytes().len();
            let problem = if len < MIN_TOKEN_LEN {
                TokenProblem::TooShort { len }
            } else {
                TokenProblem::BadCharacter(char::REPLACEMENT_CHARACTER)
            };
            return Err(TokenFileError::Invalid { path, problem });
        }
    };
    check_token(&token).map_err(|problem| TokenFileError::Invalid { path, problem })?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, content: &[u8], mode: u32) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lab-agent-token-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn the_rule() {
        let good = "a".repeat(43);
        let p = file("good", format!("{good}\n \n").as_bytes(), 0o600);
        assert_eq!(read_token_file(&p).unwrap(), good);

        let p = file("exposed", good.as_bytes(), 0o644);
        let e = read_token_file(&p).unwrap_err().to_string();
        assert!(
            e.contains("readable by group or others") && e.contains("chmod 600"),
            "{e}"
        );

        let p = file("short", b"abc\n", 0o600);
        let e = read_token_file(&p).unwrap_err().to_string();
        assert!(e.contains("3 characters long"), "{e}");

        let p = file("space", format!("{good} x").as_bytes(), 0o600);
        let e = read_token_file(&p).unwrap_err().to_string();
        assert!(e.contains("visible"), "{e}");

        let p = file("binary", &[0xff; 40], 0o600);
        let e = read_token_file(&p).unwrap_err().to_string();
        assert!(e.contains("visible"), "{e}");

        let p = file("big", &vec![b'a'; MAX_TOKEN_FILE_BYTES as usize + 1], 0o600);
        let e = read_token_file(&p).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");

        let e = read_token_file(&p.with_file_name("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("failed to read token file"), "{e}");

        let dir = p.parent().unwrap();
        let e = read_token_file(dir).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
