//! The per-VM bearer token: loading it safely and checking it in constant time.
//!
//! The token protects the agent from *other* pods that could reach port 8899
//! if a network policy were wrong (the student is root in the VM and may read
//! it; that is accepted). So the file must not be readable by anyone but its
//! owner, the token must be long enough not to be guessed, and a comparison
//! must not leak how many leading bytes of a guess were right.

use lab_agent_proto::guest::{TokenProblem, check_token};
use std::fmt;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Shortest token the agent accepts (the guest contract's rule).
pub use lab_agent_proto::guest::MIN_TOKEN_LEN as MIN_TOKEN_CHARS;

/// A loaded token. `Debug` never prints it.
#[derive(Clone)]
pub struct Token(Box<[u8]>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(<{} bytes, redacted>)", self.0.len())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "failed to read token file `{path}`: {source}\nhint: the token is written by cloud-init; pass `--token-file PATH` to use another file"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "token file `{path}` is readable by group or others (mode {mode:04o})\nhint: run `chmod 600 {path}`"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error(
        "token file `{path}` is owned by uid {owner}, not by the agent's user (uid {me}): whoever owns it can change the token\nhint: run `chown {me} {path}`"
    )]
    Owner { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "token in `{path}` is {len} characters long; it must be at least {MIN_TOKEN_CHARS}\nhint: `labctl secret` generates a 43-character token, or use `head -c 32 /dev/urandom | base64`"
    )]
    TooShort { path: PathBuf, len: usize },
    #[error(
        "token in `{path}` contains a character that cannot be sent in an HTTP header (only visible ASCII is allowed)"
    )]
    BadCharacter { path: PathBuf },
}

impl Token {
    /// Reads the token file: refuses a file readable by group/other, trims
    /// trailing whitespace (a trailing newline from `echo` is normal), and
    /// refuses a token that is short or unsendable.
    pub fn load(path: &Path) -> Result<Token, TokenError> {
        let read_err = |source| TokenError::Read {
            path: path.to_path_buf(),
            source,
        };
        // Checked on the open file, so what is checked is what is read.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
            .map_err(read_err)?;
        let meta = file.metadata().map_err(read_err)?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(TokenError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
        // Whoever owns the file can change the token (or make it readable):
        // only the agent's own user may.
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me {
            return Err(TokenError::Owner {
                path: path.to_path_buf(),
                owner: meta.uid(),
                me,
            });
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut (&mut file).take(64 * 1024), &mut bytes)
            .map_err(read_err)?;
        Token::from_bytes(&bytes, path)
    }

    fn from_bytes(bytes: &[u8], path: &Path) -> Result<Token, TokenError> {
        let end = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        let token = &bytes[..end];
        // Not UTF-8 is not visible ASCII either.
        match std::str::from_utf8(token).map(check_token) {
            Ok(Ok(())) => {}
            Ok(Err(TokenProblem::TooShort { len })) => {
                return Err(TokenError::TooShort {
                    path: path.to_path_buf(),
                    len,
                });
            }
            Ok(Err(TokenProblem::BadCharacter(_))) | Err(_) => {
                return Err(TokenError::BadCharacter {
                    path: path.to_path_buf(),
                });
            }
        }
        Ok(Token(token.into()))
    }

    /// Checks an `Authorization` header value. The scheme is matched
    /// case-insensitively (RFC 9110); the token in constant time.
    ///
    /// A guess of a different length is rejected without comparing bytes:
    /// that reveals the token's length, which is not secret (every generated
    /// token is 43 characters).
    pub fn verify_header(&self, header: Option<&[u8]>) -> bool {
        let Some(value) = header else {
            return false;
        };
        let Some(given) = strip_bearer(value) else {
            return false;
        };
        bool::from(self.0.as_ref().ct_eq(given))
    }
}

fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    if value.len() < SCHEME.len() || !value[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let rest = &value[SCHEME.len()..];
    // Tolerate extra spaces between scheme and token, as RFC 9110 allows.
    let start = rest.iter().position(|&b| b != b' ')?;
    Some(&rest[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG";

    fn token() -> Token {
        Token::from_bytes(GOOD.as_bytes(), Path::new("t")).unwrap()
    }

    #[test]
    fn accepts_the_right_token_only() {
        let t = token();
        let ok = format!("Bearer {GOOD}");
        assert!(t.verify_header(Some(ok.as_bytes())));
        assert!(t.verify_header(Some(format!("bearer  {GOOD}").as_bytes())));
        for bad in [
            String::new(),
            "Bearer".into(),
            "Bearer ".into(),
            GOOD.into(),
            format!("Basic {GOOD}"),
            format!("Bearer {}", &GOOD[1..]),
            format!("Bearer {GOOD}x"),
            format!("Bearer {}", GOOD.to_uppercase()),
            format!("Bearer {GOOD} "),
            format!("Bearer x{}", &GOOD[1..]),
        ] {
            assert!(!t.verify_header(Some(bad.as_bytes())), "{bad:?} accepted");
        }
        assert!(!t.verify_header(None));
    }

    #[test]
    fn trims_trailing_whitespace_only() {
        let t = Token::from_bytes(format!("{GOOD}\n \t\n").as_bytes(), Path::new("t")).unwrap();
        assert!(t.verify_header(Some(format!("Bearer {GOOD}").as_bytes())));
        let err = Token::from_bytes(format!(" {GOOD}").as_bytes(), Path::new("t")).unwrap_err();
        assert!(matches!(err, TokenError::BadCharacter { .. }));
    }

    #[test]
    fn refuses_short_tokens_with_a_fix() {
        let err = Token::from_bytes(b"short\n", Path::new("/etc/lab-agent/token")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("is 5 characters long"), "{msg}");
        assert!(msg.contains("at least 32"), "{msg}");
        assert!(Token::from_bytes(&[b'a'; 31], Path::new("t")).is_err());
        assert!(Token::from_bytes(&[b'a'; 32], Path::new("t")).is_ok());
    }

    #[test]
    fn debug_is_redacted() {
        let shown = format!("{:?}", token());
        assert!(!shown.contains("0123"), "{shown}");
    }
}
