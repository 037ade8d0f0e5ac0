//! `labctl wait`: wait until one or more agents are ready.

use super::common::{self, human_duration};
use super::exit::{Exit, Failure};
use super::progress::{TICK, WaitDisplay};
use lab_agent_client::{Client, Error, WaitOutcome};
use lab_agent_proto::ReadyState;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// An agent's base URL; repeat for the VMs of a multi-VM lab
    #[arg(long = "url", value_name = "URL", required = true)]
    pub urls: Vec<String>,
    /// Token file; give one for all VMs, or one per `--url`, in the same order
    #[arg(long = "token-file", value_name = "FILE", required = true)]
    pub token_files: Vec<PathBuf>,
    /// Give up after this many seconds
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
    /// Print each VM's outcome as JSON on stdout
    #[arg(long)]
    pub json: bool,
}

/// `wait`'s arguments, checked.
#[derive(Debug)]
pub struct Config {
    clients: Vec<Client>,
    timeout: Duration,
    json: bool,
}

impl Config {
    pub fn from_args(args: &WaitArgs) -> Result<Config, Failure> {
        let tokens = match args.token_files.len() {
            1 => vec![common::read_token(&args.token_files[0])?; args.urls.len()],
            n if n == args.urls.len() => args
                .token_files
                .iter()
                .map(|f| common::read_token(f))
                .collect::<Result<_, _>>()?,
            n => {
                return Err(Failure::usage(format!(
                    "{n} `--token-file`s for {} `--url`s",
                    args.urls.len()
                ))
                .hint("give one token file for all VMs, or one per `--url` in the same order"));
            }
        };
        let clients = args
            .urls
            .iter()
            .zip(&tokens)
            .map(|(url, token)| common::client(url, token))
            .collect::<Result<_, _>>()?;
        if args.timeout == 0 {
            return Err(Failure::usage("`--timeout` must be at least 1 second"));
        }
        Ok(Config {
            clients,
            timeout: Duration::from_secs(args.timeout),
            json: args.json,
        })
    }
}

pub fn run(args: &WaitArgs) -> Result<Exit, Failure> {
    let config = Config::from_args(args)?;
    let rt = common::runtime()?;
    let outcomes = rt.block_on(wait_with_display(
        &config.clients,
        Instant::now() + config.timeout,
    ));
    if config.json {
        // A reader that stops early (`| head`) is not an error.
        let _ = writeln!(
            std::io::stdout(),
            "{}",
            json_text(&outcomes_json(&outcomes))
        );
    }
    report(outcomes, config.json)
}

/// Waits for `clients`, showing progress on stderr, and prints a line per
/// VM as it settles (or nothing but progress for one VM that is ready).
pub async fn wait_with_display(clients: &[Client], deadline: Instant) -> Vec<WaitOutcome> {
    wait_with_display_hooked(clients, deadline, &mut |_, _| None).await
}

/// [`wait_with_display`], showing every progress report to `hook` first;
/// while an agent does not answer, the text `hook` returns (if any) is
/// shown instead of "unreachable: REASON".
pub async fn wait_with_display_hooked(
    clients: &[Client],
    deadline: Instant,
    hook: &mut dyn FnMut(usize, &lab_agent_client::Progress) -> Option<String>,
) -> Vec<WaitOutcome> {
    let urls = clients.iter().map(|c| c.url().to_owned()).collect();
    let mut display = WaitDisplay::new(urls);
    let start = Instant::now();
    let display_cell = std::cell::RefCell::new(&mut display);
    // When each VM was first seen ready: one summary time for all would say
    // "ready after 6.0s" of a VM that was ready at once.
    let mut ready_at: Vec<Option<Duration>> = vec![None; clients.len()];
    let outcomes = {
        let wait = lab_agent_client::wait_all(clients, deadline, |i, p| {
            if p.state == Some(ReadyState::Ready) && ready_at[i].is_none() {
                ready_at[i] = Some(p.elapsed);
            }
            let not_up = hook(i, p);
            display_cell.borrow_mut().update_with(i, p, not_up);
        });
        tokio::pin!(wait);
        let mut tick = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                outcomes = &mut wait => break outcomes,
                _ = tick.tick() => display_cell.borrow_mut().tick(),
            }
        }
    };
    let display = display_cell.into_inner();
    display.clear();
    let elapsed = start.elapsed();
    for (o, at) in outcomes.iter().zip(&ready_at) {
        let prefix = if clients.len() > 1 {
            format!("{}: ", o.url)
        } else {
            String::new()
        };
        if o.result.is_ok() {
            eprintln!(
                "{prefix}ready after {}",
                human_duration(at.unwrap_or(elapsed))
            );
        }
    }
    outcomes
}

