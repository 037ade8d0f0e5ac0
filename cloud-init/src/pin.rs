//! What a payload that does not carry the agent pins it by
//! (`--agent-from disk`): the SHA-256 of the exact static agent its VM must
//! run, and its size. The guest's installer checks the agent it takes from
//! the agent disk against both before anything runs it.

use sha2::{Digest as _, Sha256};
use std::fmt::Write as _;

/// The agent a VM must run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPin {
    /// 64 lower-case hex digits, as `sha256sum` prints them.
    pub sha256: String,
    pub size: u64,
}

impl AgentPin {
    /// The pin of `agent`'s bytes.
    pub fn of(agent: &[u8]) -> AgentPin {
        AgentPin {
            sha256: sha256_hex(agent),
            size: agent.len() as u64,
        }
    }

    /// The first 12 hex digits, for messages a person reads.
    pub fn short(&self) -> &str {
        &self.sha256[..12]
    }
}

/// SHA-256 of `bytes` in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        // FIPS 180-2's "abc" and the empty string.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            AgentPin::of(b""),
            AgentPin {
                sha256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
                size: 0
            }
        );
        assert_eq!(AgentPin::of(b"abc").short(), "ba7816bf8f01");
    }
}
