//! `labctl timeline [FILE…]`: where many VMs' preparation time went — per
//! phase (the backend's own stamps when it logged them, kernel to agent
//! start, each cloud-init stage, setup, kernel to ready, request to ready)
//! the count, min, median, p90 and max over the `/v1/ready` answers a
//! backend logged (or `labctl wait --json` outputs); `--svg` draws them.
//! Reading the answers, the statistics and the picture are the client
//! library's ([`Answers`], [`lab_agent_client::distribution`],
//! [`lab_agent_client::timeline::svg`]), so a backend (Python's
//! `timeline_distribution` too) gets the same numbers.

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
    /// Also draw the distribution as an SVG picture into this file
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
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
    let d = distribution(&read.preparations);
    for (doc, stamp) in &read.malformed_stamps {
        eprintln!("note: answer {doc}: backend.{stamp} is not an RFC 3339 time: left out");
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, lab_agent_client::timeline::svg(&d, read.answers)).map_err(|e| {
            Failure::usage(format!("failed to write `{}`", path.display())).with_source(e)
        })?;
    }
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
        "{:<26} {:>6} {:>9} {:>9} {:>9} {:>9}\n",
        "phase (seconds)", "count", "min", "median", "p90", "max"
    );
    for s in &d.phases {
        out.push_str(&format!(
            "{:<26} {:>6} {:>9} {:>9} {:>9} {:>9}\n",
            s.phase.label(),
            s.count,
            secs(s.min_secs),
            secs(s.median_secs),
            secs(s.p90_secs),
            secs(s.max_secs)
        ));
    }
    out
}
