//! `labctl wait`: wait until one or more agents are ready, then print
//! each VM's life ([`life`]) on stdout, or every answer with `--json`;
//! `--follow` prints the setup logs as they grow first (the client's
//! [`lab_agent_client::Follow`]).

use super::common::{self, KubeArgs};
use super::exit::{Exit, Failure};
use super::life;
use super::progress::{print_setup_log, wait_with_display};
use lab_agent_client::json::{json_text, outcomes_json};
use lab_agent_client::{Client, WaitOutcome};
use lab_agent_proto::lab::Lab;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// An agent's URL (`http://`, `vsock://`, `vsock+unix://`, `kubevirt://`:
    /// see `labctl exec --help`); repeat for the VMs of a multi-VM lab
    #[arg(long = "url", value_name = "URL", required = true)]
    pub urls: Vec<String>,
    /// Token file; give one for all VMs, or one per `--url`, in the same order
    #[arg(long = "token-file", value_name = "FILE", required = true)]
    pub token_files: Vec<PathBuf>,
    /// Give up after this many seconds (at most 86400, a day) [default: the
    /// lab's `[readiness] timeout_secs` with `--lab`, else 600]
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// The lab the VMs run: its `[readiness] timeout_secs` (the time from
    /// the VM's start to ready) is the default `--timeout`
    #[arg(long = "lab", value_name = "LAB_DIR")]
    pub lab: Option<PathBuf>,
    /// Print each VM's outcome as JSON on stdout: its last `/v1/ready`
    /// answer whole (instance, timeline and root disk included)
    #[arg(long)]
    pub json: bool,
    /// Print each VM's setup log as it grows while waiting (on stdout,
    /// before the VM's life; on stderr with `--json`), then the verdict.
    /// The guest's control characters are shown escaped (`\r`, `\x1b`),
    /// a pipe included; only whole lines are printed; with several
    /// `--url`s each line starts with its VM's URL. A log replaced under
    /// it (a new setup run) is followed again from its start, with a note
    #[arg(long)]
    pub follow: bool,
    /// The VMs of a session (a lab's `[[vms]]`), each naming the `--url`
    /// (and `--token-file`) at the same position: waited for as one, the
    /// first VM that fails ends the wait, named (`--vm server --url URL1
    /// --token-file F1 --vm client --url URL2 --token-file F2`)
    #[arg(long = "vm", value_name = "NAME")]
    pub vms: Vec<String>,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// `--timeout` without a lab: ten minutes, a slow lab's first boot under
/// TCG with room to spare.
const DEFAULT_TIMEOUT_SECS: u64 = 600;

/// `wait`'s arguments, checked.
#[derive(Debug)]
pub struct Config {
    clients: Vec<Client>,
    timeout: Duration,
    json: bool,
    follow: bool,
}

impl Config {
    pub fn from_args(args: &WaitArgs) -> Result<Config, Failure> {
        // Checked before any I/O, as every seconds flag.
        let timeout = args
            .timeout
            .map(|secs| common::wait_secs("--timeout", secs, 1))
            .transpose()?;
        // The lab is read (and must be valid) even when `--timeout` is
        // given: a typo in `--lab` is not silently ignored.
        let lab = args
            .lab
            .as_ref()
            .map(|dir| Lab::load(dir).map_err(Failure::lab))
            .transpose()?;
        let timeout = match (timeout, &lab) {
            (Some(timeout), _) => timeout,
            (None, Some(lab)) => Duration::from_secs(lab.readiness.timeout_secs),
            (None, None) => Duration::from_secs(DEFAULT_TIMEOUT_SECS),
        };
        let n = args.urls.len();
        let files: Vec<&PathBuf> = match args.token_files.len() {
            1 => vec![&args.token_files[0]; n],
            len if len == n => args.token_files.iter().collect(),
            len => {
                return Err(
                    Failure::usage(format!("{len} `--token-file`s for {n} `--url`s")).hint(
                        "give one token file for all VMs, or one per `--url` in the same order",
                    ),
                );
            }
        };
        let clients = (args.urls.iter().zip(files))
            .map(|(url, file)| common::client(args.kube.on(Client::builder())?, url, file))
            .collect::<Result<_, _>>()?;
        Ok(Config {
            clients,
            timeout,
            json: args.json,
            follow: args.follow,
        })
    }
}

pub fn run(args: &WaitArgs) -> Result<Exit, Failure> {
    let config = Config::from_args(args)?;
    if !args.vms.is_empty() {
        let session = crate::session::session(
            &args.vms,
            &args.urls,
            &args.token_files,
            args.kube.on(Client::builder())?,
        )?;
        return crate::session::wait(&session, config.timeout, config.json);
    }
    let rt = common::runtime()?;
    let deadline = Instant::now() + config.timeout;
    // Per VM, whether its whole setup log was shown (`--follow`): then a
    // failed setup's tail is not shown again.
    let follow = config.follow.then_some(config.json);
    let (outcomes, shown) = rt.block_on(wait_with_display(&config.clients, deadline, follow));
    // A reader that stops early (`| head`) is not an error.
    let _ = if config.json {
        writeln!(
            std::io::stdout(),
            "{}",
            json_text(&outcomes_json(&outcomes))
        )
    } else {
        // With several VMs, each life under its URL.
        let several = outcomes.len() > 1;
        let ready = outcomes
            .iter()
            .filter_map(|o| Some((several.then(|| o.url.clone()), o.result.as_ref().ok()?)));
        write!(std::io::stdout(), "{}", life::lives(ready))
    };
    report(outcomes, &shown, config.json)
}

/// Prints why each VM that is not ready is not, and picks the exit status:
/// a 401 or bad URL (2) before a failed setup (4) before the rest (3).
/// `shown`: per VM, whether its whole setup log was printed already.
fn report(outcomes: Vec<WaitOutcome>, shown: &[bool], json: bool) -> Result<Exit, Failure> {
    let total = outcomes.len();
    let mut failures = Vec::new();
    for (o, &shown) in outcomes.into_iter().zip(shown) {
        if let Err(e) = o.result {
            if !json && !shown {
                print_setup_log(&e);
            }
            failures.push(Failure::client(e));
        }
    }
    let rank = |f: &&Failure| match f.exit {
        Exit::Usage => 0,
        Exit::SetupFailed => 1,
        _ => 2,
    };
    let Some(worst) = failures.iter().min_by_key(rank).map(|f| f.exit) else {
        return Ok(Exit::Success);
    };
    // With one VM, its error is *the* error; with several, each VM's is
    // printed and a summary becomes the error.
    if total == 1 {
        return Err(failures.remove(0));
    }
    failures.iter().for_each(Failure::print);
    let not_ready = failures.len();
    Err(Failure::new(
        worst,
        format!("{not_ready} of {total} VMs are not ready"),
    ))
}
