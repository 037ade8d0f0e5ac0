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
//!
//! Whole manifests (the VM, the Service, the NetworkPolicy: [`crate::manifest`])
//! are a [`Node`] tree written by [`document`]: block style, two-space
//! indents, kubectl's layout of lists; field names as they are, every other
//! key and every string value quoted as above; a fixed comment may precede
//! an entry. The same tree is also JSON ([`Node::to_json`]).

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

/// A YAML value of a manifest the crate writes whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Str(String),
    /// One of our constants (a kind, an enum's value), written unquoted:
    /// a letter, then letters, digits, `.`, `/`, `-`; no YAML 1.1 keyword.
    Plain(&'static str),
    Int(i64),
    Bool(bool),
    Map(Vec<Entry>),
    List(Vec<Node>),
}

/// One `key: value` of a [`Node::Map`], with an optional comment above it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: Key,
    pub value: Node,
    /// Our own text (ASCII, lines joined by `\n`), never the caller's.
    pub comment: Option<&'static str>,
}

/// A map key: a schema's field name, written plain, or the caller's text
/// (a label key), quoted like any string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Field(&'static str),
    Text(String),
}

impl Key {
    fn as_str(&self) -> &str {
        match self {
            Key::Field(f) => f,
            Key::Text(t) => t,
        }
    }
}

/// `key: value`, the key a schema's field name.
pub fn field(key: &'static str, value: impl Into<Node>) -> Entry {
    Entry {
        key: Key::Field(key),
        value: value.into(),
        comment: None,
    }
}

/// `"key": value`, the key the caller's (a label's, a selector's).
pub fn text(key: impl Into<String>, value: impl Into<Node>) -> Entry {
    Entry {
        key: Key::Text(key.into()),
        value: value.into(),
        comment: None,
    }
}

impl Entry {
    /// The same entry with `comment` above it.
    pub fn comment(mut self, comment: &'static str) -> Entry {
        self.comment = Some(comment);
        self
    }
}

impl Node {
    pub fn map(entries: impl IntoIterator<Item = Entry>) -> Node {
        Node::Map(entries.into_iter().collect())
    }

    pub fn list(items: impl IntoIterator<Item = Node>) -> Node {
        Node::List(items.into_iter().collect())
    }

    /// A map of the caller's keys and string values (labels, selectors).
    pub fn strings<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> Node {
        Node::map(pairs.into_iter().map(|(k, v)| text(k.clone(), v.as_str())))
    }

    /// The same value as JSON (comments dropped; object keys sorted).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Node::Str(s) => Value::String(s.clone()),
            Node::Plain(s) => Value::String((*s).to_owned()),
            Node::Int(i) => Value::from(*i),
            Node::Bool(b) => Value::Bool(*b),
            Node::List(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Node::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|e| (e.key.as_str().to_owned(), e.value.to_json()))
                    .collect(),
            ),
        }
    }
}

impl From<&str> for Node {
    fn from(s: &str) -> Node {
        Node::Str(s.to_owned())
    }
}

impl From<String> for Node {
    fn from(s: String) -> Node {
        Node::Str(s)
    }
}

impl From<bool> for Node {
    fn from(b: bool) -> Node {
        Node::Bool(b)
    }
}

impl From<i64> for Node {
    fn from(i: i64) -> Node {
        Node::Int(i)
    }
}

impl From<u32> for Node {
    fn from(i: u32) -> Node {
        Node::Int(i.into())
    }
}

impl From<u16> for Node {
    fn from(i: u16) -> Node {
        Node::Int(i.into())
    }
}

/// `root` (a map) as one YAML document, ending with a newline.
pub fn document(root: &Node) -> String {
    let mut out = String::new();
    match root {
        Node::Map(entries) if !entries.is_empty() => write_entries(&mut out, entries, 0),
        other => {
            write_scalar_or_empty(&mut out, other);
            out.push('\n');
        }
    }
    out
}

fn write_entries(out: &mut String, entries: &[Entry], indent: usize) {
    for entry in entries {
        write_comment(out, entry, indent);
        pad(out, indent);
        write_entry(out, entry, indent);
    }
}

