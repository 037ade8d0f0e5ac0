//! What the readiness rule reads: cloud-init's `result.json` and
//! `status.json`, the setup's record and log tail, this boot's id.

use super::*;
use crate::setup::record::{self, MAX_STATE_FILE_BYTES, SETUP_LOG, SetupRecord};
use lab_agent_proto::{RootDisk, SetupState, Span};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// What cloud-init has said.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudInit {
    /// `false` also covers `--no-cloud-init`'s "not watched".
    pub done: bool,
    pub watched: bool,
    pub errors: Vec<String>,
    /// `status.json`'s recoverable errors ("degraded done").
    pub warnings: Vec<String>,
    /// The stages of this boot that have started ([`timeline::cloud_init_stages`]).
    pub stages: BTreeMap<String, Span>,
}

/// What the setup record says, with the liveness facts `decide` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupSeen {
    Absent,
    Unreadable(String),
    Record {
        record: SetupRecord,
        /// For a `running` record: is its process still alive?
        alive: Option<bool>,
        /// For a `running` record: was it written during this boot?
        same_boot: Option<bool>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub cloud_init: CloudInit,
    pub setup: SetupSeen,
    pub log_tail: Option<String>,
    pub root: Option<RootDisk>,
    /// When the kernel booted, in wall-clock ms since the epoch.
    pub boot_epoch_ms: u64,
    /// Which life of the VM answers, whether its disk was booted before.
    pub life: Option<Life>,
}

/// `life` and `earlier_writes` (its earlier boots' bytes written) come
/// from [`Readiness`]'s binding, the rest from the files.
pub fn observe(cfg: &ReadinessConfig, life: Option<Life>, earlier_writes: u64) -> Observation {
    let cloud_init = match &cfg.cloud_init_dir {
        None => CloudInit {
            done: true,
            watched: false,
            errors: Vec::new(),
            warnings: Vec::new(),
            stages: BTreeMap::new(),
        },
        Some(dir) => observe_cloud_init(dir),
    };
    let setup = match record::read(&cfg.state_dir) {
        Ok(None) => SetupSeen::Absent,
        Ok(Some(record)) => {
            let (alive, same_boot) = if record.state == SetupState::Running {
                (
                    record.pid.map(process_alive),
                    match (&record.boot_id, current_boot_id()) {
                        (Some(then), Some(now)) => Some(*then == now),
                        _ => None,
                    },
                )
            } else {
                (None, None)
            };
            SetupSeen::Record {
                record,
                alive,
                same_boot,
            }
        }
        Err(e) => SetupSeen::Unreadable(e.to_string()),
    };
    let log_tail = read_tail(&cfg.state_dir.join(SETUP_LOG), LOG_TAIL_BYTES);
    Observation {
        cloud_init,
        setup,
        log_tail,
        root: crate::readiness::root_disk::observe(&cfg.root, earlier_writes),
        boot_epoch_ms: timeline::boot_epoch_ms(),
        life,
    }
}

fn observe_cloud_init(dir: &Path) -> CloudInit {
    let path = dir.join("result.json");
    // Read once for both the stages' times and the warnings.
    let status = read_status(&dir.join("status.json"));
    let stages = match &status {
        Ok(v) => timeline::cloud_init_stages(v, timeline::boot_epoch_ms()),
        Err(_) => BTreeMap::new(),
    };
    // The symlink's presence is the signal; its target carries the errors.
    if std::fs::symlink_metadata(&path).is_err() {
        return CloudInit {
            done: false,
            watched: true,
            errors: Vec::new(),
            warnings: Vec::new(),
            stages,
        };
    }
    let errors = match record::read_followed(&path, MAX_STATE_FILE_BYTES) {
        Err(e) => vec![format!("cannot read `{}`: {e}", path.display())],
        Ok(bytes) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Err(e) => vec![format!("`{}` is not valid JSON: {e}", path.display())],
            Ok(v) => match v.pointer("/v1/errors") {
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|e| match e {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect(),
                Some(other) => vec![other.to_string()],
            },
        },
    };
    CloudInit {
        done: true,
        watched: true,
        errors,
        warnings: recoverable_errors(status),
        stages,
    }
}

