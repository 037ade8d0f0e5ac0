//! How `labctl` ends: one exit-code enum for every verb, and [`Failure`],
//! the error a verb returns, printed uv-style with its cause chain and hints.

use std::fmt::Write as _;

/// `labctl`'s exit statuses. Scripts and the backend branch on these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: everything asked for worked (all checks passed, all VMs ready).
    Success,
    /// 1: grading ran and at least one check failed.
    CheckFailed,
    /// 2: a usage error: bad arguments, a bad `lab.toml`, an unreadable
    /// token file, a token the agent refuses (401), or a command the agent
    /// cannot start (unknown user, bad cwd).
    Usage,
    /// 3: the agent could not be reached or answered wrongly, or a wait
    /// timed out.
    Unreachable,
    /// 4: the lab's setup failed (the agent reports `failed`).
    SetupFailed,
    /// 5: a check could not run (unknown user, missing cwd, refused by the
    /// agent, no answer): the lab or the platform is at fault, not the
    /// student. Wins over 1.
    CheckError,
    /// 6: the VM is not the instance asked for (`grade --instance`): it was
    /// reset onto a fresh disk and the student's work inside it is gone;
    /// nothing was run.
    InstanceChanged,
    /// `labctl exec`: the command's own status (128 + n if signal n killed it).
    Command(u8),
    /// 130: interrupted by Ctrl-C (143 for SIGTERM), after cleaning up.
    Interrupted(u8),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::CheckFailed => 1,
            Exit::Usage => 2,
            Exit::Unreachable => 3,
            Exit::SetupFailed => 4,
            Exit::CheckError => 5,
            Exit::InstanceChanged => 6,
            Exit::Command(c) | Exit::Interrupted(c) => c,
        }
    }

    /// The exit status for a client error.
    pub fn for_client_error(e: &lab_agent_client::Error) -> Exit {
        use lab_agent_client::Error;
        match e {
            Error::InstanceChanged { .. } => Exit::InstanceChanged,
            e if e.is_setup_failed() => Exit::SetupFailed,
            Error::InvalidUrl { .. } | Error::InvalidInstanceId { .. } | Error::Kube { .. } => {
                Exit::Usage
            }
            e if e.is_unauthorized() => Exit::Usage,
            // The agent refused a command we sent (unknown user, bad cwd):
            // the caller's to fix. A 400 to a request that has nothing of
            // the caller's in it (`/v1/ready`, `/v1/info`) is the guest's
            // doing, like any other wrong answer.
            e if e.status().map(|s| s.as_u16()) == Some(400)
                && e.request().is_some_and(|r| r.method.as_str() == "POST") =>
            {
                Exit::Usage
            }
            _ => Exit::Unreachable,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e.code())
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a verb failed: what it was doing, the underlying error (printed as
/// a cause chain), hints, and the exit status.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    pub source: Option<BoxError>,
    /// `source` is the error `message` was made from: print only its causes.
    source_is_message: bool,
    pub hints: Vec<String>,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Failure {
            exit,
            message: message.into(),
            source: None,
            source_is_message: false,
            hints: Vec::new(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(Exit::Usage, message)
    }

    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self.source_is_message = false;
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// Adds each of `hints` (none, for `None`).
    pub fn hints(mut self, hints: impl IntoIterator<Item = String>) -> Self {
        self.hints.extend(hints);
        self
    }

    /// An error as it stands: its message, then its causes, then `hints`.
    pub fn from_error(
        exit: Exit,
        e: impl std::error::Error + Send + Sync + 'static,
        hints: impl IntoIterator<Item = String>,
    ) -> Self {
        Failure {
            exit,
            message: e.to_string(),
            source: Some(Box::new(e)),
            source_is_message: true,
            hints: hints.into_iter().collect(),
        }
    }

    /// A client error as it stands: its message, causes, hint and status.
    pub fn client(e: lab_agent_client::Error) -> Self {
        let exit = Exit::for_client_error(&e);
        let hints = e.hint();
        Failure::from_error(exit, e, hints)
    }

    /// A lab that failed to load (exit 2); the message names file and field
    /// (and already ends with its cause).
    pub fn lab(e: lab_agent_proto::lab::LabError) -> Self {
        let mut f = Failure::usage(e.to_string());
        f.hints.extend(e.hint().map(str::to_owned));
        f
    }

    /// The text printed on stderr: `error: …`, each cause, each hint.
    /// Control characters other than line breaks are shown escaped: the
    /// client's errors escape the guest's text in them already (an agent's
    /// error message, a reason), and this keeps any other from driving the
    /// terminal. Line breaks are labctl's own (a list of places looked at).
    pub fn render(&self, color: bool) -> String {
        use lab_agent_proto::text::escape_lines as escape;
        let (red, cyan, bold, reset) = if color {
            ("\x1b[1;31m", "\x1b[1;36m", "\x1b[1m", "\x1b[0m")
        } else {
            ("", "", "", "")
        };
        let mut out = format!(
            "{red}error{reset}{bold}:{reset} {}\n",
            escape(&self.message)
        );
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            self.source.as_deref().map(|s| s as _);
        if self.source_is_message {
            cause = cause.and_then(|c| c.source());
        }
        while let Some(c) = cause {
            let _ = writeln!(out, "  {bold}caused by:{reset} {}", escape(&c.to_string()));
            cause = c.source();
        }
        for h in &self.hints {
            let _ = writeln!(out, "{cyan}hint{reset}{bold}:{reset} {}", escape(h));
        }
        out
    }

    /// Stdout was closed by its reader (`labctl secret | head`): not an
    /// error worth a word, as with other command-line tools.
    pub fn is_broken_pipe(&self) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            self.source.as_deref().map(|s| s as _);
        while let Some(c) = cause {
            if c.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            {
                return true;
            }
            cause = c.source();
        }
        false
    }

    pub fn print(&self) {
        eprint!("{}", self.render(crate::color::stderr()));
    }
}