/// The entry from its key on (the caller wrote the indentation or `- `).
fn write_entry(out: &mut String, entry: &Entry, indent: usize) {
    match &entry.key {
        Key::Field(f) => out.push_str(f),
        Key::Text(t) => quoted(out, t),
    }
    out.push(':');
    match &entry.value {
        Node::Map(entries) if !entries.is_empty() => {
            out.push('\n');
            write_entries(out, entries, indent + 2);
        }
        Node::List(items) if !items.is_empty() => {
            out.push('\n');
            write_items(out, items, indent + 2);
        }
        other => {
            out.push(' ');
            write_scalar_or_empty(out, other);
            out.push('\n');
        }
    }
}

fn write_items(out: &mut String, items: &[Node], indent: usize) {
    for item in items {
        match item {
            Node::Map(entries) if !entries.is_empty() => {
                // The first entry shares the dash's line: its comment goes
                // above the dash.
                write_comment(out, &entries[0], indent);
                pad(out, indent);
                out.push_str("- ");
                write_entry(out, &entries[0], indent + 2);
                write_entries(out, &entries[1..], indent + 2);
            }
            Node::List(inner) if !inner.is_empty() => {
                pad(out, indent);
                out.push_str("-\n");
                write_items(out, inner, indent + 2);
            }
            other => {
                pad(out, indent);
                out.push_str("- ");
                write_scalar_or_empty(out, other);
                out.push('\n');
            }
        }
    }
}

fn write_scalar_or_empty(out: &mut String, node: &Node) {
    match node {
        Node::Str(s) => quoted(out, s),
        Node::Plain(s) => {
            debug_assert!(plain_ok(s), "{s:?} needs quotes");
            out.push_str(s);
        }
        Node::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Map(_) => out.push_str("{}"),
        Node::List(_) => out.push_str("[]"),
    }
}

/// Whether `s` reads back as the same string unquoted, in YAML 1.1 and 1.2.
fn plain_ok(s: &str) -> bool {
    const KEYWORDS: [&str; 12] = [
        "y", "yes", "n", "no", "true", "false", "on", "off", "null", "none", "nan", "inf",
    ];
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-'))
        && !KEYWORDS.contains(&s.to_ascii_lowercase().as_str())
}

fn write_comment(out: &mut String, entry: &Entry, indent: usize) {
    if let Some(comment) = entry.comment {
        for line in comment.lines() {
            debug_assert!(line.chars().all(|c| (' '..='~').contains(&c)), "{line:?}");
            pad(out, indent);
            out.push_str("# ");
            out.push_str(line);
            out.push('\n');
        }
    }
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
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

    #[test]
    fn a_tree_is_written_in_block_style_with_quoted_values() {
        let root = Node::map([
            field("apiVersion", Node::Plain("kubevirt.io/v1")),
            field(
                "metadata",
                Node::map([
                    field("name", "a"),
                    field("labels", Node::map([text("x/y", "z: #")])).comment("why\nand why"),
                ]),
            ),
            field(
                "items",
                Node::list([
                    Node::map([
                        field("name", "one").comment("first"),
                        field("n", 1u32),
                        field("ok", true),
                    ]),
                    Node::map([field("empty", Node::map([])), field("none", Node::list([]))]),
                    Node::from("plain"),
                    Node::list([Node::from(-1i64)]),
                ]),
            ),
        ]);
        let want = concat!(
            "apiVersion: kubevirt.io/v1\n",
            "metadata:\n  name: \"a\"\n  # why\n  # and why\n  labels:\n    \"x/y\": \"z: #\"\n",
            "items:\n  # first\n  - name: \"one\"\n    n: 1\n    ok: true\n",
            "  - empty: {}\n    none: []\n  - \"plain\"\n  -\n    - -1\n",
        );
        assert_eq!(document(&root), want);
        assert!(plain_ok("virtio") && plain_ok("kubevirt.io/v1") && plain_ok("LAB-AGENT"));
        for word in ["None", "yes", "On", "8899", "a b", "a:b", ""] {
            assert!(!plain_ok(word), "{word}");
        }
        assert_eq!(
            root.to_json(),
            serde_json::json!({"apiVersion": "kubevirt.io/v1", "metadata": {"name": "a", "labels": {"x/y": "z: #"}},
                "items": [{"name": "one", "n": 1, "ok": true}, {"empty": {}, "none": []}, "plain", [-1]]})
        );
    }
}
