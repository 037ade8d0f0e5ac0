//! `labctl exec`: run one command in the guest, the way `ssh host CMD`
//! would: its stdout and stderr on ours, its exit status as ours.

use super::common::{self, AgentArgs};
use super::exit::{Exit, Failure};
use lab_agent_client::Client;
use lab_agent_proto::exec::{ExecOptions, RawExecOptions};
use lab_agent_proto::{ExecRequest, ExecResult, StreamEvent};
use std::io::{Read, Write};

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// How the command runs: every exec option, declared once with
    /// `lab.toml`'s keys (`lab_agent_proto::exec::RawExecOptions`)
    #[command(flatten)]
    pub options: RawExecOptions,
    /// Allow the agent this many seconds beyond `--timeout` to answer; the
    /// whole call, retries of a busy agent included, ends by then (at most
    /// 86400, a day)
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_ANSWER_SECS)]
    pub answer_timeout: u64,
    /// Send labctl's standard input to the command (default: none)
    #[arg(long)]
    pub stdin: bool,
    /// Run only on this life of the VM: the `instance.id` recorded when it
    /// was handed to the student (`labctl wait --json` prints it). The agent
    /// refuses another instance (the VM was reset) before running anything:
    /// exit 6, said on stderr (an older agent: after, on its answer)
    #[arg(long, value_name = "ID")]
    pub instance: Option<String>,
    /// Print the result as one JSON object once the command has ended
    /// (instead of its output as it comes)
    #[arg(long)]
    pub json: bool,
    /// The command; its words are joined with spaces and run by
    /// `bash --login -c`, as `ssh` does
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `--answer-timeout`'s default: the client's request timeout.
const DEFAULT_ANSWER_SECS: u64 = lab_agent_client::client::DEFAULT_REQUEST_TIMEOUT.as_secs();

#[derive(Debug)]
pub struct Config {
    client: Client,
    request: ExecRequest,
}

impl Config {
    pub fn from_args(args: &ExecArgs) -> Result<Config, Failure> {
        let command = args.command.join(" ");
        let answer_timeout = common::wait_secs("--answer-timeout", args.answer_timeout, 1)?;
        let mut raw = args.options.clone();
        if args.stdin {
            let mut input = String::new();
            std::io::stdin().read_to_string(&mut input).map_err(|e| {
                Failure::usage("failed to read standard input for `--stdin`").with_source(e)
            })?;
            raw.stdin = Some(input);
        }
        // The options' own rules (the agent's), checked here so a bad
        // request costs no round trip and is told as a usage error.
        let (options, problems) = raw.over(&ExecOptions::default());
        if let Some(problem) = problems.first() {
            return Err(Failure::usage(format!(
                "the command cannot be sent: {problem}"
            )));
        }
        let request = ExecRequest::with_options(command, options);
        request
            .validate()
            .map_err(|e| Failure::usage(format!("the command cannot be sent: {e}")))?;
        let mut builder = args
            .agent
            .kube
            .on(Client::builder().request_timeout(answer_timeout))?;
        if let Some(id) = &args.instance {
            builder = builder.instance(id);
        }
        let client = common::client(builder, &args.agent.url, &args.agent.token_file)?;
        Ok(Config { client, request })
    }
}

pub fn run(args: &ExecArgs) -> Result<Exit, Failure> {
    let config = Config::from_args(args)?;
    let rt = common::runtime()?;
    let result = if args.json {
        let result = rt
            .block_on(config.client.exec(&config.request))
            .map_err(Failure::client)?;
        let text = serde_json::to_string(&result).expect("an ExecResult always serializes");
        // Guest text inside JSON strings is escaped by JSON itself, but
        // C1 and format characters are not: escape what JSON leaves.
        println!("{}", lab_agent_proto::text::json_escape_controls(&text));
        result
    } else {
        rt.block_on(stream(&config))?
    };
    if !args.json {
        notes(&config, &result);
    }
    // The client refuses an exit code outside 0..=255 or a signal outside
    // 1..=64 (a protocol error, exit 3), so this neither wraps nor clamps
    // a lie into a success.
    let status = u8::try_from(result.shell_status()).expect("the client checks the ranges");
    Ok(Exit::Command(status))
}

/// The output as it comes, each event written and flushed to the matching
/// stream at once. To a terminal guest text is escaped (a command's
/// `\x1b]…` must not drive the reader's terminal; line breaks are kept);
/// to a pipe or file it is written as the command wrote it, as `ssh host
/// CMD` does, so a program reading it gets the bytes.
async fn stream(config: &Config) -> Result<ExecResult, Failure> {
    use std::io::IsTerminal;
    let mut s = config
        .client
        .exec_stream(&config.request)
        .await
        .map_err(Failure::client)?;
    let (out_tty, err_tty) = (
        std::io::stdout().is_terminal(),
        std::io::stderr().is_terminal(),
    );
    loop {
        match s.next_event().await.map_err(Failure::client)? {
            Some(StreamEvent::Stdout(text)) => put(&mut std::io::stdout(), &text, out_tty),
            Some(StreamEvent::Stderr(text)) => put(&mut std::io::stderr(), &text, err_tty),
            Some(StreamEvent::Result(r)) => {
                // Drain to the end: a stream cut after its result is still
                // a broken answer.
                while s.next_event().await.map_err(Failure::client)?.is_some() {}
                put(&mut std::io::stdout(), &r.stdout, out_tty);
                put(&mut std::io::stderr(), &r.stderr, err_tty);
                return Ok(r);
            }
            None => unreachable!("next_event ends only after a result"),
        }
    }
}

fn put(w: &mut dyn Write, text: &str, tty: bool) {
    let text = if tty {
        lab_agent_proto::text::escape_lines(text)
    } else {
        text.into()
    };
    let _ = w.write_all(text.as_bytes());
    let _ = w.flush();
}

/// Our own notes, after the command's output.
fn notes(config: &Config, result: &ExecResult) {
    for (truncated, stream) in [
        (result.stdout_truncated, "stdout"),
        (result.stderr_truncated, "stderr"),
    ] {
        if truncated {
            eprintln!(
                "warning: the command's {stream} was cut at {} bytes",
                config.request.options.max_output_bytes
            );
        }
    }
    if result.timed_out {
        eprintln!(
            "warning: the command ran past `--timeout {}` and was killed",
            config.request.options.timeout_secs
        );
    }
    if let Some(limits) = result.limits_text() {
        eprintln!("warning: the command {limits}");
    }
}
