//! Text from the guest, made safe to show a person.
//!
//! The student is root in their VM: whatever answers on the agent's port
//! chooses every string of its answers (a readiness `reason`, a setup
//! `log_tail`, an error message, the `lab_dir` it reports). Printed raw,
//! such a string drives the reader's terminal (`\x1b]…` retitles it,
//! `\x1b[2J` clears it, `\r` or `\n` forges a line). These helpers are the
//! project's one way to show such text: control characters become visible
//! escapes (`\x1b`, `\n`, `\u{9b}`), the way `git` shows a path with
//! `core.quotePath`. Printable text, non-ASCII letters included, is kept.
//!
//! What counts as control: every C0 and C1 character and DEL
//! ([`char::is_control`]), and the Unicode format characters that reorder
//! or split what a terminal shows (bidirectional overrides and isolates,
//! line and paragraph separators).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is shown as an escape rather than as itself.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `s` on one line, every control character escaped (`\n` included).
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_with(s, false)
}

/// `s` with its line breaks kept (each `\n` still ends a line) and every
/// other control character escaped (`\r` included, so no line is
/// overwritten), for multi-line text such as a log tail.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    escape_with(s, true)
}

fn escape_with(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let keep = |c: char| !is_unsafe(c) || (keep_newlines && c == '\n');
    if s.chars().all(keep) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if keep(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// JSON text with the control characters JSON allows raw (DEL, the C1
/// range, the separators and overrides above) written as `\uXXXX`
/// escapes, so that JSON printed on a terminal carries none of them raw.
/// `serde_json` already escapes C0. The result is the same JSON value:
/// these characters can only occur inside strings.
pub fn json_escape_controls(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_unsafe) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_unsafe(c) && (c as u32) >= 0x20 {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_become_visible() {
        assert!(matches!(escape("setup is running"), Cow::Borrowed(_)));
        assert_eq!(escape("héllo ✓"), "héllo ✓");
        assert_eq!(
            escape("a\x1b]0;pwned\x07b\nc\rd\te\0"),
            "a\\x1b]0;pwned\\x07b\\nc\\rd\\te\\x00"
        );
        assert_eq!(
            escape("\u{9b}31m \u{7f} \u{202e}x"),
            "\\u{9b}31m \\x7f \\u{202e}x"
        );
        assert_eq!(escape_lines("one\ntwo\r\x1b[2J"), "one\ntwo\\r\\x1b[2J");
        // Escaping twice changes nothing: the escapes are printable.
        let once = escape("\x1b[31m\n").into_owned();
        assert_eq!(escape(&once), once);
    }

    #[test]
    fn json_stays_the_same_value() {
        let v = serde_json::json!({"reason": "a\u{9b}b\u{7f}c\u{2028}\x1b"});
        let text = serde_json::to_string(&v).unwrap();
        let safe = json_escape_controls(&text);
        assert!(!safe.chars().any(is_unsafe), "{safe}");
        assert!(safe.contains("\\u009b") && safe.contains("\\u007f") && safe.contains("\\u001b"));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v);
    }
}
