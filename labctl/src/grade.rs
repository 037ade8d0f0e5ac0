//! `labctl grade`: run a lab's checks against a VM and report.

use super::common::{self, AgentArgs};
use super::exit::{Exit, Failure};
use super::report::{self, Style};
use lab_agent_client::{Client, GradeReport};
use lab_agent_proto::lab::Lab;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct GradeArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab: PathBuf,
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Where the lab's files are in the guest: the checks' `LAB_DIR`
    #[arg(long = "lab-dir", value_name = "PATH", default_value = lab_agent_proto::GUEST_LAB_DIR)]
    pub guest_lab_dir: String,
    /// Print the report as JSON on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug)]
pub struct Config {
    lab: Lab,
    client: Client,
    guest_lab_dir: String,
    json: bool,
}

impl Config {
    pub fn from_args(args: &GradeArgs) -> Result<Config, Failure> {
        let lab = Lab::load(&args.lab).map_err(Failure::lab)?;
        if !args.guest_lab_dir.starts_with('/') {
            return Err(Failure::usage(format!(
                "`--lab-dir {}` is not an absolute path in the guest",
                args.guest_lab_dir
            )));
        }
        Ok(Config {
            lab,
            client: args.agent.client()?,
            guest_lab_dir: args.guest_lab_dir.clone(),
            json: args.json,
        })
    }
}

pub fn run(args: &GradeArgs) -> Result<Exit, Failure> {
    let config = Config::from_args(args)?;
    let rt = common::runtime()?;
    let report = rt.block_on(grade_and_print(
        &config.client,
        &config.lab,
        &config.guest_lab_dir,
        config.json,
    ))?;
    Ok(exit_for(&report))
}

/// 0 when every check passed, 1 otherwise.
pub fn exit_for(report: &GradeReport) -> Exit {
    if report.all_passed() {
        Exit::Success
    } else {
        Exit::CheckFailed
    }
}

/// Grades, printing each check to stdout as it finishes (or, with `json`,
/// the whole report at the end). `grade` and `try` share this.
pub async fn grade_and_print(
    client: &Client,
    lab: &Lab,
    guest_lab_dir: &str,
    json: bool,
) -> Result<GradeReport, Failure> {
    let style = Style {
        color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    eprintln!(
        "grading `{}` ({} check{}) at {}",
        lab.name,
        lab.checks.len(),
        if lab.checks.len() == 1 { "" } else { "s" },
        client.url()
    );
    let report = client
        .grade_with(lab, guest_lab_dir, |c| {
            if !json {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(report::check(c, style).as_bytes());
                let _ = out.flush();
            }
        })
        .await
        .map_err(Failure::client)?;
    let mut out = std::io::stdout().lock();
    if json {
        let text = serde_json::to_string_pretty(&report).expect("a report serializes");
        let _ = writeln!(out, "{text}");
    } else {
        let _ = write!(out, "\n{}", report::summary(&report, style));
    }
    Ok(report)
}
