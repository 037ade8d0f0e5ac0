//! `lab-agent serve`: load the token, bind, start the setup if asked, and
//! run the server until SIGTERM/SIGINT.

use crate::app::App;
use crate::http::listen::{Listen, Listeners};
use crate::process::Jobs;
use crate::process::cgroup::Containment;
use crate::readiness::{Readiness, ReadinessConfig};
use crate::setup::{self, SetupConfig};
use crate::token::{Token, TokenError};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Semaphore, watch};

#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// `--listen`, in order (TCP addresses, vsock ports); never empty.
    pub listen: Vec<Listen>,
    pub addr_file: Option<PathBuf>,
    pub token_file: PathBuf,
    pub state_dir: PathBuf,
    /// `None`: `--no-cloud-init`.
    pub cloud_init_dir: Option<PathBuf>,
    pub run_setup: Option<PathBuf>,
    /// `--min-root-bytes`, `--on-small-root`: for the `--run-setup`
    /// script, as `lab-agent setup`'s.
    pub min_root_bytes: Option<u64>,
    pub on_small_root: lab_agent_proto::guest::OnSmallRoot,
    pub setup_timeout: Duration,
    pub lab_dir: PathBuf,
    /// The lab's variables (`--env-file`); `main` reads it before serving.
    pub env_file: PathBuf,
    pub max_execs: usize,
    pub shutdown_grace: Duration,
    /// Bytes of command output held at once (see `crate::http::budget`).
    pub output_budget: u64,
    pub cgroup: crate::process::cgroup::Mode,
    /// `pids.max` per exec cgroup (where no cgroup enforces it,
    /// `RLIMIT_NPROC` of a non-root command); `None`: no limit.
    pub pids_max: Option<u32>,
    /// `memory.max` per exec cgroup: `None` is auto (the guest's memory
    /// less a reserve, see `cgroup::default_memory`), `Some(None)` no limit.
    pub memory_max: Option<Option<u64>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// cloud-init writes the token; a missing one is most often a VM whose
    /// payload did not install, or a `--token-file` typo.
    #[error("{0}{hint}", hint = token_hint(.0))]
    Token(#[from] TokenError),
    #[error("failed to listen on {addr}: {source}\nhint: {}", bind_hint(addr))]
    Bind { addr: Listen, source: io::Error },
    #[error("failed to write the bound address to `{path}`: {source}")]
    AddrFile { path: PathBuf, source: io::Error },
    #[error("failed to install the signal handler: {0}")]
    Signals(io::Error),
    #[error(
        "{0}\nhint: create it (`mkdir` in a cgroup2 mount), or use `--cgroup auto` or `--cgroup off`"
    )]
    Cgroup(#[from] crate::process::cgroup::CgroupError),
}

