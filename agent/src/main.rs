//! `lab-agent`: parse arguments, set up logging, run, map the outcome to an
//! exit status. Nothing else lives here.

use lab_agent::{Command, Jobs, cli};
use std::process::ExitCode;

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args_os().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    lab_agent::init_logging();
    // The lab's variables, for every command either runs.
    let env_file = match &command {
        Command::Serve(c) => Some(&c.env_file),
        Command::Setup(c) => Some(&c.env_file),
        _ => None,
    };
    if let Some(path) = env_file {
        if let Err(e) = lab_agent::load_lab_env(path) {
            eprintln!("error: the lab's env file `{}`: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    match command {
        Command::Help(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Command::Version => {
            print!("{}", lab_agent::version_text());
            ExitCode::SUCCESS
        }
        Command::Serve(cfg) => match runtime().block_on(lab_agent::serve(cfg)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Setup(cfg) => runtime().block_on(setup(cfg)),
        Command::HoldCgroup(parent) => lab_agent::hold_cgroup(parent),
    }
}

async fn setup(cfg: lab_agent::SetupConfig) -> ExitCode {
    use tokio::signal::unix::{SignalKind, signal};
    let jobs = Jobs::default();
    let run = lab_agent::run_setup(&cfg, &jobs);
    tokio::pin!(run);
    // Stopped (SIGTERM/SIGINT): kill the script's group; the run then
    // records the setup as failed instead of leaving it "running".
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
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

fn runtime() -> tokio::runtime::Runtime {
    // One thread: the agent's work is waiting on children and sockets, and a
    // single-threaded runtime keeps its memory and binary small.
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            std::process::exit(1);
        }
    }
}
