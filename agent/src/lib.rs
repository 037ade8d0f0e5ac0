//! lab-agent: the in-guest daemon of a lab VM. It tells the backend when the
//! VM is really ready and runs its grading commands.
//!
//! # Layout (each folder's `mod.rs` has the detail)
//! - [`cli`]: arguments → validated [`ServeConfig`] / [`SetupConfig`];
//!   `serve`: `lab-agent serve` wiring (token, bind, signals, cgroups,
//!   optional setup, housekeeping); `app`: the state every handler shares.
//! - `http/`: the server, connections, the router, errors, bodies, the
//!   output budget: HTTP, whatever the endpoint.
//! - `api/`: one file per endpoint (`ready`, `exec`, `exec_stream`, `info`,
//!   `setup_log`).
//! - `readiness/`: the readiness rule from `result.json` and `setup.json`;
//!   which life of the VM (`instance`), where its boot went (`timeline`),
//!   its root disk (`root_disk`).
//! - `setup/`: running the setup script; its record (`record`).
//! - `process/`: login shells as a user, in their own process group and
//!   cgroup, with timeouts, limits and capped output (`spawn`, `identity`,
//!   `capture`, `cgroup/`, `job`, `session`).
//! - `token`: loading and checking the bearer token; `logging`, `timefmt`:
//!   a one-line-per-event log subscriber; timestamps.
//!
//! Requests go one way: `http` → `api` → (`readiness` | `process`); no
//! module imports one that imports it back. Nothing here reads `lab.toml` or
//! knows about Kubernetes. Modules are private: the surface below is what
//! `main.rs` wires and the seams the integration tests and fuzz targets
//! drive, nothing else.

mod api;
mod app;
pub mod cli;
mod http;
mod logging;
mod process;
mod readiness;
mod serve;
mod setup;
mod timefmt;
mod token;

// What `main.rs` wires.
pub use cli::Command;
pub use logging::init as init_logging;
pub use process::cgroup::hold as hold_cgroup;
pub use process::{Jobs, load_lab_env};
pub use serve::{ServeConfig, serve};
pub use setup::{SetupConfig, run as run_setup};

// The seams tests and fuzz targets drive: the state a handler sees and the
// router it goes through, the parsers of untrusted input, the bounds they
// assert, the records they fake.
pub use api::command::KILL_GRACE;
pub use api::exec::parse as parse_exec;
pub use api::ready::parse_wait;
pub use app::App;
pub use http::budget::Budget;
pub use http::listen::Peer;
pub use http::router::handle;
pub use http::server::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS, MAX_HEADER_BYTES, MAX_REFUSALS};
pub use readiness::{CACHE_TTL, Readiness, ReadinessConfig};
pub use setup::record::{SetupRecord, read as read_setup_record};
pub use token::Token;

/// `lab-agent version` output.
pub fn version_text() -> String {
    format!(
        "lab-agent {}\ncommit: {}\ntarget: {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("LAB_AGENT_COMMIT"),
        env!("LAB_AGENT_TARGET"),
    )
}
