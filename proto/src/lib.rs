//! The contract between `lab-agent` (in the guest) and everything that talks
//! to it (the backend client, `labctl`, tests).
//!
//! # Layout
//! - [`addr_file`]: the address file `lab-agent serve --addr-file` writes,
//!   read (and waited for) by whoever starts an agent on loopback.
//! - [`ready`]: `GET /v1/ready` — readiness states and the response body.
//! - [`exec`]: `POST /v1/exec` — the request and its result.
//! - [`info`]: `GET /v1/info`.
//! - [`lifecycle`]: the VM's life in those answers: instance identity,
//!   whether its disk was booted before, the boot's timeline, the root disk.
//! - [`error`]: the error body every non-2xx response carries.
//! - [`guest`]: the guest contract: paths, port, token rule, defaults.
//! - [`text`]: guest-supplied text made safe to show a person (control
//!   characters escaped), for every client that prints it.
//! - [`lab`] (feature `lab`): the `lab.toml` model shared by the client and
//!   the payload generator, with the rules every front end shares
//!   (`check_lab_name`, `Lab::select_checks`). The agent never reads
//!   `lab.toml`.
//!
//! These types are the *only* definition of the wire format: the agent
//! serializes them and the client deserializes them, so the two cannot drift.
//! `API.md` at the repository root describes the same contract for humans and
//! `openapi.yaml` for other languages.
//!
//! Requests deny unknown fields (a typo in a backend is an error, not a
//! silently ignored setting); responses accept them, so an agent that adds a
//! response field does not break older clients.

pub mod addr_file;
pub mod error;
pub mod exec;
pub mod guest;
pub mod info;
#[cfg(feature = "lab")]
pub mod lab;
pub mod lifecycle;
pub mod ready;
pub mod text;
pub mod token_file;

pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use exec::{ExecRequest, ExecResult, InvalidRequest, Profile, StreamEvent};
pub use info::InfoResponse;
pub use lifecycle::{Disk, Instance, RootDisk, Span, Timeline};
pub use ready::{CloudInitStatus, ReadyResponse, ReadyState, SetupState, SetupStatus};

/// Port the agent listens on in a lab VM ([`guest::PORT`]).
pub const DEFAULT_PORT: u16 = guest::PORT;

/// Largest request body the agent accepts (413 above it).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Longest `?wait=` a `/v1/ready` long-poll may ask for.
pub const MAX_READY_WAIT_SECS: u64 = 60;

/// Where a lab's files live in the guest, and the default `LAB_DIR`.
pub const GUEST_LAB_DIR: &str = guest::LAB_DIR;
pub use guest::INSTALL_ERROR_FILE;
/// Environment variable through which setup and checks find the lab's files.
pub const LAB_DIR_ENV: &str = "LAB_DIR";

/// Paths of the API, in one place so the agent's router and the client agree.
pub mod paths {
    pub const READY: &str = "/v1/ready";
    pub const EXEC: &str = "/v1/exec";
    pub const INFO: &str = "/v1/info";
    /// `GET /v1/setup/log?offset=N[&wait=SECS]`: the setup log from a byte
    /// offset, `text/plain`, with [`super::LOG_OFFSET_HEADER`] and
    /// [`super::SETUP_STATE_HEADER`].
    pub const SETUP_LOG: &str = "/v1/setup/log";
}

/// `/v1/setup/log`'s header: the offset after the bytes answered (where
/// the next call starts).
pub const LOG_OFFSET_HEADER: &str = "x-log-offset";
/// `/v1/setup/log`'s header: the setup's state (`pending`, `running`,
/// `succeeded`, `failed`), as `setup.state` in `/v1/ready`.
pub const SETUP_STATE_HEADER: &str = "x-setup-state";
/// `/v1/setup/log`'s header, present (`1`) when the log is now shorter
/// than the offset asked for (it was replaced or truncated): the answer
/// then starts again from offset 0.
pub const LOG_RESTARTED_HEADER: &str = "x-log-restarted";
/// Most bytes one `/v1/setup/log` answer carries; ask again from
/// `X-Log-Offset` for more.
pub const MAX_LOG_CHUNK_BYTES: u64 = 1024 * 1024;
