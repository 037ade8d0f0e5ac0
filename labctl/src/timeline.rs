//! `labctl timeline [FILE…]`: where many VMs' preparation time went — per
//! phase (kernel to agent start, each cloud-init stage, setup, kernel to
//! ready) the count, median, p90 and max over the `/v1/ready` answers a
//! backend logged (or `labctl wait --json` outputs). Reading the answers
//! and the statistics are the client library's ([`Answers`],
//! [`lab_agent_client::distribution`]), so a backend computing them itself
//! gets the same numbers.

use super::exit::{Exit, Failure};
use super::life::secs;
use lab_agent_client::{Answers, AnswersError, Distribution, distribution};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct TimelineArgs {
    /// Files of `/v1/ready` answers or `labctl wait --json` outputs, one
    /// JSON document per line or a JSON array; `-` is stdin [default: stdin]
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print the distribution as JSON on stdout
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &TimelineArgs) -> Result<Exit, Failure> {
    let stdin = [PathBuf::from("-")];
    let files = if args.files.is_empty() {
        &stdin[..]
    } else {
        &args.files[..]
    };
    let mut read = Answers::default();
    for file in files {
        let (name, text) = read_source(file)?;
        read.read(&text).map_err(|e| answers_failure(&name, e))?;
    }
    let without = read.without_timeline();
    let d = distribution(&read.timelines);
    if without > 0 {
        eprintln!(
            "note: {without} of {} answers carry no timeline (an agent that predates it, or a VM \
             that never answered): skipped",
            read.answers
        );
    }
    if read.answers == 0 {
        eprintln!("note: no answers read");
    }
    // A reader that stops early (`| head`) is not an error.
    let _ = if args.json {
        // Numbers and this module's own names: no guest text to escape.
        writeln!(std::io::stdout(), "{}", read.to_json(&d))
    } else {
        write!(std::io::stdout(), "{}", table(&d))
    };
    Ok(Exit::Success)
}

/// `(name to show, content)` of a FILE argument; `-` is stdin.
fn read_source(file: &Path) -> Result<(String, String), Failure> {
    let unreadable = |name: &str, e: std::io::Error| {
        Failure::usage(format!("failed to read `{name}`"))
            .with_source(e)
            .hint("give files of logged `/v1/ready` answers, or `-` for stdin")
    };
    if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| unreadable("stdin", e))?;
        return Ok(("stdin".to_owned(), text));
    }
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| unreadable(&name, e))?;
    Ok((name, text))
}

/// Why `name` holds no answers, for people: where, and what to give.
fn answers_failure(name: &str, e: AnswersError) -> Failure {
    match e {
        AnswersError::NotJson { line, source } => {
            Failure::usage(format!("`{name}` is not JSON at line {line}"))
                .with_source(source)
                .hint(
                    "give `/v1/ready` answers or `labctl wait --json` outputs, one per line or \
                     as a JSON array",
                )
        }
        other => Failure::usage(format!("`{name}`, {other}")),
    }
}

/// A table for people: a row per phase, in seconds.
fn table(d: &Distribution) -> String {
    let mut out = format!(
        "{:<26} {:>6} {:>9} {:>9} {:>9}\n",
        "phase (seconds)", "count", "median", "p90", "max"
    );
    for s in &d.phases {
        out.push_str(&format!(
            "{:<26} {:>6} {:>9} {:>9} {:>9}\n",
            s.phase.label(),
            s.count,
            secs(s.median_secs),
            secs(s.p90_secs),
            secs(s.max_secs)
        ));
    }
    out
}
