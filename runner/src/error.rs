//! The runner's one error type: what happened (a message and its cause),
//! what to do about it (hints), and whose it is to fix ([`ErrorKind`]), so
//! a front end prints it and picks its exit status without parsing text.

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Whose an [`Error`] is to fix; `labctl` maps it to its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller's: an argument, a file, a tool or permission this machine
    /// lacks (`labctl` exits 2).
    Usage,
    /// The lab's agent or machine did not come up, or went away (`labctl`
    /// exits 3).
    Unreachable,
}

/// Why starting, reaching or stopping a lab failed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<BoxError>,
    hints: Vec<String>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            source: None,
            hints: Vec::new(),
        }
    }

    /// An [`ErrorKind::Usage`] error.
    pub fn usage(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Usage, message)
    }

    /// An [`ErrorKind::Unreachable`] error.
    pub fn unreachable(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Unreachable, message)
    }

    pub(crate) fn with_source(mut self, source: impl Into<BoxError>) -> Error {
        self.source = Some(source.into());
        self
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Error {
        self.hints.push(hint.into());
        self
    }

    /// Adds each of `hints` (none, for `None`).
    pub(crate) fn hints(mut self, hints: impl IntoIterator<Item = String>) -> Error {
        self.hints.extend(hints);
        self
    }

    /// The same error, its message led by the session's VM it is about.
    pub(crate) fn on_vm(mut self, vm: &str) -> Error {
        self.message = format!("VM `{vm}`: {}", self.message);
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What to do about it, one line each (without a `hint:` prefix).
    pub fn hint_lines(&self) -> &[String] {
        &self.hints
    }

    /// The message, the cause and the hints, for a front end that prints
    /// them its own way.
    pub fn into_parts(self) -> (String, Option<BoxError>, Vec<String>) {
        (self.message, self.source, self.hints)
    }
}

/// A failure to find or load the agent binary, with its hint.
impl From<lab_agent_cloudinit::agent_bin::AgentBinError> for Error {
    fn from(e: lab_agent_cloudinit::agent_bin::AgentBinError) -> Error {
        let hint = e.hint();
        let mut err = Error::usage(e.to_string());
        if let Some(source) = std::error::Error::source(&e) {
            err = err.with_source(source.to_string());
        }
        err.hints(hint)
    }
}

/// A lab that failed to load; the message names file and field (and
/// already ends with its cause).
impl From<lab_agent_proto::lab::LabError> for Error {
    fn from(e: lab_agent_proto::lab::LabError) -> Error {
        let err = Error::usage(e.to_string());
        err.hints(e.hint().map(str::to_owned))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_message_cause_and_hints_apart() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Error::unreachable("failed to read `/x`")
            .with_source(io)
            .hint("write it first");
        assert_eq!(e.kind(), ErrorKind::Unreachable);
        assert_eq!(e.to_string(), "failed to read `/x`");
        assert_eq!(
            std::error::Error::source(&e).map(|s| s.to_string()),
            Some("no such file".to_owned())
        );
        let (message, source, hints) = e.into_parts();
        assert_eq!(message, "failed to read `/x`");
        assert!(source.is_some());
        assert_eq!(hints, ["write it first"]);
    }
}
