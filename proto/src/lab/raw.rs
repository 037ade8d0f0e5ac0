//! `lab.toml` as written: the serde layer, kept only to name what is wrong
//! in an author's terms before [`Lab`](super::Lab) is built from it.

use super::*;
use crate::exec::RawExecOptions;

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
    /// The lab's defaults for every check: any exec option.
    #[serde(flatten)]
    pub(super) options: RawExecOptions,
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
    #[serde(default)]
    pub(super) on_small_root: Option<OnSmallRoot>,
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
    pub(super) fail_message: Option<String>,
    #[serde(default)]
    pub(super) points: Option<i64>,
    /// How it runs, over the lab's defaults.
    #[serde(flatten)]
    pub(super) options: RawExecOptions,
    #[serde(default)]
    pub(super) vm: Option<String>,
    pub(super) solve: Option<String>,
    #[serde(default)]
    pub(super) initially: Initially,
}
