//! labctl's own printing, tested through its library (`labctl::report`,
//! `life`, `exit`, `common`, `progress`, `color`): texts that need exact inputs (a check's
//! duration, a guest's `NaN`, a cause chain) an agent run on loopback
//! cannot pin down. The end-to-end runs of the same texts are in the
//! verbs' modules.

mod report {
    use lab_agent_client::{CheckResult, CheckStatus, GradeReport};
    use labctl::report::*;

    fn result(name: &str, status: CheckStatus) -> CheckResult {
        let passed = status == CheckStatus::Passed;
        CheckResult {
            status,
            passed,
            exit_code: Some(if passed { 0 } else { 1 }),
            duration_ms: 4,
            error: None,
            ..CheckResult::error(name, 1, "")
        }
    }

    fn report(checks: Vec<CheckResult>) -> GradeReport {
        let count = |s| checks.iter().filter(|c| c.status == s).count();
        GradeReport {
            lab: "hello-lab".into(),
            passed: count(CheckStatus::Passed),
            failed: count(CheckStatus::Failed),
            errors: count(CheckStatus::Error),
            total: checks.len(),
            score: count(CheckStatus::Passed) as u64,
            max_score: checks.len() as u64,
            instance: None,
            instances: Default::default(),
            checks,
        }
    }

    #[test]
    fn renders_passes_and_failures() {
        let mut bad = result("hello runs", CheckStatus::Failed);
        bad.exit_code = Some(126);
        bad.fail_message = Some("Make it executable.".into());
        bad.stderr = (1..=12).map(|i| format!("line {i}\n")).collect();
        let text = render(
            &report(vec![result("user exists", CheckStatus::Passed), bad]),
            Style { color: false },
        );
        let want = "  ✓ user exists (4 ms, 1/1 pt)
  ✗ hello runs (4 ms, 0/1 pt)
      Make it executable.
      exit code 126
      stderr (last 10 lines):
        │ line 3
        │ line 4
        │ line 5
        │ line 6
        │ line 7
        │ line 8
        │ line 9
        │ line 10
        │ line 11
        │ line 12

hello-lab: 1 of 2 checks passed, score 1/2
";
        assert_eq!(text, want);
    }

    #[test]
    fn cut_output_says_so() {
        let mut c = result("floods", CheckStatus::Failed);
        c.stdout = "y\n".repeat(20);
        c.stdout_truncated = true;
        let text = check(&c, Style { color: false });
        assert!(
            text.contains("stdout (cut at the check's `max_output_bytes`; the last 10 lines kept, not the end):"),
            "{text}"
        );
        c.stdout = "y\n".into();
        let text = check(&c, Style { color: false });
        assert!(text.contains("the rest was dropped"), "{text}");
    }

    #[test]
    fn an_error_is_not_the_students_failure() {
        let mut c = result("x", CheckStatus::Error);
        c.exit_code = None;
        c.fail_message = Some("Create the file first.".into());
        c.error =
            Some("the agent refused the check (400 Bad Request): unknown user `nobody2`".into());
        let text = check(&c, Style { color: false });
        assert!(text.starts_with("  ! x ("), "{text}");
        assert!(text.contains("could not run"), "{text}");
        assert!(text.contains("unknown user `nobody2`"), "{text}");
        assert!(!text.contains("Create the file first."), "{text}");
        let mut t = result("t", CheckStatus::Failed);
        t.timed_out = true;
        assert!(check(&t, Style { color: false }).contains("timed out"));
    }

    #[test]
    fn a_limit_hit_is_named_with_its_value() {
        let mut c = result("bomb", CheckStatus::Failed);
        c.exit_code = Some(254);
        c.limits_hit = vec!["pids".into(), "memory".into()];
        c.max_pids = Some(4096);
        c.max_memory_bytes = Some(512 << 20);
        let text = check(&c, Style { color: false });
        assert!(text.contains("exit code 254"), "{text}");
        assert!(
            text.contains("the check hit its process limit (pids.max 4096) and its memory limit (memory.max 512 MiB)"),
            "{text}"
        );
        assert!(
            !check(&result("ok", CheckStatus::Failed), Style { color: false }).contains("limit")
        );
    }

    #[test]
    fn summaries() {
        let one = report(vec![result("a", CheckStatus::Passed)]);
        assert_eq!(
            summary(&one, Style { color: false }),
            "hello-lab: the check passed, score 1/1\n"
        );
        let two = report(vec![
            result("a", CheckStatus::Passed),
            result("b", CheckStatus::Passed),
        ]);
        assert_eq!(
            summary(&two, Style { color: false }),
            "hello-lab: all 2 checks passed, score 2/2\n"
        );
        let err = report(vec![result("a", CheckStatus::Error)]);
        assert_eq!(
            summary(&err, Style { color: false }),
            "hello-lab: 0 of 1 check passed, score 0/1\n\
             1 of them could not run: fix the lab (or the VM), then grade again\n"
        );
    }
}

