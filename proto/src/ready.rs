//! `GET /v1/ready[?wait=SECS]`: 200 when `state` is `ready`, 503 otherwise.

use crate::lifecycle::{Disk, Instance, RootDisk, Timeline};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The VM's readiness, as the backend sees it.
///
/// Only [`ReadyState::Ready`] and [`ReadyState::Failed`] are terminal for a
/// waiter; the others mean "not yet".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadyState {
    /// Neither cloud-init nor the setup script has got anywhere yet.
    Booting,
    /// The lab's setup script is running.
    SettingUp,
    /// Setup succeeded; cloud-init's final stage of this boot has not finished.
    WaitingForCloudInit,
    /// Cloud-init's final stage finished and setup exited 0.
    Ready,
    /// Setup failed, or cloud-init finished without setup having run.
    Failed,
}

impl ReadyState {
    /// Whether a waiter should stop waiting on this state.
    pub const fn is_terminal(self) -> bool {
        matches!(self, ReadyState::Ready | ReadyState::Failed)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            ReadyState::Booting => "booting",
            ReadyState::SettingUp => "setting_up",
            ReadyState::WaitingForCloudInit => "waiting_for_cloud_init",
            ReadyState::Ready => "ready",
            ReadyState::Failed => "failed",
        }
    }
}

impl fmt::Display for ReadyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// State of the lab's setup script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetupState {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl SetupState {
    pub const fn as_str(self) -> &'static str {
        match self {
            SetupState::Pending => "pending",
            SetupState::Running => "running",
            SetupState::Succeeded => "succeeded",
            SetupState::Failed => "failed",
        }
    }
}

impl fmt::Display for SetupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudInitStatus {
    /// `result.json` of this boot exists: the final stage has finished.
    pub done: bool,
    /// Errors cloud-init recorded in `result.json`. Warnings, not fatal.
    #[serde(default)]
    pub errors: Vec<String>,
    /// What cloud-init ≥ 23.4 recorded as recoverable in `status.json`
    /// (each prefixed with its level, e.g. `WARNING: …`): the boot it calls
    /// "degraded done". Not fatal either; empty for older cloud-init.
    #[serde(default)]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupStatus {
    pub state: SetupState,
    /// The script's exit code, once it has exited (not when killed by a signal).
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// The last ~4 KiB of the setup log, once there is one.
    #[serde(default)]
    pub log_tail: Option<String>,
}

/// Body of `GET /v1/ready`, with status 200 or 503.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadyResponse {
    pub state: ReadyState,
    /// A human sentence saying why the VM is not ready; when it is ready,
    /// absent, or a warning it is ready despite (a root filesystem under
    /// the lab's `min_root_bytes` with `on_small_root = "warn"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub cloud_init: CloudInitStatus,
    pub setup: SetupStatus,
    /// Which life of the VM answered; absent from agents that predate it
    /// (or when the agent could not keep its state dir).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<Instance>,
    /// Whether the VM's disk was booted before it (absent from older
    /// agents, and with the instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<Disk>,
    /// Where the time of this boot went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
    /// The root filesystem's size, free space, bytes written (this boot,
    /// this life) and the lab's least size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<RootDisk>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_use_spec_names() {
        for (s, name) in [
            (ReadyState::Booting, "booting"),
            (ReadyState::SettingUp, "setting_up"),
            (ReadyState::WaitingForCloudInit, "waiting_for_cloud_init"),
            (ReadyState::Ready, "ready"),
            (ReadyState::Failed, "failed"),
        ] {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{name}\""));
            assert_eq!(s.to_string(), name);
        }
        for (s, name) in [
            (SetupState::Pending, "pending"),
            (SetupState::Running, "running"),
            (SetupState::Succeeded, "succeeded"),
            (SetupState::Failed, "failed"),
        ] {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{name}\""));
        }
    }

    #[test]
    fn round_trips_the_spec_example() {
        let text = r#"{"state":"failed","reason":"setup failed",
            "cloud_init":{"done":true,"errors":[]},
            "setup":{"state":"failed","exit_code":3,"duration_ms":1234,"log_tail":"boom\n"}}"#;
        let r: ReadyResponse = serde_json::from_str(text).unwrap();
        assert_eq!(r.state, ReadyState::Failed);
        assert_eq!(r.setup.exit_code, Some(3));
        let again: ReadyResponse =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(again, r);
    }

    #[test]
    fn only_ready_and_failed_are_terminal() {
        assert!(ReadyState::Ready.is_terminal());
        assert!(ReadyState::Failed.is_terminal());
        assert!(!ReadyState::Booting.is_terminal());
        assert!(!ReadyState::SettingUp.is_terminal());
        assert!(!ReadyState::WaitingForCloudInit.is_terminal());
    }
}