/// `status.json`, or the warning to show when it cannot be read; a missing
/// one (cloud-init has not started) is `Null`.
fn read_status(path: &Path) -> Result<serde_json::Value, String> {
    match record::read_followed(path, MAX_STATE_FILE_BYTES) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_default()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(serde_json::Value::Null),
        // Built without `format!`: its static pieces table would be a
        // relocation in the static PIE, and those fill a page that is full
        // (BENCHMARKS.md, "Size").
        Err(e) => {
            let mut line = String::from("cannot read /run/cloud-init/status.json: ");
            line.push_str(&e.to_string());
            Err(line)
        }
    }
}

/// At most this many warnings, each cut to this many bytes: they go into
/// every `/v1/ready` answer, and a guest can log any number of them.
const MAX_WARNINGS: usize = 16;
const MAX_WARNING_BYTES: usize = 512;

/// cloud-init ≥ 23.4 keeps what it logged at WARNING (and DEPRECATED, which
/// Debian 13 logs as warnings) per stage in `status.json`, under
/// `v1.<stage>.recoverable_errors.<LEVEL>`; `result.json`'s `errors` has
/// none of it, yet `cloud-init status` calls such a boot "degraded". Older
/// cloud-init has no such key, and an unreadable file is no warning: the
/// readiness signal is `result.json` alone.
fn recoverable_errors(status: Result<serde_json::Value, String>) -> Vec<String> {
    let status = match status {
        Ok(v) => v,
        Err(line) => return vec![line],
    };
    let mut out = Vec::new();
    let mut seen = 0;
    for stage in status["v1"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
    {
        for (level, items) in stage["recoverable_errors"]
            .as_object()
            .into_iter()
            .flatten()
        {
            for item in items.as_array().into_iter().flatten() {
                seen += 1;
                if out.len() < MAX_WARNINGS {
                    // cloud-init writes strings; anything else is shown as "?".
                    let mut line = level.clone();
                    line.push_str(": ");
                    line.push_str(item.as_str().unwrap_or("?"));
                    if line.len() > MAX_WARNING_BYTES {
                        let mut cut = MAX_WARNING_BYTES;
                        while !line.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        line.truncate(cut);
                    }
                    out.push(line);
                }
            }
        }
    }
    if seen > out.len() {
        let mut line = String::from("… and ");
        line.push_str(&(seen - out.len()).to_string());
        line.push_str(" more");
        out.push(line);
    }
    out
}

pub(crate) fn process_alive(pid: u32) -> bool {
    // 0 is no process: kill(0, …) would ask about our own process group.
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid == 0 {
        return false;
    }
    // EPERM means it exists but belongs to someone else: alive.
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    ) && !is_zombie(pid)
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        == Some('Z')
}

