//! Is the lab VM ready? Built from two files and nothing else:
//! `CLOUD_INIT_DIR/result.json` (cloud-init's final stage of *this* boot has
//! finished: the symlink lives on tmpfs and init-local removes it at the
//! start of every boot) and `STATE_DIR/setup.json` (the setup script's record).
//!
//! [`decide`] is a pure function of what [`observe`] saw, so every state and
//! reason is unit-tested without files; [`Readiness`] adds a short-lived cache
//! so a flood of polls costs one evaluation per [`CACHE_TTL`].

mod decide;
pub mod instance;
mod life;
mod observe;
pub mod root_disk;
pub mod timeline;

pub use decide::decide;
pub(crate) use observe::process_alive;
pub use observe::{Observation, SetupSeen, current_boot_id, observe};

use hyper::body::Bytes;
pub use instance::Life;
use lab_agent_proto::ReadyState;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How stale a cached answer may be. Long-polls re-check every
/// `POLL_INTERVAL`; together they keep detection well under 100 ms.
pub const CACHE_TTL: Duration = Duration::from_millis(20);
pub const POLL_INTERVAL: Duration = Duration::from_millis(40);
/// How much of the end of `setup.log` a response carries.
pub const LOG_TAIL_BYTES: u64 = 4096;

#[derive(Debug, Clone)]
pub struct ReadinessConfig {
    pub state_dir: PathBuf,
    /// `None` with `--no-cloud-init`: cloud-init counts as done.
    pub cloud_init_dir: Option<PathBuf>,
    /// `--run-setup`: this agent runs the setup itself, so "no record yet"
    /// means "about to start", not "never ran".
    pub agent_runs_setup: bool,
    /// This boot's id: fixed for the agent's life.
    pub boot_id: Option<String>,
    /// When the agent started, in ms since boot.
    pub agent_started_ms: Option<u64>,
    /// The filesystem whose size and writes are reported (`/`).
    pub root: PathBuf,
}

/// A computed answer: the state, and the response body ready to send.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub state: ReadyState,
    pub body: Bytes,
    /// The answer's `root`, for `/v1/info`.
    pub root: Option<lab_agent_proto::RootDisk>,
}

/// Readiness with a small cache in front, and the VM's life it answers
/// for.
#[derive(Debug)]
pub struct Readiness {
    cfg: ReadinessConfig,
    cache: Mutex<Option<(Instant, Snapshot)>>,
    lives: life::Lives,
}

impl Readiness {
    /// Also observes which life of the VM this boot belongs to (counting
    /// the boot in the state dir).
    pub fn new(cfg: ReadinessConfig) -> Self {
        let lives = life::Lives::start(&cfg);
        Readiness {
            cfg,
            cache: Mutex::new(None),
            lives,
        }
    }

    pub fn config(&self) -> &ReadinessConfig {
        &self.cfg
    }

    /// Which life of the VM answers (`None` when the state dir cannot be
    /// used), bound to cloud-init's instance once it is known.
    pub fn life(&self) -> Option<Life> {
        self.lives.current(&self.cfg).0
    }

    /// [`Self::life`]'s instance id alone (what every exec answer carries:
    /// one string copied, not the whole life).
    pub fn instance_id(&self) -> Option<String> {
        self.lives.instance_id(&self.cfg)
    }

    /// Keeps this boot's writes to the root disk in the state dir
    /// (`written_bytes_total` over reboots): every minute, and at shutdown.
    pub fn keep_writes(&self) {
        self.lives.keep_writes(&self.cfg);
    }

    pub fn current(&self) -> Snapshot {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, snap)) = cache.as_ref()
            && at.elapsed() < CACHE_TTL
        {
            return snap.clone();
        }
        let (life, earlier_writes) = self.lives.current(&self.cfg);
        let resp = decide(&self.cfg, observe(&self.cfg, life, earlier_writes));
        let body = serde_json::to_vec(&resp)
            .map(Bytes::from)
            .unwrap_or_else(|_| {
                Bytes::from_static(
                    br#"{"error":{"code":"internal","message":"failed to serialize readiness"}}"#,
                )
            });
        let snap = Snapshot {
            state: resp.state,
            body,
            root: resp.root,
        };
        *cache = Some((Instant::now(), snap.clone()));
        snap
    }
}
