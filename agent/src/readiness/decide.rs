//! The readiness rule: a pure function of what `observe` saw, so every
//! state and reason is unit-tested without files.

use super::*;
use crate::setup::record::SetupRecord;
use lab_agent_proto::{
    CloudInitStatus, ReadyResponse, ReadyState, SetupState, SetupStatus, Span, Timeline,
};
use std::time::Duration;

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

    // The lab's least root size travels in the setup's record.
    let mut root = obs.root;
    if let (Some(root), SetupSeen::Record { record, .. }) = (&mut root, &obs.setup) {
        if let Some(min) = record.min_root_bytes {
            root.min_bytes = Some(min);
            root.below_min = root.size_bytes < min;
        }
    }

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
    let (state, mut reason): (ReadyState, Option<String>) = match obs.setup {
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
    // Ready on a root under the lab's need (`on_small_root = "warn"`, or it
    // shrank): ready, and said so.
    if let Some(root) = root.filter(|r| r.below_min && state == ReadyState::Ready) {
        reason = Some(small_root_warning(
            root.size_bytes,
            root.min_bytes.unwrap_or(0),
        ));
    }
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
        // To the millisecond: a backend holds its own stamps (VM created,
        // VMI running) against it for request → ready.
        boot_at: Some(crate::timefmt::rfc3339_millis(
            std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(obs.boot_epoch_ms),
        )),
        agent_started_secs: cfg.agent_started_ms.map(timeline::secs),
        cloud_init: obs.cloud_init.stages,
        setup: setup_span,
        ready_secs,
    };
    let (instance, disk) = match obs.life {
        Some(life) => (Some(life.instance), Some(life.disk)),
        None => (None, None),
    };
    ReadyResponse {
        state,
        reason,
        cloud_init,
        setup,
        instance,
        disk,
        timeline: Some(timeline),
        root,
    }
}

/// The sentence of a VM that is ready on a root filesystem under the lab's
/// `min_root_bytes`.
fn small_root_warning(size: u64, min: u64) -> String {
    let mut s = String::from("ready, but the root filesystem is ");
    root_disk::push_size(&mut s, size);
    s.push_str(", under the ");
    root_disk::push_size(&mut s, min);
    s.push_str(" this lab asks for (on_small_root = \"warn\"): the student's shells show a banner");
    s
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::readiness::observe::CloudInit;
    use lab_agent_proto::RootDisk;
    use std::collections::BTreeMap;

    pub(crate) fn cfg() -> ReadinessConfig {
        ReadinessConfig {
            state_dir: "/var/lib/lab-agent".into(),
            cloud_init_dir: Some("/run/cloud-init".into()),
            agent_runs_setup: false,
            boot_id: Some("b".into()),
            agent_started_ms: Some(3_100),
            root: "/".into(),
        }
    }

    pub(crate) fn ci(done: bool) -> CloudInit {
        CloudInit {
            done,
            watched: true,
            errors: Vec::new(),
            warnings: Vec::new(),
            stages: BTreeMap::new(),
        }
    }

    pub(crate) fn rec(state: SetupState) -> SetupRecord {
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
            min_root_bytes: None,
        }
    }

    pub(crate) fn seen(record: SetupRecord) -> SetupSeen {
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
                    life: None,
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
            life: None,
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
                life: None,
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
            written_bytes_total: Some(3),
            min_bytes: None,
            below_min: false,
        };
        let obs = |setup, cloud_init| Observation {
            cloud_init,
            setup,
            log_tail: None,
            root: Some(disk),
            boot_epoch_ms: 1_764_756_000_000,
            life: None,
        };
        let r = decide(&cfg(), obs(seen(ok.clone()), done.clone()));
        let t = r.timeline.unwrap();
        assert_eq!(t.boot_at.as_deref(), Some("2025-12-03T10:00:00.000Z"));
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
}
