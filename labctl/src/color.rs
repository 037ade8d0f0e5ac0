//! Whether to colour output: only on a terminal that can show it, and never
//! when the user said no. The conventions followed: `NO_COLOR` set to a
//! non-empty value turns colour off (no-color.org: an empty one does not);
//! `TERM=dumb` (Emacs shells, some CI logs) cannot show escape codes.

use std::io::IsTerminal;

/// Colour for stdout.
pub fn stdout() -> bool {
    enabled(std::io::stdout().is_terminal(), |k| std::env::var_os(k))
}

/// Colour for stderr.
pub fn stderr() -> bool {
    enabled(std::io::stderr().is_terminal(), |k| std::env::var_os(k))
}

/// Whether a terminal can take live redraws (cursor movement): any
/// terminal but a dumb one, whatever `NO_COLOR` says.
pub fn stderr_live() -> bool {
    std::io::stderr().is_terminal() && !is_dumb(|k| std::env::var_os(k))
}

/// The rule, with the terminal test and the environment passed in.
pub fn enabled(is_terminal: bool, var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    let no_color = var("NO_COLOR").is_some_and(|v| !v.is_empty());
    is_terminal && !no_color && !is_dumb(var)
}

fn is_dumb(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    var("TERM").is_some_and(|t| t == "dumb")
}
