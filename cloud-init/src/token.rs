//! The one generator of per-VM tokens (feature `fs`), for `labctl secret`,
//! `labctl try` and the Python package's `render_secret`.

use base64::Engine as _;

/// A new per-VM token: 32 bytes from the OS's random source, base64url
/// without padding (43 characters).
pub fn generate() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_43_chars_of_base64url() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_eq!(a.len(), 43);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
            "{a}"
        );
        assert_ne!(a, b);
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&a)
            .unwrap();
        assert_eq!(raw.len(), 32);
        assert_eq!(lab_agent_proto::guest::check_token(&a), Ok(()));
    }
}
