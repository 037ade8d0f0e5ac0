//! `Authorization` values: `Token::verify_header` never panics and accepts
//! exactly `Bearer` (any case), one or more spaces, and the token.
#![no_main]

use lab_agent::Token;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const TOKEN: &str = "fuzz-token-0123456789-abcdefghijklmnopqrstu";

fn token() -> &'static Token {
    static T: OnceLock<Token> = OnceLock::new();
    T.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let path =
            std::env::temp_dir().join(format!("lab-agent-fuzz-token-{}", std::process::id()));
        std::fs::write(&path, TOKEN).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let t = Token::load(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        t
    })
}

fuzz_target!(|data: &[u8]| {
    let accepted = token().verify_header(Some(data));
    let expected = data.len() > 7 && data[..7].eq_ignore_ascii_case(b"bearer ") && {
        let rest = &data[7..];
        let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
        &rest[start..] == TOKEN.as_bytes()
    };
    assert_eq!(accepted, expected, "{:?}", String::from_utf8_lossy(data));
});
