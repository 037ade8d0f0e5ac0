//! `lab.toml` as written: the serde layer, kept only to name what is wrong
//! in an author's terms before [`Lab`](super::Lab) is built from it.

use super::*;
use crate::exec::RawExecOptions;

/// The top level: its own keys and, flattened, the exec options as the
/// lab's defaults. Two structs, not one with a flattened field, so that
/// each declares its keys to `keys.rs` (serde reads a struct with a
/// flattened field as a map, and names no field); unknown keys are found
/// there, before serde, which would let them through a flattened struct.
#[derive(Deserialize)]
pub(super) struct RawLab {
    #[serde(flatten)]
    pub(super) keys: RawLabKeys,
    /// The lab's defaults for every check: any exec option.
    #[serde(flatten)]
    pub(super) options: RawExecOptions,
}

#[derive(Deserialize)]
pub(super) struct RawLabKeys {
    pub(super) name: String,
    #[serde(default)]
    pub(super) setup: Option<RawSetup>,
    #[serde(default)]
    pub(super) files: Option<RawFiles>,
    #[serde(default)]
    pub(super) checks: Vec<RawCheck>,
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

/// A `[[checks]]` table: its own keys and, flattened, how it runs over the
/// lab's defaults (two structs, as [`RawLab`]).
#[derive(Deserialize)]
pub(super) struct RawCheck {
    #[serde(flatten)]
    pub(super) keys: RawCheckKeys,
    #[serde(flatten)]
    pub(super) options: RawExecOptions,
}

#[derive(Deserialize)]
pub(super) struct RawCheckKeys {
    pub(super) name: String,
    pub(super) run: String,
    #[serde(default)]
    pub(super) fail_message: Option<String>,
    #[serde(default)]
    pub(super) points: Option<i64>,
    #[serde(default)]
    pub(super) vm: Option<String>,
    pub(super) solve: Option<String>,
    #[serde(default)]
    pub(super) initially: Initially,
}
