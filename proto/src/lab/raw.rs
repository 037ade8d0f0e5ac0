//! `lab.toml` as written: the serde layer, kept only to name what is wrong
//! in an author's terms before [`Lab`](super::Lab) is built from it.

use super::*;
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLab {
    pub(super) name: String,
    #[serde(default)]
    pub(super) setup: Option<RawSetup>,
    #[serde(default)]
    pub(super) files: Option<RawFiles>,
    #[serde(default)]
    pub(super) checks: Vec<RawCheck>,
    #[serde(default)]
    pub(super) profile: Option<Profile>,
    #[serde(default)]
    pub(super) leave_running: Option<bool>,
    #[serde(default)]
    pub(super) max_pids: Option<i64>,
    #[serde(default)]
    pub(super) max_memory_bytes: Option<i64>,
    #[serde(default)]
    pub(super) readiness: Option<RawReadiness>,
    #[serde(default)]
    pub(super) vms: Vec<vms::RawVm>,
    pub(super) solve: Option<RawSolve>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSolve {
    pub(super) script: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReadiness {
    #[serde(default)]
    pub(super) timeout_secs: Option<i64>,
    #[serde(default)]
    pub(super) min_root_bytes: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSetup {
    #[serde(default)]
    pub(super) script: Option<String>,
    #[serde(default)]
    pub(super) timeout_secs: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFiles {
    pub(super) source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheck {
    pub(super) name: String,
    pub(super) run: String,
    #[serde(default)]
    pub(super) user: Option<String>,
    #[serde(default)]
    pub(super) timeout_secs: Option<i64>,
    #[serde(default)]
    pub(super) fail_message: Option<String>,
    #[serde(default)]
    pub(super) points: Option<i64>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) cwd: Option<String>,
    #[serde(default)]
    pub(super) stdin: Option<String>,
    #[serde(default)]
    pub(super) max_output_bytes: Option<i64>,
    pub(super) profile: Option<Profile>,
    #[serde(default)]
    pub(super) leave_running: Option<bool>,
    #[serde(default)]
    pub(super) max_pids: Option<i64>,
    #[serde(default)]
    pub(super) max_memory_bytes: Option<i64>,
    #[serde(default)]
    pub(super) vm: Option<String>,
    pub(super) solve: Option<String>,
    #[serde(default)]
    pub(super) initially: Initially,
}
