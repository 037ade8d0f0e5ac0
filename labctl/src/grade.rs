//! `labctl grade`: run a lab's checks against a VM and report.
//!
//! A VM that is not ready is not graded (exit 3, or 4 when its setup
//! failed): a check run while setup is still going would read as the
//! student's failure. `--wait SECS` gives it time first. `--instance ID`
//! grades only that life of the VM: another instance (it was reset, the
//! student's work is gone) is exit 6 with nothing run.

use super::common;
use super::exit::{Exit, Failure};
use super::grading::{Rule, exit_for, grade_and_print};
use super::progress::{print_setup_log, wait_with_display};
use super::session;
use lab_agent_client::Client;
use lab_agent_proto::lab::Lab;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct GradeArgs {
    /// The lab's folder (with its `lab.toml`)
    #[arg(value_name = "LAB_DIR")]
    pub lab: PathBuf,
    /// The agent's URL, e.g. `http://10.0.0.5:8899` or `kubevirt://labs/vm-42`
    /// (every form: `labctl exec --help`); repeat with
    /// `--vm` for each VM of a session
    #[arg(long = "url", value_name = "URL", required = true)]
    pub urls: Vec<String>,
    /// File holding the agent's token (as written by `labctl secret
    /// --token-out`); one per `--url`, in the same order
    #[arg(long = "token-file", value_name = "FILE", required = true)]
    pub token_files: Vec<PathBuf>,
    /// In a lab of several VMs (`[[vms]]`): the VM the `--url` at the same
    /// position is, by its name; the VMs are graded as one session, one
    /// report whose checks carry their `vm` (`--vm server --url URL1
    /// --token-file F1 --vm client --url URL2 --token-file F2`)
    #[arg(long = "vm", value_name = "NAME")]
    pub vms: Vec<String>,
    #[command(flatten)]
    pub kube: common::KubeArgs,
    /// Where the lab's files are in the guest: the checks' `LAB_DIR`
    /// (default: what the agent reports in `/v1/info`, else `/opt/lab`)
    #[arg(long = "lab-dir", value_name = "PATH")]
    pub guest_lab_dir: Option<String>,
    /// Run only the check with this name (repeat for several)
    #[arg(long = "check", value_name = "NAME")]
    pub checks: Vec<String>,
    /// Wait up to this many seconds for the VM to be ready before grading;
    /// `--wait` alone waits the lab's `[readiness] timeout_secs` (without
    /// it: grade only a VM that is ready now; at most 86400, a day)
    #[arg(long, value_name = "SECS", num_args = 0..=1)]
    pub wait: Option<Option<u64>>,
    /// Allow the agent this many seconds to answer, beyond each check's own
    /// `timeout_secs` (at most 86400, a day)
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_ANSWER_SECS)]
    pub timeout: u64,
    /// Grade only this life of the VM: the `instance.id` recorded when it
    /// was handed to the student (`labctl wait --json` prints it). Another
    /// instance (the VM was reset: the student's work inside it is gone) is
    /// exit 6 with nothing run; an agent that names no instance, exit 3
    #[arg(long, value_name = "ID")]
    pub instance: Option<String>,
    /// Print the report as JSON on stdout (with the `instance` graded)
    #[arg(long)]
    pub json: bool,
}

/// `--timeout`'s default: the client's request timeout.
const DEFAULT_ANSWER_SECS: u64 = lab_agent_client::client::DEFAULT_REQUEST_TIMEOUT.as_secs();

#[derive(Debug)]
pub struct Config {
    lab: Lab,
    client: Client,
    guest_lab_dir: Option<String>,
    wait: Option<Duration>,
    json: bool,
}