pub fn current_boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The last `max` bytes of a file as text, starting at a line boundary when
/// one is near, so the tail does not begin mid-word.
fn read_tail(path: &Path, max: u64) -> Option<String> {
    let mut f = record::open_regular(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.take(max).read_to_end(&mut buf).ok()?;
    let mut from = 0;
    if start > 0 {
        if let Some(nl) = buf.iter().take(256).position(|&b| b == b'\n') {
            from = nl + 1;
        } else {
            while from < buf.len() && buf[from] & 0xC0 == 0x80 {
                from += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&buf[from..]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::super::decide::tests::{cfg, rec, seen};
    use super::*;

    #[test]
    fn cloud_init_errors_are_surfaced_not_fatal() {
        let dir = std::env::temp_dir().join(format!("lab-agent-ci-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data.json");
        std::fs::write(
            &data,
            r#"{"v1":{"datasource":"x","errors":["locale failed"]}}"#,
        )
        .unwrap();
        assert!(!observe_cloud_init(&dir).done);
        std::os::unix::fs::symlink(&data, dir.join("result.json")).unwrap();
        let seen = observe_cloud_init(&dir);
        assert!(seen.done);
        assert_eq!(seen.errors, vec!["locale failed".to_owned()]);
        std::fs::write(&data, "not json").unwrap();
        let seen = observe_cloud_init(&dir);
        assert!(seen.done);
        assert!(
            seen.errors[0].contains("not valid JSON"),
            "{:?}",
            seen.errors
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A degraded boot (cloud-init ≥ 23.4: warnings, no errors) is ready,
    /// with its warnings shown: `status.json`'s shape as Debian 13's
    /// cloud-init 25.1 writes it.
    #[test]
    fn recoverable_errors_are_warnings_and_bounded() {
        let dir = std::env::temp_dir().join(format!("lab-agent-ci-warn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("status.json"),
            r#"{"v1":{"datasource":"x","stage":null,
               "init":{"errors":[],"recoverable_errors":{}},
               "modules-config":{"errors":[],"recoverable_errors":{
                  "WARNING":["Invalid cloud-config provided"],
                  "DEPRECATED":["Key 'x' is deprecated"]}}}}"#,
        )
        .unwrap();
        std::fs::write(dir.join("data.json"), r#"{"v1":{"errors":[]}}"#).unwrap();
        std::os::unix::fs::symlink(dir.join("data.json"), dir.join("result.json")).unwrap();
        let observed = observe_cloud_init(&dir);
        assert!(observed.done);
        assert!(observed.errors.is_empty());
        let mut w = observed.warnings.clone();
        w.sort();
        assert_eq!(
            w,
            [
                "DEPRECATED: Key 'x' is deprecated",
                "WARNING: Invalid cloud-config provided"
            ]
        );
        let r = decide(
            &cfg(),
            Observation {
                cloud_init: observed,
                setup: seen({
                    let mut ok = rec(SetupState::Succeeded);
                    ok.exit_code = Some(0);
                    ok
                }),
                log_tail: None,
                root: None,
                boot_epoch_ms: 0,
                life: None,
            },
        );
        assert_eq!(r.state, ReadyState::Ready);
        assert_eq!(r.cloud_init.warnings.len(), 2);

        // Hundreds of long warnings: 16 shown, cut, and a count of the rest.
        let many: Vec<String> = (0..400)
            .map(|i| format!("{i} {}", "w".repeat(2000)))
            .collect();
        let status = serde_json::json!({"v1": {"init": {"recoverable_errors": {"WARNING": many}}}});
        std::fs::write(dir.join("status.json"), status.to_string()).unwrap();
        let w = observe_cloud_init(&dir).warnings;
        assert_eq!(w.len(), MAX_WARNINGS + 1, "{:?}", w.last());
        assert!(
            w[..MAX_WARNINGS]
                .iter()
                .all(|w| w.len() <= MAX_WARNING_BYTES + 3)
        );
        assert!(w[MAX_WARNINGS].contains("384 more"), "{:?}", w.last());
        // One too large to read says so, once.
        let huge = "x".repeat(MAX_STATE_FILE_BYTES as usize + 1);
        std::fs::write(dir.join("status.json"), huge).unwrap();
        let w = observe_cloud_init(&dir).warnings;
        assert!(w.len() == 1 && w[0].contains("larger than"), "{w:?}");

        // cloud-init 22.4 (no such key) and no status.json at all: none.
        std::fs::write(dir.join("status.json"), r#"{"v1":{"init":{"errors":[]}}}"#).unwrap();
        assert!(observe_cloud_init(&dir).warnings.is_empty());
        std::fs::remove_file(dir.join("status.json")).unwrap();
        assert!(observe_cloud_init(&dir).warnings.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tail_starts_at_a_line() {
        let dir = std::env::temp_dir().join(format!("lab-agent-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("log");
        let mut text = String::new();
        for i in 0..1000 {
            text.push_str(&format!("line {i}\n"));
        }
        std::fs::write(&p, &text).unwrap();
        let tail = read_tail(&p, 100).unwrap();
        assert!(tail.starts_with("line "), "{tail:?}");
        assert!(tail.ends_with("line 999\n"));
        assert!(tail.len() <= 100);
        std::fs::write(&p, "short").unwrap();
        assert_eq!(read_tail(&p, 100).unwrap(), "short");
        assert_eq!(read_tail(&dir.join("none"), 100), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn own_process_is_alive_and_a_free_pid_is_not() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(i32::MAX as u32));
        // Regression: a record with pid 0 read as "running" forever.
        assert!(!process_alive(0));
    }
}
