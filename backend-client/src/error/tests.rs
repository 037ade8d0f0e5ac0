//! Each error's message: what happened and what to do, the guest's text
//! escaped.

use super::*;
use lab_agent_proto::{CloudInitStatus, SetupState, SetupStatus};

fn req(method: hyper::Method) -> Request {
    Request {
        method,
        url: "http://10.0.0.5:8899/v1/ready".into(),
    }
}

fn failed() -> ReadyResponse {
    ReadyResponse {
        state: ReadyState::Failed,
        reason: Some("setup script exited with status 7".into()),
        cloud_init: CloudInitStatus {
            warnings: vec![],
            done: true,
            errors: vec![],
        },
        setup: SetupStatus {
            state: SetupState::Failed,
            exit_code: Some(7),
            duration_ms: Some(12),
            log_tail: Some("boom\n".into()),
        },
        instance: None,
        disk: None,
        timeline: None,
        root: None,
    }
}

#[test]
fn messages_name_the_request_and_url() {
    let e = Error::Status {
        request: req(hyper::Method::GET),
        status: StatusCode::SERVICE_UNAVAILABLE,
        code: None,
        message: "not ready".into(),
        retry_after: None,
    };
    assert_eq!(
        e.to_string(),
        "status 503 when getting http://10.0.0.5:8899/v1/ready: not ready"
    );
    let e = Error::Timeout {
        request: req(hyper::Method::POST),
        after: Duration::from_secs(65),
    };
    assert_eq!(
        e.to_string(),
        "no response within 65s when posting to http://10.0.0.5:8899/v1/ready"
    );
    assert!(e.is_timeout() && e.is_unreachable() && !e.is_unauthorized());
}

#[test]
fn predicates() {
    let unauthorized = Error::Status {
        request: req(hyper::Method::GET),
        status: StatusCode::UNAUTHORIZED,
        code: Some(ErrorCode::Unauthorized),
        message: "unauthorized".into(),
        retry_after: None,
    };
    assert!(unauthorized.is_unauthorized());
    assert!(!unauthorized.is_unreachable() && !unauthorized.is_timeout());
    assert!(unauthorized.hint().unwrap().contains("token"));

    let refused = Error::Connect {
        request: req(hyper::Method::GET),
        source: std::io::ErrorKind::ConnectionRefused.into(),
    };
    assert!(refused.is_unreachable() && !refused.is_timeout());
    assert_eq!(refused.brief(), "connection refused");

    let setup_failed = Error::SetupFailed {
        url: "http://vm:8899".into(),
        ready: Box::new(failed()),
    };
    assert!(setup_failed.is_setup_failed() && !setup_failed.is_unreachable());
    assert_eq!(
        setup_failed.ready_response().unwrap().setup.exit_code,
        Some(7)
    );
    assert_eq!(
        setup_failed.to_string(),
        "the lab is not ready at http://vm:8899: setup script exited with status 7"
    );

    let never = Error::WaitTimeout {
        url: "http://vm:8899".into(),
        waited: Duration::from_secs(30),
        last: LastSeen::Unreachable("connection refused".into()),
        in_state: None,
    };
    assert!(never.is_timeout() && never.is_unreachable());
    assert_eq!(
        never.to_string(),
        "http://vm:8899 was not ready after 30s: the agent never answered (connection refused)"
    );
    let mut slow = failed();
    slow.state = ReadyState::SettingUp;
    slow.reason = Some("setup is running.".into());
    let slow = Error::WaitTimeout {
        url: "http://vm:8899".into(),
        waited: Duration::from_millis(2500),
        last: LastSeen::State(Box::new(slow)),
        in_state: Some(Duration::from_millis(1500)),
    };
    assert!(slow.is_timeout() && !slow.is_unreachable());
    assert_eq!(
        slow.to_string(),
        "http://vm:8899 was not ready after 2.5s: stuck in state `setting_up` for the last 1.5s (setup is running)"
    );
    assert!(slow.hint().unwrap().contains("setup is still running"));

    let mut booting = failed();
    booting.state = ReadyState::Booting;
    booting.reason = None;
    booting.timeline = Some(
        serde_json::from_str(r#"{"cloud_init":{"init-local":{"start_secs":1.0,"finished_secs":2.0},"init":{"start_secs":2.1}}}"#)
            .unwrap(),
    );
    let stuck = Error::WaitTimeout {
        url: "http://vm:8899".into(),
        waited: Duration::from_secs(150),
        last: LastSeen::State(Box::new(booting)),
        in_state: Some(Duration::from_secs(148)),
    };
    assert_eq!(
        stuck.to_string(),
        "http://vm:8899 was not ready after 150s: stuck in state `booting` (cloud-init stage `init`) for the last 148s"
    );
}

#[test]
fn instance_and_readiness_errors_say_what_happened() {
    let changed = Error::InstanceChanged {
        url: "http://vm:8899".into(),
        expected: "0123456789abcdef0123456789abcdef".into(),
        found: "ffffffffffffffffffffffffffffffff\x1b".into(),
        first_boot_at: Some("2026-12-03T10:00:00Z".into()),
        pinned_by: PinnedBy::Caller,
    };
    assert!(changed.is_instance_changed() && !changed.is_unreachable());
    assert_eq!(
        changed.to_string(),
        "the VM at http://vm:8899 was reset (instance ffffffffffffffffffffffffffffffff\\x1b, \
         first booted at 2026-12-03T10:00:00Z, is not the instance \
         0123456789abcdef0123456789abcdef the client is pinned to): the student's work inside it is gone"
    );
    let mid_grade = Error::InstanceChanged {
        url: "http://vm:8899".into(),
        expected: "0123456789abcdef0123456789abcdef".into(),
        found: "ffffffffffffffffffffffffffffffff".into(),
        first_boot_at: None,
        pinned_by: PinnedBy::Grade,
    };
    assert!(
        mid_grade.to_string().contains(
            "(instance ffffffffffffffffffffffffffffffff, is not the instance \
             0123456789abcdef0123456789abcdef this grade began on)"
        ),
        "{mid_grade}"
    );
    let unknown = Error::InstanceUnknown {
        url: "http://vm:8899".into(),
        expected: "0123456789abcdef0123456789abcdef".into(),
    };
    assert!(unknown.is_instance_unknown() && !unknown.is_instance_changed());
    let mut r = failed();
    r.state = ReadyState::SettingUp;
    r.reason = Some("setup is running".into());
    let not_ready = Error::NotReady {
        url: "http://vm:8899".into(),
        ready: Box::new(r),
    };
    assert!(not_ready.is_not_ready() && !not_ready.is_setup_failed());
    assert_eq!(
        not_ready.to_string(),
        "the VM at http://vm:8899 is not ready, so it was not graded: its state is \
         `setting_up`: setup is running"
    );
    assert_eq!(
        not_ready.ready_response().unwrap().state,
        ReadyState::SettingUp
    );
    let failed = Error::NotReady {
        url: "http://vm:8899".into(),
        ready: Box::new(failed()),
    };
    assert!(failed.is_not_ready() && failed.is_setup_failed());
}

#[test]
fn setup_failed_adds_the_exit_code_when_the_reason_lacks_it() {
    let mut r = failed();
    r.reason = Some("setup failed".into());
    let e = Error::SetupFailed {
        url: "http://vm".into(),
        ready: Box::new(r),
    };
    assert_eq!(
        e.to_string(),
        "the lab is not ready at http://vm: setup failed (setup exit code 7)"
    );
}
