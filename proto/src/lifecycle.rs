//! The VM's life, as every `/v1/ready` and `/v1/info` answer tells it:
//! which life of the VM this is ([`Instance`]), whether its disk had a life
//! before it ([`Disk`]), where the time of this boot went ([`Timeline`]),
//! and the root disk ([`RootDisk`]).
//!
//! All three are optional on the wire: an agent that predates them sends
//! none, and a client must then treat the instance as unknown, never as
//! "unchanged".

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Length of [`Instance::id`]: 16 random bytes as lowercase hex.
pub const INSTANCE_ID_LEN: usize = 32;

/// One life of a VM's root disk.
///
/// The id is made once per root disk and kept in the agent's state dir on
/// it: a reboot keeps it (and counts in `boots`); a VM restarted onto a
/// fresh disk (a containerDisk's write layer is gone) gets a new one, and
/// with it everything the student did inside is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// 32 lowercase hex digits.
    pub id: String,
    /// Boots the agent has seen on this disk, this one included (≥ 1).
    pub boots: u64,
    /// `/proc/sys/kernel/random/boot_id` of this boot.
    pub boot_id: String,
    /// When the id was made (RFC 3339, UTC, the guest's clock).
    pub first_boot_at: String,
}

/// Whether this VM's root disk was booted before this VM first booted
/// (the seeds' golden-disk rule: a golden must be an original that was
/// never booted). Judged once, when the agent makes the instance's record,
/// and kept with it: every boot of the same life tells the same.
///
/// A booted disk copies its agent's record, its machine-id, SSH host keys
/// and cloud-init's records into every VM made from it; the agent gives
/// such a VM an id of its own (a reset stays visible) and says what it
/// found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disk {
    /// Whether any evidence was found.
    pub booted_before: bool,
    /// One short sentence per finding (the foreign record, cloud-init
    /// instance dirs of another id, a machine-id or SSH host keys older
    /// than this VM's first boot); empty when none.
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// Whether `id` has the shape of an [`Instance::id`]: what a client checks
/// before it trusts an id to pin to, and the agent before it trusts a file.
pub fn is_instance_id(id: &str) -> bool {
    id.len() == INSTANCE_ID_LEN && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// When one phase started and finished, in seconds since the kernel booted
/// (millisecond precision); each absent until it happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Span {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_secs: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_secs: Option<f64>,
}

impl Span {
    /// `finished - start`, once both are known.
    pub fn duration_secs(&self) -> Option<f64> {
        Some(self.finished_secs? - self.start_secs?)
    }
}

/// cloud-init's stages in the order they run, as `status.json` names them.
pub const CLOUD_INIT_STAGES: [&str; 4] = ["init-local", "init", "modules-config", "modules-final"];

/// Where the time of this boot went, in seconds since the kernel booted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// When the kernel booted (RFC 3339, UTC, the guest's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_at: Option<String>,
    /// When this agent process started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_started_secs: Option<f64>,
    /// Each cloud-init stage of this boot that has started, by its
    /// `status.json` name ([`CLOUD_INIT_STAGES`]); empty without cloud-init.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cloud_init: BTreeMap<String, Span>,
    /// The setup script of this boot (absent when it ran in an earlier boot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<Span>,
    /// When the VM became ready: the later of setup's and cloud-init's
    /// final stage's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_secs: Option<f64>,
}

impl Timeline {
    /// The stages that have started, in the order cloud-init runs them.
    pub fn stages(&self) -> impl Iterator<Item = (&'static str, &Span)> {
        CLOUD_INIT_STAGES
            .into_iter()
            .filter_map(|name| Some((name, self.cloud_init.get(name)?)))
    }

    /// The cloud-init stage running: the last one that started, while it
    /// has not finished (none between two stages, or once all are done).
    pub fn running_stage(&self) -> Option<&'static str> {
        let (name, span) = self.stages().last()?;
        span.finished_secs.is_none().then_some(name)
    }
}

/// The root filesystem: what a lab needs from its disk (the seeds'
/// golden-disk criteria: its size, and how much a VM writes after boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootDisk {
    /// Size of `/` (statvfs: blocks × fragment size), as `df` shows it.
    pub size_bytes: u64,
    /// What an unprivileged user may still write (`df`'s "Avail").
    pub free_bytes: u64,
    /// Bytes written to `/`'s block device since boot (its `stat` in
    /// sysfs); absent when `/` is on no block device (an overlay, tmpfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_bytes: Option<u64>,
    /// Bytes written to it over this instance's life: every boot's
    /// `written_bytes` summed (kept in the agent's state dir, updated every
    /// minute and at shutdown, so a crash loses at most a minute's). The
    /// seeds' criterion: the write layer over a golden stays within a few
    /// hundred MB. Absent where `written_bytes` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_bytes_total: Option<u64>,
    /// The lab's `[readiness] min_root_bytes`, once its setup has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bytes: Option<u64>,
    /// `size_bytes` is under `min_bytes`: with `on_small_root = "warn"` the
    /// VM is ready anyway (its `reason` says so, the student's interactive
    /// shells show a banner); with `"fail"` it is `failed`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub below_min: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(is_instance_id("0123456789abcdef0123456789abcdef"));
        for bad in [
            "",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcdeg",
        ] {
            assert!(!is_instance_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_spec_example_round_trips() {
        let text = r#"{"boot_at":"2026-12-03T10:00:00Z","agent_started_secs":3.1,
            "cloud_init":{"init-local":{"start_secs":1.9,"finished_secs":2.4},
                          "modules-final":{"start_secs":9.0,"finished_secs":71.5},
                          "init":{"start_secs":2.5}},
            "setup":{"start_secs":9.8,"finished_secs":70.9},"ready_secs":71.6}"#;
        let t: Timeline = serde_json::from_str(text).unwrap();
        let order: Vec<_> = t.stages().map(|(n, _)| n).collect();
        assert_eq!(order, ["init-local", "init", "modules-final"]);
        assert_eq!(t.running_stage(), None, "modules-final has finished");
        let mut between = t.clone();
        between.cloud_init.remove("modules-final");
        assert_eq!(between.running_stage(), Some("init"));
        assert_eq!(Timeline::default().running_stage(), None);
        assert_eq!(t.cloud_init["init"].finished_secs, None);
        assert!((t.setup.unwrap().duration_secs().unwrap() - 61.1).abs() < 1e-9);
        let again: Timeline = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(again, t);
    }
}
