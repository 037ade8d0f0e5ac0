//! Is the lab VM ready? Built from two files and nothing else:
//! `CLOUD_INIT_DIR/result.json` (cloud-init's final stage of *this* boot has
//! finished: the symlink lives on tmpfs and init-local removes it at the
//! start of every boot) and `STATE_DIR/setup.json` (the setup script's record).
//!
//! [`decide`] is a pure function of what [`observe`] saw, so every state and
//! reason is unit-tested without files; [`Readiness`] adds a short-lived cache
//! so a flood of polls costs one evaluation per [`CACHE_TTL`].

use crate::setup_record::{self, MAX_STATE_FILE_BYTES, SETUP_LOG, SetupRecord};
use crate::timeline;
use hyper::body::Bytes;
use lab_agent_proto::{
    CloudInitStatus, Instance, ReadyResponse, ReadyState, RootDisk, SetupState, SetupStatus, Span,
    Timeline,
};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How stale a cached answer may be. Long-polls re-check every
/// [`POLL_INTERVAL`]; together they keep detection well under 100 ms.
pub const CACHE_TTL: Duration = Duration::from_millis(20);
pub const POLL_INTERVAL: Duration = Duration::from_millis(40);
/// How much of the end of `setup.log` a response carries.
pub const LOG_TAIL_BYTES: u64 = 4096;

#[derive(Debug, Clone)]
pub struct ReadinessConfig {
    pub state_dir: PathBuf,
    /// `None` with `--no-cloud-init`: cloud-init counts as done.
    pub cloud_init_dir: Option<PathBuf>,
    /// `--run-setup`: this agent runs the setup itself, so "no record yet"
    /// means "about to start", not "never ran".
    pub agent_runs_setup: bool,
    /// This boot's id, and which life of the VM it belongs to (`None` when
    /// the state dir could not be used): fixed for the agent's life.
    pub boot_id: Option<String>,
    pub instance: Option<Instance>,
    /// When the agent started, in ms since boot.
    pub agent_started_ms: Option<u64>,
    /// The filesystem whose size and writes are reported (`/`).
    pub root: PathBuf,
}

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
}

