//! `labctl`: one module per verb. (Scaffold: the [client] work fills in the
//! other verbs; `secret` lives in `secret.rs`.)

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub mod agent_bin;
pub mod secret;

#[derive(Debug, Parser)]
#[command(name = "labctl", version, about = "Build, test and grade lab-agent labs")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render the cloud-init user-data and the Kubernetes Secret for a lab
    Secret(secret::SecretArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Secret(args) => secret::run(&args),
    }
}
