//! `GET /v1/info`.

use crate::lifecycle::{Disk, Instance, RootDisk};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InfoResponse {
    /// The agent's version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// `PRETTY_NAME` from `/etc/os-release`, if it could be read.
    pub os: Option<String>,
    /// Kernel release (`uname -r`).
    pub kernel: Option<String>,
    pub hostname: Option<String>,
    /// Seconds since the guest booted (`/proc/uptime`).
    pub uptime_secs: Option<f64>,
    /// `/proc/sys/kernel/random/boot_id`: changes on every boot, so a backend
    /// can tell a reboot happened between two calls.
    pub boot_id: Option<String>,
    /// Seconds since this agent process started.
    pub agent_uptime_secs: f64,
    /// Where the lab's files are in this guest (`--lab-dir`, default
    /// `/opt/lab`): the `LAB_DIR` a grader gives the checks. Absent from
    /// older agents, hence optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lab_dir: Option<String>,
    /// Which life of the VM answered (see [`crate::ReadyResponse::instance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<Instance>,
    /// Whether the VM's disk was booted before it (see
    /// [`crate::ReadyResponse::disk`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<Disk>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<RootDisk>,
}
