//! Logging: `tracing` macros at the call sites, and this small subscriber
//! that writes one line per event to stderr (journald adds its own
//! timestamp under systemd; ours helps everywhere else).
//!
//! Not `tracing-subscriber`: its registry, span storage and formatters
//! cost ~30 KiB of an agent whose size is paid on every lab VM's first boot,
//! and the agent needs none of them: it logs events, not spans.
//!
//! `RUST_LOG` takes a level (`info`, `debug`, …) or `lab_agent=LEVEL`
//! directives, comma-separated; the default is `info`.

use std::fmt::{self, Write as _};
use std::io::Write as _;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

pub fn init() {
    let max = std::env::var("RUST_LOG")
        .ok()
        .and_then(|s| parse_filter(&s))
        .unwrap_or(LevelFilter::INFO);
    let _ = tracing::subscriber::set_global_default(LineLogger { max });
}

/// The level `RUST_LOG` asks for this crate, if it names one.
pub fn parse_filter(spec: &str) -> Option<LevelFilter> {
    let mut level = None;
    for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let value = match directive.split_once('=') {
            None => directive,
            Some((target, value)) if target == "lab_agent" || target.starts_with("lab_agent::") => {
                value
            }
            Some(_) => continue,
        };
        if let Ok(l) = value.parse::<LevelFilter>() {
            level = Some(l);
        }
    }
    level
}

struct LineLogger {
    max: LevelFilter,
}

impl Subscriber for LineLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.max >= *metadata.level()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    // The agent records no spans; these keep the contract without storage.
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = String::with_capacity(160);
        line.push_str(&crate::timefmt::rfc3339_millis(std::time::SystemTime::now()));
        let _ = write!(line, " {:>5} ", level_name(event.metadata().level()));
        let mut fields = Fields {
            line: &mut line,
            rest: String::new(),
        };
        event.record(&mut fields);
        let rest = std::mem::take(&mut fields.rest);
        line.push_str(&rest);
        line.push('\n');
        // One write per line, so concurrent lines never interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

fn level_name(l: &Level) -> &'static str {
    match *l {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// Longest value a log line carries for one field; a request controls most
/// of them (user, path, command), so none may flood the log.
pub const MAX_FIELD_CHARS: usize = 512;

/// `s` made safe for one log line: control characters (newlines, NUL, ANSI
/// escapes), quotes and backslashes escaped as in Rust's `escape_debug`, and
/// cut to `max` characters with the original length noted, so no value can
/// forge a line or make one huge.
pub fn clean(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max) + 16);
    for (n, c) in s.chars().enumerate() {
        if n == max {
            let _ = write!(out, "…[{} bytes]", s.len());
            break;
        }
        if c.is_control() || c == '"' || c == '\\' || c == '\u{2028}' || c == '\u{2029}' {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// At most `max` characters of `s` (on a character boundary), with the
/// original length noted when cut. The logger escapes; this only shortens.
pub fn cut(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…[{} bytes]", &s[..i], s.len()).into(),
        None => s.into(),
    }
}

/// Writes the message first, then ` key=value` pairs.
struct Fields<'a> {
    line: &'a mut String,
    rest: String,
}

impl Visit for Fields<'_> {
    // Everything goes through `record_str`, so every value, however it was
    // passed (`%`, `?`, a plain string), is escaped and cut there.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        self.record_str(field, &text);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let clean = clean(value, MAX_FIELD_CHARS);
        if field.name() == "message" {
            self.line.push_str(&clean);
        } else if !value.is_empty() && value.bytes().all(|b| b.is_ascii_graphic() && b != b'"') {
            let _ = write!(self.rest, " {}={clean}", field.name());
        } else {
            let _ = write!(self.rest, " {}=\"{clean}\"", field.name());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        let _ = write!(self.rest, " {}={value}", field.name());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let _ = write!(self.rest, " {}={value}", field.name());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        let _ = write!(self.rest, " {}={value}", field.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_cut() {
        assert_eq!(
            clean("nobody\n2026 INFO forged", 100),
            "nobody\\n2026 INFO forged"
        );
        assert_eq!(clean("a\0b\"c\\", 100), "a\\0b\\\"c\\\\");
        assert_eq!(clean("\u{1b}[31m", 100), "\\u{1b}[31m");
        assert_eq!(clean(&"x".repeat(10_000), 3), "xxx…[10000 bytes]");
        assert_eq!(clean("éé", 1), "é…[4 bytes]");
    }

    #[test]
    fn filter_directives() {
        assert_eq!(parse_filter("debug"), Some(LevelFilter::DEBUG));
        assert_eq!(
            parse_filter("hyper=trace,lab_agent=warn"),
            Some(LevelFilter::WARN)
        );
        assert_eq!(
            parse_filter("lab_agent::http::server=trace"),
            Some(LevelFilter::TRACE)
        );
        assert_eq!(parse_filter("off"), Some(LevelFilter::OFF));
        assert_eq!(parse_filter("hyper=trace"), None);
        assert_eq!(parse_filter("nonsense"), None);
    }
}
