//! The per-VM bearer token: loading it safely and checking it in constant time.
//!
//! The token protects the agent from *other* pods that could reach port 8899
//! if a network policy were wrong (the student is root in the VM and may read
//! it; that is accepted). So the file must not be readable by anyone but its
//! owner, the token must be long enough not to be guessed, and a comparison
//! must not leak how many leading bytes of a guess were right.

use lab_agent_proto::token_file::read_token_file;
use std::fmt;
use std::path::Path;
use subtle::ConstantTimeEq;

/// Why the token file was refused: the one rule every reader applies.
pub use lab_agent_proto::token_file::TokenFileError as TokenError;

/// A loaded token. `Debug` never prints it.
#[derive(Clone)]
pub struct Token(Box<[u8]>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(<{} bytes, redacted>)", self.0.len())
    }
}

impl Token {
    /// Reads the token file by the one rule (`lab_agent_proto::token_file`):
    /// owner-only, the agent's user's, trimmed, long enough, sendable.
    pub fn load(path: &Path) -> Result<Token, TokenError> {
        read_token_file(path).map(|t| Token(t.into_bytes().into()))
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
        Token(GOOD.as_bytes().into())
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
    fn debug_is_redacted() {
        let shown = format!("{:?}", token());
        assert!(!shown.contains("0123"), "{shown}");
    }
}