pub fn observe(cfg: &ReadinessConfig) -> Observation {
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
    let setup = match setup_record::read(&cfg.state_dir) {
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
        root: crate::root_disk::observe(&cfg.root),
        boot_epoch_ms: timeline::boot_epoch_ms(),
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
    let errors = match setup_record::read_followed(&path, MAX_STATE_FILE_BYTES) {
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
    match setup_record::read_followed(path, MAX_STATE_FILE_BYTES) {
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
    let mut f = setup_record::open_regular(path).ok()?;
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

/// The whole readiness rule.
pub fn decide(cfg: &ReadinessConfig, obs: Observation) -> ReadyResponse {
    let cloud_init = CloudInitStatus {
        done: obs.cloud_init.done,
        errors: obs.cloud_init.errors.clone(),
        warnings: obs.cloud_init.warnings.clone(),
    };
    let ci_done = obs.cloud_init.done;
    let ci_reason = "cloud-init's final stage has not finished yet";
    let mut setup = SetupStatus {
        state: SetupState::Pending,
        exit_code: None,
        duration_ms: None,
        log_tail: obs.log_tail,
    };

    // The setup's times belong to this boot's timeline only when it ran in
    // this boot (after a reboot cloud-init does not run it again).
    let setup_span = match &obs.setup {
        SetupSeen::Record { record, .. }
            if record.started_boot_ms.is_some()
                && record.boot_id.is_some()
                && record.boot_id == cfg.boot_id =>
        {
            Some(Span {
                start_secs: record.started_boot_ms.map(timeline::secs),
                finished_secs: record.finished_boot_ms.map(timeline::secs),
            })
        }
        _ => None,
    };
    let (state, reason): (ReadyState, Option<String>) = match obs.setup {
        SetupSeen::Unreadable(why) => (
            ReadyState::Failed,
            Some(format!("the setup record cannot be read: {why}")),
        ),
        SetupSeen::Absent => {
            if cfg.agent_runs_setup {
                (
                    ReadyState::Booting,
                    Some("the setup script is about to start".into()),
                )
            } else if !obs.cloud_init.watched {
                (
                    ReadyState::Failed,
                    Some(format!(
                        "no setup has been recorded in `{}` and cloud-init is not watched (--no-cloud-init): pass --run-setup SCRIPT or run `lab-agent setup`",
                        cfg.state_dir.display()
                    )),
                )
            } else if ci_done {
                (
                    ReadyState::Failed,
                    Some("cloud-init has finished but the lab setup never ran: check runcmd in /var/log/cloud-init-output.log".into()),
                )
            } else {
                (
                    ReadyState::Booting,
                    Some("waiting for cloud-init to start the lab setup".into()),
                )
            }
        }
        SetupSeen::Record {
            record,
            alive,
            same_boot,
        } => {
            setup.state = record.state;
            setup.exit_code = record.exit_code;
            setup.duration_ms = record.duration_ms;
            match record.state {
                SetupState::Pending => (
                    ReadyState::Booting,
                    Some("the setup script has not started yet".into()),
                ),
                SetupState::Running if same_boot == Some(false) => {
                    setup.state = SetupState::Failed;
                    (
                        ReadyState::Failed,
                        Some(
                            "the setup script was interrupted by a reboot and never finished"
                                .into(),
                        ),
                    )
                }
                SetupState::Running if alive == Some(false) => {
                    setup.state = SetupState::Failed;
                    (
                        ReadyState::Failed,
                        Some(format!(
                            "the setup process (pid {}) died without recording a result",
                            record.pid.unwrap_or(0)
                        )),
                    )
                }
                SetupState::Running => (
                    ReadyState::SettingUp,
                    Some(format!(
                        "the setup script is running (since {})",
                        record.started_at
                    )),
                ),
                SetupState::Failed => (ReadyState::Failed, Some(failure_reason(&record))),
                SetupState::Succeeded if ci_done => (ReadyState::Ready, None),
                SetupState::Succeeded => (
                    ReadyState::WaitingForCloudInit,
                    Some(format!("setup succeeded; {ci_reason}")),
                ),
            }
        }
    };
    let ready_secs = (state == ReadyState::Ready)
        .then(|| {
            let final_stage = obs.cloud_init.stages.get("modules-final");
            [
                setup_span.and_then(|s| s.finished_secs),
                final_stage.and_then(|s| s.finished_secs),
            ]
            .into_iter()
            .flatten()
            .reduce(f64::max)
        })
        .flatten();
    let timeline = Timeline {
        boot_at: Some(crate::timefmt::rfc3339(
            std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(obs.boot_epoch_ms),
        )),
        agent_started_secs: cfg.agent_started_ms.map(timeline::secs),
        cloud_init: obs.cloud_init.stages,
        setup: setup_span,
        ready_secs,
    };
    ReadyResponse {
        state,
        reason,
        cloud_init,
        setup,
        instance: cfg.instance.clone(),
        timeline: Some(timeline),
        root: obs.root,
    }
}

fn failure_reason(r: &SetupRecord) -> String {
    if let (true, Some(err)) = (r.timed_out, &r.error) {
        // `lab-agent setup` wrote what happened, with the configured
        // timeout; the measured duration (which includes the grace to stop
        // it) beside it would read as a contradiction.
        return err.clone();
    }
    let mut s = if r.timed_out {
        format!(
            "the setup script timed out after {} s and was killed",
            r.duration_ms.unwrap_or(0).div_ceil(1000)
        )
    } else if let Some(code) = r.exit_code {
        format!("the setup script failed with exit code {code}")
    } else if let Some(sig) = r.signal {
        format!("the setup script was killed by signal {sig}")
    } else if let Some(err) = &r.error {
        // The script did not run, or its end was not seen: the error says it.
        return format!("setup failed: {err}");
    } else {
        "the setup script failed".to_owned()
    };
    if let Some(err) = &r.error {
        s.push_str(": ");
        s.push_str(err);
    }
    s
}

/// A computed answer: the state, and the response body ready to send.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub state: ReadyState,
    pub body: Bytes,
}

/// Readiness with a small cache in front.
#[derive(Debug)]
pub struct Readiness {
    cfg: ReadinessConfig,
    cache: Mutex<Option<(Instant, Snapshot)>>,
}

impl Readiness {
    pub fn new(cfg: ReadinessConfig) -> Self {
        Readiness {
            cfg,
            cache: Mutex::new(None),
        }
    }

    pub fn config(&self) -> &ReadinessConfig {
        &self.cfg
    }

    pub fn current(&self) -> Snapshot {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, snap)) = cache.as_ref()
            && at.elapsed() < CACHE_TTL
        {
            return snap.clone();
        }
        let resp = decide(&self.cfg, observe(&self.cfg));
        let body = serde_json::to_vec(&resp)
            .map(Bytes::from)
            .unwrap_or_else(|_| {
                Bytes::from_static(
                    br#"{"error":{"code":"internal","message":"failed to serialize readiness"}}"#,
                )
            });
        let snap = Snapshot {
            state: resp.state,
            body,
        };
        *cache = Some((Instant::now(), snap.clone()));
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ReadinessConfig {
        ReadinessConfig {
            state_dir: "/var/lib/lab-agent".into(),
            cloud_init_dir: Some("/run/cloud-init".into()),
            agent_runs_setup: false,
            boot_id: Some("b".into()),
            instance: None,
            agent_started_ms: Some(3_100),
            root: "/".into(),
        }
    }

    fn ci(done: bool) -> CloudInit {
        CloudInit {
            done,
            watched: true,
            errors: Vec::new(),
            warnings: Vec::new(),
            stages: BTreeMap::new(),
        }
    }

    fn rec(state: SetupState) -> SetupRecord {
        SetupRecord {
            state,
            started_at: "2026-11-29T08:00:00Z".into(),
            finished_at: None,
            exit_code: None,
            signal: None,
            timed_out: false,
            duration_ms: None,
            error: None,
            script: None,
            pid: Some(42),
            boot_id: Some("b".into()),
            started_boot_ms: None,
            finished_boot_ms: None,
        }
    }

    fn seen(record: SetupRecord) -> SetupSeen {
        SetupSeen::Record {
            record,
            alive: Some(true),
            same_boot: Some(true),
        }
    }

    /// A timeout is told once, with the timeout the setup had; the time it
    /// ran (the timeout plus the grace to stop it) would contradict it.
    #[test]
    fn a_setup_timeout_is_told_once() {
        let mut r = rec(SetupState::Failed);
        r.timed_out = true;
        r.duration_ms = Some(2_900);
        r.error = Some("setup timed out after 2 s; its process group was killed".into());
        assert_eq!(
            failure_reason(&r),
            "setup timed out after 2 s; its process group was killed"
        );
    }

    /// One row per situation: cloud-init done?, setup seen, expected state,
    /// a fragment of the reason (empty = no reason).
    #[test]
    fn the_readiness_table() {
        let mut failed = rec(SetupState::Failed);
        failed.exit_code = Some(3);
        let mut timed_out = rec(SetupState::Failed);
        timed_out.timed_out = true;
        timed_out.duration_ms = Some(600_000);
        timed_out.signal = Some(15);
        let mut ok = rec(SetupState::Succeeded);
        ok.exit_code = Some(0);
        let dead = SetupSeen::Record {
            record: rec(SetupState::Running),
            alive: Some(false),
            same_boot: Some(true),
        };
        let rebooted = SetupSeen::Record {
            record: rec(SetupState::Running),
            alive: Some(true),
            same_boot: Some(false),
        };
        let rows: Vec<(bool, SetupSeen, ReadyState, &str)> = vec![
            (
                false,
                SetupSeen::Absent,
                ReadyState::Booting,
                "waiting for cloud-init",
            ),
            (
                true,
                SetupSeen::Absent,
                ReadyState::Failed,
                "setup never ran",
            ),
            (
                false,
                seen(rec(SetupState::Running)),
                ReadyState::SettingUp,
                "is running",
            ),
            (
                true,
                seen(rec(SetupState::Running)),
                ReadyState::SettingUp,
                "is running",
            ),
            (false, dead.clone(), ReadyState::Failed, "pid 42) died"),
            (true, dead, ReadyState::Failed, "died without recording"),
            (
                false,
                rebooted,
                ReadyState::Failed,
                "interrupted by a reboot",
            ),
            (
                false,
                seen(ok.clone()),
                ReadyState::WaitingForCloudInit,
                "final stage",
            ),
            (true, seen(ok), ReadyState::Ready, ""),
            (
                false,
                seen(failed.clone()),
                ReadyState::Failed,
                "exit code 3",
            ),
            (true, seen(failed), ReadyState::Failed, "exit code 3"),
            (
                true,
                seen(timed_out),
                ReadyState::Failed,
                "timed out after 600 s",
            ),
            (
                true,
                SetupSeen::Unreadable("bad json".into()),
                ReadyState::Failed,
                "cannot be read: bad json",
            ),
        ];
        for (done, setup, want, reason) in rows {
            let label = format!("{done} {setup:?}");
            let r = decide(
                &cfg(),
                Observation {
                    cloud_init: ci(done),
                    setup,
                    log_tail: None,
                    root: None,
                    boot_epoch_ms: 0,
                },
            );
            assert_eq!(r.state, want, "{label}");
            assert_eq!(r.cloud_init.done, done);
            match r.reason {
                None => assert!(reason.is_empty(), "{label}: no reason, wanted {reason:?}"),
                Some(got) => assert!(
                    !reason.is_empty() && got.contains(reason),
                    "{label}: {got:?} lacks {reason:?}"
                ),
            }
        }
    }

    #[test]
    fn agent_run_setup_and_no_cloud_init() {
        let mut c = cfg();
        c.cloud_init_dir = None;
        let unwatched = CloudInit {
            done: true,
            watched: false,
            errors: vec![],
            warnings: vec![],
            stages: BTreeMap::new(),
        };
        let obs = |setup| Observation {
            cloud_init: unwatched.clone(),
            setup,
            log_tail: None,
            root: None,
            boot_epoch_ms: 0,
        };
        let r = decide(&c, obs(SetupSeen::Absent));
        assert_eq!(r.state, ReadyState::Failed);
        assert!(r.reason.unwrap().contains("--run-setup"));
        c.agent_runs_setup = true;
        assert_eq!(
            decide(&c, obs(SetupSeen::Absent)).state,
            ReadyState::Booting
        );
        let mut ok = rec(SetupState::Succeeded);
        ok.exit_code = Some(0);
        assert_eq!(decide(&c, obs(seen(ok))).state, ReadyState::Ready);
    }

    #[test]
    fn setup_fields_are_carried_over() {
        let mut failed = rec(SetupState::Failed);
        failed.exit_code = Some(7);
        failed.duration_ms = Some(1234);
        let r = decide(
            &cfg(),
            Observation {
                cloud_init: ci(true),
                setup: seen(failed),
                log_tail: Some("boom\n".into()),
                root: None,
                boot_epoch_ms: 0,
            },
        );
        assert_eq!(r.setup.state, SetupState::Failed);
        assert_eq!(r.setup.exit_code, Some(7));
        assert_eq!(r.setup.duration_ms, Some(1234));
        assert_eq!(r.setup.log_tail.as_deref(), Some("boom\n"));
    }

    /// The timeline: the setup's span only when it ran in this boot; ready
    /// at the later of its end and cloud-init's final stage's end.
    #[test]
    fn the_timeline_of_this_boot() {
        let mut ok = rec(SetupState::Succeeded);
        ok.exit_code = Some(0);
        ok.started_boot_ms = Some(9_800);
        ok.finished_boot_ms = Some(70_900);
        let mut done = ci(true);
        for (name, start, end) in [("init-local", 1.9, 2.4), ("modules-final", 9.0, 71.5)] {
            done.stages.insert(
                name.into(),
                Span {
                    start_secs: Some(start),
                    finished_secs: Some(end),
                },
            );
        }
        let disk = RootDisk {
            size_bytes: 10,
            free_bytes: 5,
            written_bytes: Some(1),
        };
        let obs = |setup, cloud_init| Observation {
            cloud_init,
            setup,
            log_tail: None,
            root: Some(disk),
            boot_epoch_ms: 1_764_756_000_000,
        };
        let r = decide(&cfg(), obs(seen(ok.clone()), done.clone()));
        let t = r.timeline.unwrap();
        assert_eq!(t.boot_at.as_deref(), Some("2025-12-03T10:00:00Z"));
        assert_eq!(t.agent_started_secs, Some(3.1));
        assert_eq!(t.setup.unwrap().start_secs, Some(9.8));
        assert_eq!(t.ready_secs, Some(71.5));
        assert_eq!(t.stages().count(), 2);
        assert_eq!(r.root, Some(disk));

        // Setup ending last: ready then.
        let mut late = ok.clone();
        late.finished_boot_ms = Some(80_000);
        let t = decide(&cfg(), obs(seen(late), done.clone()))
            .timeline
            .unwrap();
        assert_eq!(t.ready_secs, Some(80.0));

        // After a reboot the setup ran in an earlier boot: not this timeline.
        let mut earlier = ok.clone();
        earlier.boot_id = Some("an-earlier-boot".into());
        let t = decide(&cfg(), obs(seen(earlier), done.clone()))
            .timeline
            .unwrap();
        assert_eq!((t.setup, t.ready_secs), (None, Some(71.5)));

        // Not ready: no ready time.
        let t = decide(&cfg(), obs(seen(ok), ci(false))).timeline.unwrap();
        assert_eq!(t.ready_secs, None);
    }

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
