//! `lab-agent`: parse arguments, set up logging, run, map the outcome to an
//! exit status. Nothing else lives here.

use clap::Parser;
use lab_agent::cli::{Cli, Command};
use lab_agent::process::Jobs;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    lab_agent::logging::init();
    match cli.command {
        Command::Version => {
            print!("{}", lab_agent::version_text());
            ExitCode::SUCCESS
        }
        Command::Serve(args) => {
            let cfg = match args.into_config() {
                Ok(cfg) => cfg,
                Err(e) => return usage(e),
            };
            match runtime().block_on(lab_agent::serve::serve(cfg)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(e.exit_code())
                }
            }
        }
        Command::Setup(args) => {
            let cfg = match args.into_config() {
                Ok(cfg) => cfg,
                Err(e) => return usage(e),
            };
            runtime().block_on(setup(cfg))
        }
    }
}

async fn setup(cfg: lab_agent::setup::SetupConfig) -> ExitCode {
    let jobs = Jobs::default();
    let run = lab_agent::setup::run(&cfg, &jobs);
    tokio::pin!(run);
    // Stopped (SIGTERM/SIGINT): kill the script's group; the run then
    // records the setup as failed instead of leaving it "running".
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let outcome = loop {
        tokio::select! {
            r = &mut run => break r,
            Some(_) = recv(&mut term) => { jobs.kill_all(); }
            Some(_) = recv(&mut int) => { jobs.kill_all(); }
        }
    };
    match outcome {
        Ok(o) => ExitCode::from(u8::try_from(o.exit_status).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn recv(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

fn usage(e: lab_agent::cli::UsageError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(2)
}

fn runtime() -> tokio::runtime::Runtime {
    // One thread: the agent's work is waiting on children and sockets, and a
    // single-threaded runtime keeps its memory and binary small.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("failed to start the tokio runtime")
}
