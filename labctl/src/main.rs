//! `labctl`: the lab author's and operator's command line for lab-agent.
//! Parses arguments and hands over to `cli::run`; nothing else lives here.

fn main() -> std::process::ExitCode {
    labctl::main()
}