mod exit {
    use labctl::exit::*;

    #[test]
    fn codes() {
        let all = [
            (Exit::Success, 0),
            (Exit::CheckFailed, 1),
            (Exit::Usage, 2),
            (Exit::Unreachable, 3),
            (Exit::SetupFailed, 4),
            (Exit::CheckError, 5),
            (Exit::InstanceChanged, 6),
            (Exit::Command(137), 137),
            (Exit::Interrupted(130), 130),
        ];
        for (e, c) in all {
            assert_eq!(e.code(), c);
        }
    }

    #[test]
    fn renders_message_causes_and_hints() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let f = Failure::usage("failed to read token file `/x`")
            .with_source(io)
            .hint("write the token with `labctl secret --token-out`");
        assert_eq!(
            f.render(false),
            "error: failed to read token file `/x`\n  caused by: no such file\n\
             hint: write the token with `labctl secret --token-out`\n"
        );
    }

    #[test]
    fn lab_errors_keep_their_hint_as_a_hint() {
        let e = lab_agent_proto::lab::Lab::load("/nonexistent-lab-dir").unwrap_err();
        let f = Failure::lab(e);
        assert_eq!(f.exit, Exit::Usage);
        assert!(
            f.message
                .starts_with("failed to read `/nonexistent-lab-dir/lab.toml`")
        );
        assert!(!f.message.contains("hint"));
        assert_eq!(f.hints.len(), 1);
    }
}

mod common {
    use labctl::common::*;
    use labctl::exit::Exit;

    /// The one rule (`lab_agent_proto::token_file`, tested there), as a
    /// `labctl` usage error with a hint where one helps.
    #[test]
    fn tokens_follow_the_one_rule() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("labctl-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        let good = "a".repeat(43);
        std::fs::write(&f, format!("{good}\n")).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token(&f).unwrap(), good);
        std::fs::write(&f, "abc\n").unwrap();
        let err = read_token(&f).unwrap_err();
        assert!(err.message.contains("3 characters long"), "{}", err.message);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_token(&f).unwrap_err().message.contains("chmod 600"));
        let err = read_token(&dir.join("missing")).unwrap_err();
        assert_eq!(err.exit, Exit::Usage);
        assert!(err.render(false).contains("hint:"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(human_duration(Duration::from_millis(3400)), "3.4s");
        assert_eq!(human_duration(Duration::from_secs(125)), "2m05s");
    }
}

mod life {
    use lab_agent_proto::ReadyResponse;
    use labctl::life::*;

    #[test]
    fn units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(10_737_418_240), "10.0 GiB");
        assert_eq!(bytes(412_345_678), "393.2 MiB");
        assert_eq!(secs(Some(61.1)), "61.1");
        assert_eq!(secs(None), "-");
        assert_eq!(secs(Some(f64::NAN)), "-");
    }

    /// The contract's example, a stage not finished, and the guest's strings
    /// escaped.
    #[test]
    fn the_spec_example() {
        let r: ReadyResponse = serde_json::from_str(
            r#"{"state":"ready","cloud_init":{"done":true},"setup":{"state":"succeeded"},
             "instance":{"id":"0123456789abcdef0123456789abcdef","boots":2,
                         "boot_id":"b\u001b[2J","first_boot_at":"2026-12-01T09:00:00Z"},
             "timeline":{"boot_at":"2026-12-03T10:00:00Z","agent_started_secs":3.1,
               "cloud_init":{"init-local":{"start_secs":1.9,"finished_secs":2.4},
                             "init":{"start_secs":2.5},
                             "modules-final":{"start_secs":9.0,"finished_secs":71.5}},
               "setup":{"start_secs":9.8,"finished_secs":70.9},"ready_secs":71.6},
             "root":{"size_bytes":10737418240,"free_bytes":8123456789,"written_bytes":412345678}}"#,
        )
        .unwrap();
        let text = describe(&r);
        let want = "\
instance 0123456789abcdef0123456789abcdef, boot 2 (first boot 2026-12-01T09:00:00Z; boot id b\\x1b[2J)
booted at 2026-12-03T10:00:00Z; seconds since boot:
  phase                          start       end  duration
  kernel → agent start             0.0       3.1       3.1
  cloud-init init-local            1.9       2.4       0.5
  cloud-init init                  2.5         -         -
  cloud-init modules-final         9.0      71.5      62.5
  setup                            9.8      70.9      61.1
  kernel → ready                   0.0      71.6      71.6
