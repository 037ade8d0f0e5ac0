//! `labctl secret` (owned by the [payload] work).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct SecretArgs {}

pub fn run(_args: &SecretArgs) -> ExitCode {
    eprintln!("error: `labctl secret` is not built yet");
    ExitCode::from(2)
}
