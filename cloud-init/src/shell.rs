//! Shell words in pure ASCII, for the installer script.
//!
//! The installer travels in a MIME part, and cloud-init hands a part's body
//! to its handler through Python's `email` package, which turns every
//! character above U+00FF into a literal `\uXXXX` and every Latin-1 one into
//! a lone byte (`get_payload(decode=True)` encodes with `raw-unicode-escape`).
//! So the script must be ASCII, and a file name such as `日本語.txt` is
//! written as `printf` octal escapes that `sh` turns back into its bytes.

use std::fmt::Write as _;

/// `s` as one word that POSIX `sh` reads back as exactly `s`. Printable
/// ASCII goes in single quotes (readable); anything else becomes
/// `"$(printf '\ooo…')"`. `s` must not end in a newline (command
/// substitution strips those): lab file names have no control characters.
pub fn word(s: &str) -> String {
    if s.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return format!("'{}'", s.replace('\'', r"'\''"));
    }
    debug_assert!(!s.ends_with('\n'));
    let mut fmt = String::with_capacity(s.len() * 4);
    for b in s.bytes() {
        // `%`, `\` and `'` would mean something to printf or to the
        // quotes, so they are escaped like every non-ASCII byte.
        if b.is_ascii_alphanumeric() || b"/._-+,:= ".contains(&b) {
            fmt.push(char::from(b));
        } else {
            let _ = write!(fmt, "\\{b:03o}");
        }
    }
    format!("\"$(printf '{fmt}')\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// What `sh` makes of `word(s)`: the bytes `printf %s WORD` prints.
    fn through_sh(shell: &str, s: &str) -> Vec<u8> {
        let out = Command::new(shell)
            .arg("-c")
            .arg(format!("printf %s {}", word(s)))
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        out.stdout
    }

    #[test]
    fn words_are_ascii_and_read_back_exactly() {
        let cases = [
            "plain",
            "with space",
            "quote'single",
            "quote\"double",
            "back\\slash",
            "dollar $HOME `id` $(id)",
            "percent %s %d %%",
            "-leading-dash",
            "ünï ✓/日本語.txt",
            "mixed 'ü' %s \\n",
            "emoji 🦀",
            "trailing space ",
        ];
        for shell in ["sh", "bash"] {
            for s in cases {
                let w = word(s);
                assert!(w.is_ascii(), "{w}");
                assert_eq!(through_sh(shell, s), s.as_bytes(), "{shell}: {s:?} as {w}");
            }
        }
    }

    #[test]
    fn printable_ascii_stays_readable() {
        assert_eq!(word("/opt/lab/a b"), "'/opt/lab/a b'");
        assert_eq!(word("it's"), r"'it'\''s'");
        assert_eq!(word("ü"), r#""$(printf '\303\274')""#);
    }
}