root: 10.0 GiB, 7.6 GiB free, 393.2 MiB written since boot
";
        assert_eq!(text, want, "\n{text}");
        // A booted golden's VM on a small root: the writes over its life,
        // the lab's need, and each finding, escaped.
        let golden: ReadyResponse = serde_json::from_str(
            r#"{"state":"ready","cloud_init":{"done":true},"setup":{"state":"succeeded"},
             "disk":{"booted_before":true,"evidence":["cloud-init ran on this disk before as `a\u001b[2J`"]},
             "root":{"size_bytes":3221225472,"free_bytes":1073741824,"written_bytes":412345678,
                     "written_bytes_total":912345678,"min_bytes":10737418240,"below_min":true}}"#,
        )
        .unwrap();
        assert_eq!(
            describe(&golden),
            "booted before this VM: cloud-init ran on this disk before as `a\\x1b[2J`\n\
             root: 3.0 GiB, 1.0 GiB free, 393.2 MiB written since boot (870.1 MiB in its life), \
             under the lab's 10.0 GiB\n"
        );
        let old: ReadyResponse = serde_json::from_str(
            r#"{"state":"ready","cloud_init":{"done":true},"setup":{"state":"succeeded"}}"#,
        )
        .unwrap();
        assert_eq!(describe(&old), "");
    }
}

mod progress {
    use lab_agent_client::Progress;
    use lab_agent_proto::ReadyState;
    use labctl::progress::WaitDisplay;
    use std::time::Duration;

    fn progress(secs: u64, state: Option<ReadyState>, reason: &str) -> Progress {
        Progress {
            elapsed: Duration::from_secs(secs),
            state,
            reason: reason.into(),
            attempts: 1,
            answer: None,
        }
    }

    #[test]
    fn plain_lines_name_state_and_reason() {
        let mut d = WaitDisplay::with_mode(vec!["http://a".into(), "http://b".into()], false);
        d.update(
            1,
            &progress(3, Some(ReadyState::SettingUp), "setup is\nrunning"),
        );
        assert_eq!(
            d.plain_line(1, Duration::from_millis(3200)),
            "[  3.2s] http://b: setting_up: setup is running"
        );
        assert_eq!(
            d.plain_line(0, Duration::from_secs(61)),
            "[ 1m01s] http://a: unreachable: connecting"
        );
        let single = WaitDisplay::with_mode(vec!["http://a".into()], false);
        assert_eq!(
            single.plain_line(0, Duration::ZERO),
            "[  0.0s] unreachable: connecting"
        );
    }

    #[test]
    fn a_caller_may_say_what_silence_means() {
        let mut d = WaitDisplay::with_mode(vec!["http://a".into()], false);
        let silent = progress(40, None, "connection closed");
        d.update_with(0, &silent, Some("booting: cloud-init: init stage".into()));
        assert_eq!(
            d.plain_line(0, Duration::from_secs(40)),
            "[ 40.0s] booting: cloud-init: init stage"
        );
        // Once the agent answers, its own state and reason show.
        let answered = progress(41, Some(ReadyState::SettingUp), "setup is running");
        d.update_with(0, &answered, Some("ignored".into()));
        assert_eq!(
            d.plain_line(0, Duration::from_secs(41)),
            "[ 41.0s] setting_up: setup is running"
        );
    }

    /// The live line shows what the VM does now (setup's last log line;
    /// which changes are new phases is the client's `Activity`, tested
    /// there), the time against the deadline, and is cut to the width.
    #[test]
    fn the_live_line() {
        let mut d = WaitDisplay::with_mode(vec!["http://a".into()], false)
            .with_limit(Duration::from_secs(150));
        let json = r#"{"state":"setting_up","reason":"the setup script is running",
            "cloud_init":{"done":false},"setup":{"state":"running","log_tail":"Get:1 http://deb"},
            "timeline":{"cloud_init":{"init":{"start_secs":9.0}}}}"#;
        let p = Progress {
            answer: Some(std::sync::Arc::new(serde_json::from_str(json).unwrap())),
            ..progress(
                3,
                Some(ReadyState::SettingUp),
                "the setup script is running",
            )
        };
        d.update(0, &p);
        let line = d.live_line(0, 200);
        assert!(
            line.ends_with("/ 2m30s  setting_up · setup: Get:1 http://deb"),
            "{line}"
        );
        let cut = d.live_line(0, 30);
        assert!(cut.ends_with('…') && cut.chars().count() == 30, "{cut}");
        assert!(cut.contains("/ 2m30s"), "{cut}");
    }
}

mod color {
    use labctl::color::enabled;
    use std::ffi::OsString;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn colour_only_on_a_terminal_that_shows_it_unless_told_no() {
        assert!(enabled(true, env(&[("TERM", "xterm")])));
        assert!(enabled(true, env(&[])));
        assert!(!enabled(false, env(&[("TERM", "xterm")])), "not a terminal");
        assert!(!enabled(true, env(&[("NO_COLOR", "1")])));
        assert!(
            enabled(true, env(&[("NO_COLOR", "")])),
            "an empty NO_COLOR does not count"
        );
        assert!(!enabled(true, env(&[("TERM", "dumb")])));
    }
}
