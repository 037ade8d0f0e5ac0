//! Command-line arguments (clap) and their conversion into validated
//! configurations, before any work starts.

use crate::serve::ServeConfig;
use crate::setup::SetupConfig;
use clap::{Parser, Subcommand};
use lab_agent_proto::GUEST_LAB_DIR;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "lab-agent",
    version,
    about = "Readiness and grading agent of a lab VM",
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API (readiness, exec, info)
    Serve(ServeArgs),
    /// Run the lab's setup script and record its outcome in STATE_DIR
    Setup(SetupArgs),
    /// Print version and build information
    Version,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; see --addr-file)
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8899")]
    pub listen: SocketAddr,
    /// File holding the per-VM bearer token (mode 0600, at least 32 characters)
    #[arg(long, value_name = "PATH", default_value = "/etc/lab-agent/token")]
    pub token_file: PathBuf,
    /// Where setup.json and setup.log live
    #[arg(long, value_name = "PATH", default_value = "/var/lib/lab-agent")]
    pub state_dir: PathBuf,
    /// Where cloud-init's result.json appears at the end of its final stage
    #[arg(long, value_name = "PATH", default_value = "/run/cloud-init")]
    pub cloud_init_dir: PathBuf,
    /// Local/dev mode: do not wait for cloud-init
    #[arg(long)]
    pub no_cloud_init: bool,
    /// Local/dev mode: run this setup script at start, recorded as `lab-agent setup` does
    #[arg(long, value_name = "SCRIPT")]
    pub run_setup: Option<PathBuf>,
    /// Timeout of the --run-setup script
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub setup_timeout: u64,
    /// Concurrent exec limit (more get 429 busy)
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub max_execs: usize,
    /// LAB_DIR for the --run-setup script
    #[arg(long, value_name = "PATH", default_value = GUEST_LAB_DIR)]
    pub lab_dir: PathBuf,
    /// After binding, write the bound address (e.g. 127.0.0.1:43123) to this file
    #[arg(long, value_name = "PATH")]
    pub addr_file: Option<PathBuf>,
    /// On SIGTERM, how long running commands may take before they are killed
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub shutdown_grace: u64,
}

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// The lab's setup script (none: nothing to do, recorded as succeeded)
    #[arg(long, value_name = "PATH")]
    pub script: Option<PathBuf>,
    /// Where setup.json and setup.log are written
    #[arg(long, value_name = "PATH", default_value = "/var/lib/lab-agent")]
    pub state_dir: PathBuf,
    /// Kill the script's process group after this many seconds
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
    /// Run the script as this user, through their login shell
    #[arg(long, value_name = "NAME", default_value = "root")]
    pub user: String,
    /// LAB_DIR for the script (where the lab's files are)
    #[arg(long, value_name = "PATH", default_value = GUEST_LAB_DIR)]
    pub lab_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

fn timeout(flag: &str, secs: u64) -> Result<Duration, UsageError> {
    if secs == 0 || secs > 86_400 {
        return Err(UsageError(format!(
            "{flag} {secs} is out of range: use 1 to 86400 seconds"
        )));
    }
    Ok(Duration::from_secs(secs))
}

impl ServeArgs {
    pub fn into_config(self) -> Result<ServeConfig, UsageError> {
        if self.max_execs == 0 || self.max_execs > 1024 {
            return Err(UsageError(format!(
                "--max-execs {} is out of range: use 1 to 1024",
                self.max_execs
            )));
        }
        if self.shutdown_grace > 3600 {
            return Err(UsageError(format!(
                "--shutdown-grace {} is out of range: use 0 to 3600 seconds",
                self.shutdown_grace
            )));
        }
        Ok(ServeConfig {
            listen: self.listen,
            addr_file: self.addr_file,
            token_file: self.token_file,
            state_dir: self.state_dir,
            cloud_init_dir: (!self.no_cloud_init).then_some(self.cloud_init_dir),
            run_setup: self.run_setup,
            setup_timeout: timeout("--setup-timeout", self.setup_timeout)?,
            lab_dir: self.lab_dir,
            max_execs: self.max_execs,
            shutdown_grace: Duration::from_secs(self.shutdown_grace),
        })
    }
}

impl SetupArgs {
    pub fn into_config(self) -> Result<SetupConfig, UsageError> {
        Ok(SetupConfig {
            script: self.script,
            state_dir: self.state_dir,
            timeout: timeout("--timeout", self.timeout)?,
            user: self.user,
            lab_dir: self.lab_dir,
            echo: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults_match_the_spec() {
        let cli = Cli::try_parse_from(["lab-agent", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let cfg = args.into_config().unwrap();
        assert_eq!(cfg.listen.to_string(), "0.0.0.0:8899");
        assert_eq!(cfg.token_file, PathBuf::from("/etc/lab-agent/token"));
        assert_eq!(cfg.state_dir, PathBuf::from("/var/lib/lab-agent"));
        assert_eq!(cfg.cloud_init_dir, Some(PathBuf::from("/run/cloud-init")));
        assert_eq!(cfg.max_execs, 8);
        assert_eq!(cfg.lab_dir, PathBuf::from("/opt/lab"));
        assert!(cfg.run_setup.is_none());
    }

    #[test]
    fn bad_values_are_usage_errors() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            match cli.command {
                Command::Serve(a) => a.into_config().map(|_| ()),
                Command::Setup(a) => a.into_config().map(|_| ()),
                Command::Version => Ok(()),
            }
        };
        assert!(parse(&["lab-agent", "serve", "--max-execs", "0"]).is_err());
        assert!(parse(&["lab-agent", "serve", "--setup-timeout", "0"]).is_err());
        assert!(parse(&["lab-agent", "setup", "--timeout", "0"]).is_err());
        assert!(Cli::try_parse_from(["lab-agent", "serve", "--listen", "nope"]).is_err());
        assert!(Cli::try_parse_from(["lab-agent", "serve", "--bogus"]).is_err());
    }
}
