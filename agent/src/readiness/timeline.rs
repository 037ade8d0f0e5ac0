//! Where the time of this boot went, in seconds since the kernel booted:
//! the agent's start, cloud-init's stages (from its `status.json`), the
//! setup script (from its record) and the moment the VM became ready.
//!
//! Everything is on `CLOCK_BOOTTIME`; cloud-init stamps its stages with the
//! wall clock, so they are moved onto it through the boot's wall-clock time
//! (now on the wall clock minus now since boot).

use lab_agent_proto::lifecycle::{CLOUD_INIT_STAGES, Span};
use nix::libc;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// Milliseconds since the kernel booted, suspend included.
pub fn since_boot_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // CLOCK_BOOTTIME cannot fail with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// When the kernel booted, on the wall clock, in ms since the epoch.
/// Taken once per process, so `boot_at` and the stages' times do not
/// jitter by a millisecond from one answer to the next, from both clocks
/// in nanoseconds, rounded once; and kept for the boot in the instance
/// record ([`adopt_boot_epoch_ms`]), so an agent restarted in the same boot
/// says the same millisecond: the two clocks are read one after the other,
/// and when the boot's offset lies near half a millisecond, the time
/// between the reads (more on a loaded machine) decides which way it
/// rounds.
pub fn boot_epoch_ms() -> u64 {
    use std::sync::atomic::Ordering;
    match BOOT_EPOCH_MS.load(Ordering::Relaxed) {
        0 => {
            let ms = measure_boot_epoch_ms();
            BOOT_EPOCH_MS.store(ms, Ordering::Relaxed);
            ms
        }
        ms => ms,
    }
}

/// 0: not taken yet.
static BOOT_EPOCH_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// This boot's time as the first agent of the boot took it (the instance
/// record keeps it): what [`boot_epoch_ms`] says from now on.
pub fn adopt_boot_epoch_ms(ms: u64) {
    if ms > 0 {
        BOOT_EPOCH_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

fn measure_boot_epoch_ms() -> u64 {
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer; CLOCK_BOOTTIME cannot fail with it.
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let up = ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128;
        ((now.as_nanos().saturating_sub(up) + 500_000) / 1_000_000) as u64
    }
}

pub fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// Below this a `status.json` stamp is seconds since boot, above it
/// seconds since the epoch (2001-09-09: no guest boots before it, and no
/// guest runs for 31 years).
const WALL_CLOCK_FROM_SECS: f64 = 1e9;

/// cloud-init's stages of this boot from its `status.json`
/// (`v1.<stage>.start|finished`, `null` until then). cloud-init 22.4 stamps
/// them with the wall clock (`time.time()`), 25.x with the time since boot
/// (`util.uptime()`): both are read, the first moved onto the boot clock.
/// A wall-clock stamp from before this boot is not this boot's and is left
/// out. Both name the network stage `init`; a name of 25.x's unit
/// (`init-network`) is read as the same stage.
pub fn cloud_init_stages(status: &serde_json::Value, boot_epoch_ms: u64) -> BTreeMap<String, Span> {
    let mut out = BTreeMap::new();
    let Some(v1) = status.get("v1").and_then(|v| v.as_object()) else {
        return out;
    };
    for (key, stage) in v1 {
        let name = if key == "init-network" { "init" } else { key };
        if !CLOUD_INIT_STAGES.contains(&name) {
            continue;
        }
        let at = |field: &str| {
            let stamp = stage.get(field)?.as_f64().filter(|s| *s >= 0.0)?;
            let ms = (stamp * 1000.0).round() as u64;
            if stamp < WALL_CLOCK_FROM_SECS {
                Some(secs(ms))
            } else {
                ms.checked_sub(boot_epoch_ms).map(secs)
            }
        };
        let span = Span {
            start_secs: at("start"),
            finished_secs: at("finished"),
        };
        if span.start_secs.is_some() {
            out.insert(name.to_owned(), span);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_forward() {
        let a = since_boot_ms();
        assert!(a > 0);
        assert!(since_boot_ms() >= a);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(boot_epoch_ms() <= now);
    }

    /// The shapes of 22.4's and 25.1's `status.json`: stages not yet run are
    /// `null`, a stage of an earlier boot is dropped.
    #[test]
    fn stages_from_status_json() {
        let boot = 1_764_756_000_000; // ms
        let status: serde_json::Value = serde_json::from_str(
            r#"{"v1":{"datasource":"DataSourceNoCloud","stage":"modules-final",
                "init-local":{"errors":[],"start":1764756001.9,"finished":1764756002.4},
                "init":{"errors":[],"start":1764756002.5,"finished":1764756005.25},
                "modules-config":{"errors":[],"start":null,"finished":null},
                "modules-final":{"errors":[],"recoverable_errors":{},"start":1764756009.0,"finished":null},
                "modules-init":{"start":1764756003.0},
                "stale":{"start":1.0}}}"#,
        )
        .unwrap();
        let got = cloud_init_stages(&status, boot);
        let keys: Vec<_> = got.keys().map(String::as_str).collect();
        assert_eq!(keys, ["init", "init-local", "modules-final"]);
        assert_eq!(got["init-local"].start_secs, Some(1.9));
        assert_eq!(got["init"].finished_secs, Some(5.25));
        assert_eq!(got["modules-final"].finished_secs, None);

        let renamed: serde_json::Value = serde_json::from_str(
            r#"{"v1":{"init-network":{"start":1764756002.5,"finished":null}}}"#,
        )
        .unwrap();
        assert_eq!(
            cloud_init_stages(&renamed, boot)["init"].start_secs,
            Some(2.5)
        );
        // An earlier boot's stamps are not this boot's.
        assert!(cloud_init_stages(&status, boot + 10_000_000).is_empty());
        // cloud-init 25.x: seconds since boot, as they are.
        let uptime: serde_json::Value = serde_json::from_str(
            r#"{"v1":{"init-local":{"start":54.855,"finished":62.255},
                      "modules-final":{"start":157.015,"finished":null}}}"#,
        )
        .unwrap();
        let got = cloud_init_stages(&uptime, boot);
        assert_eq!(got["init-local"].start_secs, Some(54.855));
        assert_eq!(got["init-local"].finished_secs, Some(62.255));
        assert_eq!(got["modules-final"].start_secs, Some(157.015));
        assert!(cloud_init_stages(&serde_json::Value::Null, boot).is_empty());
    }
}
