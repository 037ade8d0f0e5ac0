//! The only YAML writer of the crate: every string value goes out as a
//! double-quoted scalar with escapes, so no file name or content can change
//! the structure of the document.
//!
//! Why not a YAML library: we only *write* YAML, with a fixed shape, and the
//! reader is PyYAML (cloud-init) or sigs.k8s.io/yaml (kubectl). Double-quoted
//! scalars are the one style both read identically for any string: every
//! byte that could mean something else (quotes, backslashes, control
//! characters, YAML 1.1 line breaks such as U+0085 and U+2028) is escaped;
//! `:`, `#`, `---` and leading spaces are plain content inside the quotes.
//!
//! The output is ASCII: every other character is a `\u`/`\U` escape.

use std::fmt::Write as _;

/// Appends `s` as a double-quoted scalar on one line.
pub fn quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        push_escaped(out, c);
    }
    out.push('"');
}

/// Appends `s` as a double-quoted scalar that keeps one YAML line per line of
/// `s`, so scripts and unit files stay readable in the user-data.
///
/// Each newline of `s` is written as the escape `\n` followed by an escaped
/// line break (`\` at the end of the line), which YAML joins without adding a
/// space; continuation lines are indented by `indent` spaces, which YAML
/// strips. A space or tab that begins a content line is escaped, because the
/// parser would strip it as indentation. A trailing newline of `s` stays on
/// the last line (`…\n"`), so no line is left holding only the closing quote.
pub fn quoted_lines(out: &mut String, s: &str, indent: usize) {
    out.push('"');
    let mut line_start = true;
    let mut rest = s.chars().peekable();
    while let Some(c) = rest.next() {
        if line_start && c == ' ' {
            // `\ ` is YAML's escape for a space that would otherwise be
            // stripped as the continuation line's indentation.
            out.push_str("\\ ");
        } else {
            push_escaped(out, c);
        }
        line_start = false;
        if c == '\n' && rest.peek().is_some() {
            out.push_str("\\\n");
            out.extend(std::iter::repeat_n(' ', indent));
            line_start = true;
        }
    }
    out.push('"');
}

/// The escape sequences are those of YAML 1.1 §5.7 / 1.2 §5.7, which PyYAML
/// and Go's yaml both implement.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\0' => out.push_str("\\0"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\u{1b}' => out.push_str("\\e"),
        // YAML 1.1 line breaks: PyYAML folds a raw NEL like a newline, and
        // parsers disagree on LS and PS; escaped, every parser agrees.
        '\u{85}' => out.push_str("\\N"),
        '\u{2028}' => out.push_str("\\L"),
        '\u{2029}' => out.push_str("\\P"),
        // Other C0/C1 controls and DEL are not printable in a YAML stream.
        c if c < ' ' || ('\u{7f}'..='\u{9f}').contains(&c) => {
            let _ = write!(out, "\\x{:02X}", c as u32);
        }
        // Everything else outside ASCII: the user-data must be ASCII (a
        // MIME part's non-ASCII text is mangled by Python's `email` on its
        // way to cloud-init's handlers, see `shell.rs`), and this also
        // covers what YAML cannot print (U+FFFE, U+FFFF) and the byte-order
        // mark, invisible and easily mistaken for a stream marker.
        c if c > '~' && c <= '\u{ffff}' => {
            let _ = write!(out, "\\u{:04X}", c as u32);
        }
        c if c > '~' => {
            let _ = write!(out, "\\U{:08X}", c as u32);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> String {
        let mut out = String::new();
        quoted(&mut out, s);
        out
    }

    fn ql(s: &str) -> String {
        let mut out = String::new();
        quoted_lines(&mut out, s, 4);
        out
    }

    #[test]
    fn escapes_what_would_break_the_document() {
        let cases: &[(&str, &str)] = &[
            ("plain", r#""plain""#),
            ("a: b # c", r#""a: b # c""#),
            ("say \"hi\"", r#""say \"hi\"""#),
            ("back\\slash", r#""back\\slash""#),
            ("---", r#""---""#),
            ("  lead", r#""  lead""#),
            ("tab\there", r#""tab\there""#),
            ("nul\0", r#""nul\0""#),
            ("bell\u{7}", r#""bell\x07""#),
            ("del\u{7f}", r#""del\x7F""#),
            ("nel\u{85}ls\u{2028}ps\u{2029}", r#""nel\Nls\Lps\P""#),
            ("bom\u{feff}", r#""bom\uFEFF""#),
            ("héllo ✓ 🦀", r#""h\u00E9llo \u2713 \U0001F980""#),
            ("a\r\nb", r#""a\r\nb""#),
        ];
        for (input, want) in cases {
            assert_eq!(q(input), *want, "for {input:?}");
        }
    }

    #[test]
    fn multi_line_keeps_one_yaml_line_per_line() {
        assert_eq!(ql("a\nb\n"), "\"a\\n\\\n    b\\n\"");
        assert_eq!(ql("a\n  b"), "\"a\\n\\\n    \\  b\"");
        assert_eq!(ql("a\n\tb"), "\"a\\n\\\n    \\tb\"");
        assert_eq!(ql("a\n\n"), "\"a\\n\\\n    \\n\"");
        assert_eq!(ql("\n"), "\"\\n\"");
        assert_eq!(ql(" x"), "\"\\ x\"");
        assert_eq!(ql(""), "\"\"");
    }
}