impl ServeError {
    /// Configuration mistakes exit 2, everything else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Token(_) | ServeError::Cgroup(_) => 2,
            _ => 1,
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT. It makes the process the subreaper of
/// its commands and reaps what they orphan (see `process::strays`):
/// run it in a process of its own, on the runtime's one thread, not beside
/// other code that starts and waits for children.
pub async fn serve(cfg: ServeConfig) -> Result<(), ServeError> {
    let token = Token::load(&cfg.token_file)?;
    let listener = Listeners::bind(&cfg.listen)
        .await
        .map_err(|(addr, source)| ServeError::Bind { addr, source })?;
    let bound = listener.addrs();
    // The first TCP address (the command line requires one with it).
    let tcp = bound.iter().find_map(|a| match a {
        Listen::Tcp(a) => Some(*a),
        Listen::Vsock(_) => None,
    });
    if let (Some(path), Some(addr)) = (&cfg.addr_file, tcp) {
        lab_agent_proto::addr_file::write(path, addr).map_err(|source| ServeError::AddrFile {
            path: path.clone(),
            source,
        })?;
    }
    let addr = bound
        .iter()
        .map(Listen::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut term = signal(SignalKind::terminate()).map_err(ServeError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(ServeError::Signals)?;

    let (shutting_down, shutdown_rx) = watch::channel(false);
    // Before the first command: the OOM killer must pick a runaway, not
    // the agent (see `process::AGENT_OOM_SCORE_ADJ`).
    let oom_protected = crate::process::protect_from_oom().is_ok();
    // Also before the first command: what commands leave comes to the
    // agent, so their leftovers are found without walking `/proc`.
    if !crate::process::strays::adopt() {
        tracing::warn!(
            "could not become the subreaper of commands (prctl PR_SET_CHILD_SUBREAPER): every command without a cgroup costs a walk of /proc when it ends"
        );
    }
    let defaults = crate::process::cgroup::Limits {
        pids: cfg.pids_max.map(u64::from),
        memory: cfg.memory_max.flatten(),
    };
    let cgroups =
        crate::process::cgroup::Cgroups::setup(&cfg.cgroup, defaults, cfg.memory_max.is_none())?;
    // Said once, at start: what contains a command here, and what not.
    let cgroups = match cgroups {
        Containment::Cgroups(cg) => {
            let (on, d) = (cg.enforces(), cg.defaults());
            tracing::info!(
                root = %cg.root().display(),
                pids_max = d.pids.filter(|_| on.pids).unwrap_or(0),
                memory_max = d.memory.filter(|_| on.memory).unwrap_or(0),
                oom_protected,
                "each command runs in a cgroup of its own; a limit of 0: no controller (needs DelegateSubgroup=, systemd >= 254), so no memory limit and RLIMIT_NPROC for non-root commands only"
            );
            Some(Arc::new(cg))
        }
        Containment::Sessions { why } => {
            tracing::info!(
                reason = %why,
                "no cgroup: commands are killed by session, which misses what leaves it and loses its parent (setsid, double forks); no memory limit, RLIMIT_NPROC for non-root commands only"
            );
            None
        }
    };
    if let Some(cg) = &cgroups {
        cg.prepare();
    }
    let jobs = Jobs::with_cgroups(cgroups, defaults.pids);
    let agent_started_ms = crate::readiness::timeline::since_boot_ms();
    let app = Arc::new(App {
        token,
        // Which life of the VM this is: counted once per boot, kept on the
        // disk, bound to cloud-init's instance.
        readiness: Readiness::new(ReadinessConfig {
            state_dir: cfg.state_dir.clone(),
            cloud_init_dir: cfg.cloud_init_dir.clone(),
            agent_runs_setup: cfg.run_setup.is_some(),
            boot_id: crate::readiness::current_boot_id(),
            agent_started_ms: Some(agent_started_ms),
            root: "/".into(),
        }),
        exec_slots: Arc::new(Semaphore::new(cfg.max_execs)),
        exec_queue: Arc::new(Semaphore::new(
            cfg.max_execs * crate::api::exec::QUEUED_PER_SLOT,
        )),
        max_execs: cfg.max_execs,
        output: crate::http::budget::Budget::new(cfg.output_budget),
        jobs: jobs.clone(),
        started: Instant::now(),
        lab_dir: cfg.lab_dir.clone(),
        rejections: Default::default(),
        shutdown: shutdown_rx,
    });
    tracing::info!(
        %addr,
        version = env!("CARGO_PKG_VERSION"),
        cloud_init = cfg.cloud_init_dir.is_some(),
        run_setup = cfg.run_setup.is_some(),
        "listening"
    );

    tokio::spawn(housekeeping(app.clone()));

    if let Some(script) = cfg.run_setup.clone() {
        let setup_cfg = SetupConfig {
            script: Some(script),
            state_dir: cfg.state_dir.clone(),
            timeout: cfg.setup_timeout,
            user: "root".into(),
            lab_dir: cfg.lab_dir.clone(),
            echo: false,
            min_root_bytes: cfg.min_root_bytes,
            on_small_root: cfg.on_small_root,
            // No banner on the machine a lab is tried on: the small root
            // is a VM's (`labctl try` says so).
            small_root_banner: cfg.state_dir.join("small-root-banner.sh"),
            cloud_init_dir: cfg.cloud_init_dir.clone(),
            env_file: cfg.env_file.clone(),
        };
        let jobs = jobs.clone();
        tokio::spawn(async move {
            match setup::run(&setup_cfg, &jobs).await {
                Ok(outcome) => tracing::info!(
                    state = %outcome.record.state,
                    exit_status = outcome.exit_status,
                    "setup finished"
                ),
                Err(e) => tracing::error!(error = %e, "failed to record the setup"),
            }
        });
    }

    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    };
    crate::http::server::run(
        listener,
        app.clone(),
        shutting_down,
        shutdown,
        cfg.shutdown_grace,
    )
    .await;
    // The root disk's writes of this boot, kept for the next.
    app.readiness.keep_writes();
    Ok(())
}

/// Off every request's path, in one task: after each command's end
/// ([`Jobs::ended`]) its cgroup goes back into the pool if it is
/// empty, and one is made only if the pool is still empty; cgroups that
/// commands left background processes in are recycled or removed once
/// those end; the summary of rejected requests is written once due (at
/// most one line per [`crate::http::rejections::SUMMARY_EVERY`]).
///
/// The cgroupfs calls here block the runtime's one thread (the agent has
/// no blocking pool: binary size). In steady state they are two small
/// reads per exec (`cgroup.events`, `cgroup.stat`, plus the limits'
/// event files and writes where the controllers are on), a few µs; a `mkdir` only when execs overlap
/// or come faster than the sweep, an `rmdir` only for a cgroup the pool
/// has no room for, and one read per kept cgroup every 10 s. While a
/// killed command's cgroup is still emptying it comes back sooner (from
/// 100 ms, doubling): its dying processes are the agent's zombies, each
/// holding a pid of the unit's `TasksMax` until reaped.
///
/// Every minute it also keeps this boot's writes to the root disk in the
/// state dir (`written_bytes_total` across reboots; at shutdown too).
async fn housekeeping(app: Arc<App>) {
    const EVERY: Duration = Duration::from_secs(10);
    const KEEP_WRITES_EVERY: Duration = Duration::from_secs(60);
    // While a killed command's processes are dying: from 100 ms, doubling.
    const DYING_FIRST: Duration = Duration::from_millis(100);
    let mut writes_kept = Instant::now();
    let mut next = EVERY;
    loop {
        tokio::select! {
            _ = app.jobs.ended() => next = DYING_FIRST,
            _ = tokio::time::sleep(next) => next = (next * 2).min(EVERY),
        }
        if !app.jobs.housekeep() {
            next = EVERY;
        }
        app.rejections.flush_due();
        if writes_kept.elapsed() >= KEEP_WRITES_EVERY {
            writes_kept = Instant::now();
            app.readiness.keep_writes();
        }
    }
}

fn bind_hint(addr: &Listen) -> &'static str {
    match addr {
        Listen::Tcp(_) => {
            "is another lab-agent already running? choose another address with `--listen`"
        }
        // Only reached when no other `--listen` could be bound either.
        Listen::Vsock(_) => {
            "this kernel has no vsock (the module `vsock`): listen on TCP too, `--listen 0.0.0.0:8899`"
        }
    }
}

fn token_hint(e: &TokenError) -> &'static str {
    match e {
        TokenError::Read { .. } => {
            "\nhint: cloud-init writes the token file; pass `--token-file PATH` to use another"
        }
        _ => "",
    }
}