impl Config {
    pub fn from_args(args: &GradeArgs) -> Result<Config, Failure> {
        let (answer_timeout, wait, lab) = checked(args, false)?;
        let (url, token_file) = match (args.urls.as_slice(), args.token_files.as_slice()) {
            ([url], [file]) => (url, file),
            _ => {
                return Err(Failure::usage(format!(
                    "{} `--url`s and {} `--token-file`s: grade one VM, or name each VM of a session with `--vm`",
                    args.urls.len(),
                    args.token_files.len()
                ))
                .hint("`--vm NAME --url URL --token-file FILE` for each VM of a lab with [[vms]]"));
            }
        };
        let mut builder = args
            .kube
            .on(Client::builder().request_timeout(answer_timeout))?;
        if let Some(id) = &args.instance {
            builder = builder.instance(id);
        }
        let client = common::client(builder, url, token_file)?;
        Ok(Config {
            lab,
            client,
            guest_lab_dir: args.guest_lab_dir.clone(),
            wait,
            json: args.json,
        })
    }
}

pub fn run(args: &GradeArgs) -> Result<Exit, Failure> {
    if !args.vms.is_empty() {
        return run_session(args);
    }
    let c = Config::from_args(args)?;
    let rt = common::runtime()?;
    rt.block_on(async {
        ensure_ready(&c.client, c.wait).await?;
        let guest_lab_dir = match &c.guest_lab_dir {
            Some(dir) => dir.clone(),
            None => c.client.reported_lab_dir().await.map_err(Failure::client)?,
        };
        let report = grade_and_print(
            &c.client,
            &c.lab,
            &guest_lab_dir,
            c.json,
            Rule::Ready,
            None::<()>,
        )
        .await?;
        Ok(exit_for(&report))
    })
}

/// `--vm`: the lab's VMs graded as one session ([`session`]).
fn run_session(args: &GradeArgs) -> Result<Exit, Failure> {
    let (answer_timeout, wait, lab) = checked(args, true)?;
    let builder = args
        .kube
        .on(Client::builder().request_timeout(answer_timeout))?;
    let session = session::session(&args.vms, &args.urls, &args.token_files, builder)?;
    let guest_lab_dir = args.guest_lab_dir.as_deref();
    session::grade(&session, &lab, guest_lab_dir, wait, args.json)
}

/// What grading one VM and a session check alike, in this order: the
/// seconds flags (before any I/O, as every seconds flag; `--wait` alone
/// takes the lab's deadline once the lab is read), `--instance` (one VM
/// only), the lab with its checks selected, `--lab-dir`.
fn checked(args: &GradeArgs, session: bool) -> Result<(Duration, Option<Duration>, Lab), Failure> {
    let answer_timeout = common::wait_secs("--timeout", args.timeout, 1)?;
    let wait = args
        .wait
        .map(|w| {
            w.map(|secs| common::wait_secs("--wait", secs, 0))
                .transpose()
        })
        .transpose()?;
    if session && args.instance.is_some() {
        return Err(Failure::usage(
            "`--instance` pins one VM: it does not go with `--vm` (a session's report carries each VM's `instances`)",
        ));
    }
    let mut lab = Lab::load(&args.lab).map_err(Failure::lab)?;
    let wait = wait.map(|w| w.unwrap_or(Duration::from_secs(lab.readiness.timeout_secs)));
    lab.select_checks(&args.checks)
        .map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(dir) = args.guest_lab_dir.as_ref().filter(|d| !d.starts_with('/')) {
        return Err(Failure::usage(format!(
            "`--lab-dir {dir}` is not an absolute path in the guest"
        )));
    }
    Ok((answer_timeout, wait, lab))
}

/// Returns when the agent is ready; else the failure to report: not ready
/// now (exit 3), setup failed (4), unreachable (3), in the client's words
/// (the grading rule's, [`Client::require_ready`]). With `wait`, waits
/// first, with progress.
async fn ensure_ready(client: &Client, wait: Option<Duration>) -> Result<(), Failure> {
    if let Some(wait) = wait {
        let deadline = Instant::now() + wait;
        let outcome = wait_with_display(std::slice::from_ref(client), deadline, None)
            .await
            .0
            .pop()
            .expect("one outcome per client");
        return outcome.result.map(drop).map_err(|e| {
            print_setup_log(&e);
            Failure::client(e)
        });
    }
    client
        .require_ready()
        .await
        .map(drop)
        .map_err(Failure::client)
}
