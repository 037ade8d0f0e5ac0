//! `hostile-agent BEHAVIOUR`: serves `lab_agent_tests::hostile` on
//! `127.0.0.1:0`, prints its URL on stdout, and stops when stdin closes.
//! For the Python tests, which meet the same fake agents as the Rust ones.

use lab_agent_tests::hostile::{Behaviour, HostileAgent};
use std::io::{Read, Write};

fn main() -> std::process::ExitCode {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(behaviour) = Behaviour::parse(&name) else {
        eprintln!(
            "usage: hostile-agent BEHAVIOUR (busy, continue-flood, huge-content-length, endless-body, drip, oversized, bad-exit, escapes, non-json-error, ready-400, unknown-state, relative-lab-dir, hangup, honest)"
        );
        return std::process::ExitCode::from(2);
    };
    let agent = HostileAgent::start(behaviour);
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{}", agent.url());
    let _ = out.flush();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::ExitCode::SUCCESS
}
