//! lab-agent: the in-guest daemon of a lab VM. It tells the backend when the
//! VM is really ready and runs its grading commands.
//!
//! # Layout
//! - [`cli`]: arguments → validated [`serve::ServeConfig`] / [`setup::SetupConfig`].
//! - [`serve`]: `lab-agent serve` wiring: token, bind, signals, cgroups,
//!   optional setup, the housekeeping task.
//! - [`app`]: the state every handler shares ([`app::App`]).
//! - [`server`]: accept loop, timeouts, graceful shutdown; [`conn_io`]: the
//!   socket as hyper sees it (write timeout, busy while bytes are unsent);
//!   [`conns`]: the connection cap; the longest-idle connection makes room.
//! - [`router`]: the routing table; auth first; one log line per request;
//!   [`rejections`]: 401s and refused connections, counted and summarised.
//! - [`ready`], [`exec`], [`info`]: one file per endpoint.
//! - [`readiness`]: the readiness rule, from `result.json` and `setup.json`;
//!   with [`instance`] (which life of the VM: `instance.json`),
//!   [`timeline`] (where this boot's time went) and [`root_disk`].
//! - [`setup`], [`setup_record`]: running the setup script; its record.
//! - [`process`], [`identity`], [`capture`]: login shells as a user, in their
//!   own process group, with timeouts and capped output; [`spawn`]: the
//!   vfork-style process creation underneath; [`cgroup`]: each command's
//!   cgroup (the pool, limits, what was hit, the kill).
//! - [`budget`]: the output budget exec answers reserve from.
//! - [`token`]: loading and checking the bearer token.
//! - [`api_error`], [`http`], [`body`]: error → status + JSON; HTTP helpers;
//!   response bodies that escape command output while sending it.
//! - [`logging`], [`timefmt`]: a one-line-per-event log subscriber; timestamps.
//!
//! Requests go one way: `server` → `router` → endpoint → (`readiness` |
//! `process` → `spawn`, `cgroup`); no module imports one that imports it
//! back. Nothing here reads `lab.toml` or knows about Kubernetes.

pub mod api_error;
pub mod app;
pub mod body;
pub mod budget;
pub mod capture;
pub mod cgroup;
pub mod cli;
pub mod conn_io;
pub mod conns;
pub mod exec;
pub mod exec_stream;
pub mod http;
pub mod identity;
pub mod info;
pub mod instance;
pub mod logging;
pub mod process;
pub mod readiness;
pub mod ready;
pub mod rejections;
pub mod root_disk;
pub mod router;
pub mod serve;
pub mod server;
pub mod setup;
pub mod setup_log;
pub mod setup_record;
pub mod spawn;
pub mod timefmt;
pub mod timeline;
pub mod token;

/// `lab-agent version` output.
pub fn version_text() -> String {
    format!(
        "lab-agent {}\ncommit: {}\ntarget: {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("LAB_AGENT_COMMIT"),
        env!("LAB_AGENT_TARGET"),
    )
}
