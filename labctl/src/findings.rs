//! What linting a lab found ([`lab_runner::inspect`]), printed: `lint`
//! prints it, `try` prints it before it runs the lab.

use super::exit::Failure;
use lab_agent_proto::lab::Lab;
pub use lab_runner::inspect::{Findings, lint};
use std::path::Path;

/// Prints the notes and every problem on stderr; the lab when there were
/// none, else a failure (exit 2) that counts them.
pub fn report(dir: &Path, findings: &Findings) -> Result<Lab, Failure> {
    for note in &findings.notes {
        eprintln!("{note}");
    }
    let color = crate::color::stderr();
    for problem in &findings.problems {
        eprint!("{}", Failure::usage(problem.clone()).render(color));
    }
    match (&findings.lab, findings.problems.len()) {
        (Some(lab), 0) => Ok(lab.clone()),
        (_, n) => Err(Failure::usage(format!(
            "lab `{}` has {n} problem{}: fix {} and lint again (`labctl lint {}`)",
            dir.display(),
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "them" },
            dir.display()
        ))),
    }
}
