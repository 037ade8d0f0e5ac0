//! Pieces several verbs share: the agent's URL and token flags, reading a
//! token file, and the async runtime.

use super::exit::{Exit, Failure};
use lab_agent_client::{Client, ClientBuilder};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most seconds a flag lets `labctl` wait for something: a day, the
/// one bound every front end shares (`lab_agent_proto::guest`). A wait or
/// an answer awaited longer is a hang, and an unchecked count of seconds
/// overflows the clock when added to it (`u64::MAX` panicked).
pub use lab_agent_proto::guest::MAX_WAIT_SECS;

/// The value of a flag counting seconds (`--timeout`, `--answer-timeout`,
/// `--wait`), checked to be from `min` to [`MAX_WAIT_SECS`].
pub fn wait_secs(flag: &str, secs: u64, min: u64) -> Result<Duration, Failure> {
    if (min..=MAX_WAIT_SECS).contains(&secs) {
        Ok(Duration::from_secs(secs))
    } else {
        Err(Failure::usage(format!(
            "`{flag} {secs}` is out of range: use {min} to {MAX_WAIT_SECS} seconds (a day)"
        )))
    }
}

/// `--url URL --token-file F`: one agent.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// The agent's URL: `http://HOST:PORT`, `vsock://CID:PORT`,
    /// `vsock+unix:///PATH?port=PORT` or `kubevirt://NAMESPACE/VMI[?port=PORT]`
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// File holding the agent's token (as written by `labctl secret --token-out`)
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Where a `kubevirt://` URL's API server is, outside a pod (in one, the
/// pod's service account is used).
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// For `kubevirt://`: the Kubernetes API server, `https://HOST[:PORT]`
    /// [default: the pod's own, in-cluster]
    #[arg(long, value_name = "URL", requires_all = ["kube_token_file", "kube_ca_file"])]
    pub kube_server: Option<String>,
    /// For `kubevirt://`: the API token's file, read at each connection
    #[arg(long, value_name = "FILE", requires = "kube_server")]
    pub kube_token_file: Option<PathBuf>,
    /// For `kubevirt://`: the API server's CA bundle (PEM)
    #[arg(long, value_name = "FILE", requires = "kube_server")]
    pub kube_ca_file: Option<PathBuf>,
}

impl KubeArgs {
    /// `builder` going through the API server given, if one is.
    pub fn on(&self, builder: ClientBuilder) -> Result<ClientBuilder, Failure> {
        let (Some(server), Some(token), Some(ca)) =
            (&self.kube_server, &self.kube_token_file, &self.kube_ca_file)
        else {
            return Ok(builder);
        };
        let api = lab_agent_client::KubeApi::from_files(server, token, ca);
        Ok(builder.kube_api(api.map_err(Failure::client)?))
    }
}

/// `builder`'s client for the agent at `url`, with the token in
/// `token_file`.
pub fn client(builder: ClientBuilder, url: &str, token_file: &Path) -> Result<Client, Failure> {
    let token = read_token(token_file)?;
    builder.build(url, &token).map_err(Failure::client)
}

/// Reads a token file by the one rule every reader applies
/// (`lab_agent_proto::token_file`: owner-only, trimmed, a valid token). It
/// is never printed.
pub fn read_token(path: &Path) -> Result<String, Failure> {
    lab_agent_proto::token_file::read_token_file(path).map_err(|e| {
        let f = Failure::usage(e.to_string());
        match e {
            lab_agent_proto::token_file::TokenFileError::Read { .. } => {
                f.hint("pass the file `labctl secret --token-out` wrote for this VM")
            }
            _ => f,
        }
    })
}

/// The runtime every verb runs on: one thread is plenty for a CLI.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            Failure::new(Exit::Unreachable, "failed to start the async runtime").with_source(e)
        })
}

/// `12.3s`, `2m05s`: elapsed time for people.
pub fn human_duration(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        let whole = d.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// A runner's error as `labctl` prints it: its message, cause and hints,
/// and the exit status its kind means.
impl From<lab_runner::Error> for Failure {
    fn from(e: lab_runner::Error) -> Failure {
        let exit = match e.kind() {
            lab_runner::ErrorKind::Usage => Exit::Usage,
            lab_runner::ErrorKind::Unreachable => Exit::Unreachable,
        };
        let (message, source, hints) = e.into_parts();
        let failure = Failure::new(exit, message).hints(hints);
        match source {
            Some(source) => failure.with_source(source),
            None => failure,
        }
    }
}