/// Prints why each VM that is not ready is not, and picks the exit status:
/// a 401 or bad URL (2) before a failed setup (4) before the rest (3).
fn report(outcomes: Vec<WaitOutcome>, json: bool) -> Result<Exit, Failure> {
    let failures: Vec<&Error> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().err())
        .collect();
    if failures.is_empty() {
        return Ok(Exit::Success);
    }
    let worst = failures
        .iter()
        .map(|e| Exit::for_client_error(e))
        .min_by_key(|e| match e {
            Exit::Usage => 0,
            Exit::SetupFailed => 1,
            _ => 2,
        })
        .unwrap_or(Exit::Unreachable);
    // With one VM, its error is *the* error; with several, each VM's is
    // printed and a summary becomes the error.
    let (total, not_ready) = (outcomes.len(), failures.len());
    let mut last = None;
    for o in outcomes {
        if let Err(e) = o.result {
            if !json {
                print_setup_log(&e);
            }
            if let Some(f) = last.replace(Failure::client(e)) {
                f.print();
            }
        }
    }
    let last = last.expect("at least one VM failed");
    if total == 1 {
        return Err(last);
    }
    last.print();
    Err(Failure::new(
        worst,
        format!("{not_ready} of {total} VMs are not ready"),
    ))
}

/// For a failed setup: the tail of its log, so the author sees why.
pub fn print_setup_log(e: &Error) {
    let Some(r) = e.ready_response() else { return };
    if r.state != ReadyState::Failed {
        return;
    }
    match r.setup.log_tail.as_deref().map(str::trim_end) {
        Some(tail) if !tail.is_empty() => {
            eprintln!("setup log (last lines):");
            // The guest's bytes: each line with its control characters
            // (a `\r`, an escape sequence) shown, not obeyed.
            for line in tail.lines() {
                eprintln!("  │ {}", lab_agent_proto::text::escape(line));
            }
        }
        _ => eprintln!("setup log: (empty)"),
    }
}

/// `{"ready":bool,"vms":[{"url","state","ready","error"}]}`: `state` is the
/// last state the agent reported (or null), `ready` its whole last
/// `/v1/ready` body (or null), `error` null or `{"kind","message"}`.
pub fn outcomes_json(outcomes: &[WaitOutcome]) -> serde_json::Value {
    let vms: Vec<_> = outcomes
        .iter()
        .map(|o| match &o.result {
            Ok(r) => json!({"url": o.url, "state": r.state, "ready": r, "error": null}),
            Err(e) => {
                let r = e.ready_response();
                json!({
                    "url": o.url,
                    "state": r.map(|r| r.state),
                    "ready": r,
                    "error": {"kind": error_kind(e), "message": e.to_string()},
                })
            }
        })
        .collect();
    json!({"ready": outcomes.iter().all(|o| o.result.is_ok()), "vms": vms})
}

/// JSON for stdout: guest text in it only as JSON escapes, C1 controls
/// and DEL included (which JSON itself allows raw).
pub fn json_text(v: &impl serde::Serialize) -> String {
    let text = serde_json::to_string(v).expect("JSON values serialize");
    lab_agent_proto::text::json_escape_controls(&text).into_owned()
}

fn error_kind(e: &Error) -> &'static str {
    if e.is_setup_failed() {
        "setup_failed"
    } else if e.is_unauthorized() {
        "unauthorized"
    } else if e.is_too_large() {
        "too_large"
    } else if e.is_malformed() {
        "malformed_answer"
    } else if e.is_protocol_error() {
        "protocol_error"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_unreachable() {
        "unreachable"
    } else {
        "error"
    }
}
