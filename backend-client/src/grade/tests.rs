//! The grading rule and the report, without an agent where none is needed.

use super::*;

#[test]
fn check_requests_carry_user_timeout_and_lab_dir() {
    let lab = Lab::parse(
        r#"
name = "l"
[[checks]]
name = "a"
run = "test -f $LAB_DIR/x"
[[checks]]
name = "b"
run = "id"
user = "student"
timeout_secs = 5
env = { GREETING = "hi" }
cwd = "/srv"
stdin = "yes\n"
max_output_bytes = 100
"#,
        "/labs/l",
    )
    .unwrap();
    let a = check_request(&lab.checks[0], "/opt/lab");
    assert_eq!(a.command, "test -f $LAB_DIR/x");
    assert_eq!(a.options.user, "root");
    assert_eq!(a.options.timeout_secs, 60);
    assert_eq!(
        a.options.env.get("LAB_DIR").map(String::as_str),
        Some("/opt/lab")
    );
    assert_eq!(
        a.options.max_output_bytes,
        lab_agent_proto::lab::DEFAULT_MAX_OUTPUT_BYTES
    );
    assert_eq!(
        (a.options.cwd.as_deref(), a.options.stdin.as_deref()),
        (None, None)
    );
    let b = check_request(&lab.checks[1], "/tmp/staged");
    assert_eq!(
        (b.options.user.as_str(), b.options.timeout_secs),
        ("student", 5)
    );
    assert_eq!(
        b.options.env.get("LAB_DIR").map(String::as_str),
        Some("/tmp/staged")
    );
    assert_eq!(
        b.options.env.get("GREETING").map(String::as_str),
        Some("hi")
    );
    assert_eq!(
        (
            b.options.cwd.as_deref(),
            b.options.stdin.as_deref(),
            b.options.max_output_bytes
        ),
        (Some("/srv"), Some("yes\n"), 100)
    );
    assert!(b.options.profile.is_login());
    let lab = Lab::parse(
        "name = \"l\"\nprofile = \"system\"\n[[checks]]\nname = \"a\"\nrun = \"id\"\n",
        "/labs/l",
    )
    .unwrap();
    let a = check_request(&lab.checks[0], "/opt/lab");
    assert_eq!(a.options.profile, lab_agent_proto::Profile::System);
    assert!(
        !a.options.leave_running
            && a.options.max_pids.is_none()
            && a.options.max_memory_bytes.is_none()
    );
    let lab = Lab::parse(
        "name = \"l\"\n[[checks]]\nname = \"a\"\nrun = \"id\"\nleave_running = true\nmax_pids = 50\nmax_memory_bytes = 33554432\n",
        "/labs/l",
    )
    .unwrap();
    let a = check_request(&lab.checks[0], "/opt/lab");
    assert!(a.options.leave_running);
    assert_eq!(
        (a.options.max_pids, a.options.max_memory_bytes),
        (Some(50), Some(32 << 20))
    );
}

/// A stand-in agent whose instance is `a` until it has answered
/// `execs_as_a` execs, then `b` (the VM reset between two checks).
/// One request per connection. Counts the execs it answered.
async fn resetting_agent(execs_as_a: u64) -> (String, std::sync::Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let execs = std::sync::Arc::new(AtomicU64::new(0));
    let counted = execs.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let execs = counted.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let Some(head_end) = crate::client::tests::read_head(&mut s, &mut buf).await else {
                    return;
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                while buf.len() < head_end + len {
                    let mut chunk = [0u8; 4096];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = if head.starts_with("post") {
                    let n = execs.fetch_add(1, Ordering::SeqCst);
                    let id = if n < execs_as_a { A } else { B };
                    format!(
                        r#"{{"exit_code":0,"signal":null,"timed_out":false,"duration_ms":1,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false,"instance_id":"{id}","boot_id":"x"}}"#
                    )
                } else {
                    format!(
                        r#"{{"state":"ready","cloud_init":{{"done":true,"errors":[]}},"setup":{{"state":"succeeded","exit_code":0}},"instance":{{"id":"{A}","boots":1,"boot_id":"x","first_boot_at":"2026-12-03T10:00:00Z"}}}}"#
                    )
                };
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\
                     content-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (url, execs)
}

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
use std::sync::atomic::{AtomicU64, Ordering};

fn three_checks() -> Lab {
    Lab::parse(
        "name = \"l\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n\
         [[checks]]\nname = \"b\"\nrun = \"true\"\n\
         [[checks]]\nname = \"c\"\nrun = \"true\"\n",
        "/labs/l",
    )
    .unwrap()
}

/// The instance that answered ready is the one graded: a check
/// answered by another (a reset between two checks) ends the grade
/// with `InstanceChanged`, and no later check is sent.
#[tokio::test]
async fn a_reset_mid_grade_is_instance_changed() {
    let (url, execs) = resetting_agent(1).await;
    let c = Client::new(&url, "token").unwrap();
    let e = c.grade(&three_checks(), "/opt/lab").await.unwrap_err();
    assert!(e.is_instance_changed(), "{e:?}");
    match &e {
        Error::InstanceChanged {
            expected,
            found,
            pinned_by,
            ..
        } => assert_eq!(
            (expected.as_str(), found.as_str(), *pinned_by),
            (A, B, crate::error::PinnedBy::Grade)
        ),
        _ => unreachable!(),
    }
    assert_eq!(execs.load(Ordering::SeqCst), 2, "no check after the reset");
    // The client itself stays unpinned.
    assert_eq!(c.instance(), None);
    // No reset: graded, and the report names the instance.
    let (url, _) = resetting_agent(u64::MAX).await;
    let report = Client::new(&url, "token")
        .unwrap()
        .grade(&three_checks(), "/opt/lab")
        .await
        .unwrap();
    assert!(report.all_passed());
    assert_eq!(report.instance.unwrap().id, A);
}

#[test]
fn a_limit_hit_is_in_the_json_only_when_there_is_one() {
    let mut b = result("b", CheckStatus::Failed, 1);
    let text = serde_json::to_string(&b).unwrap();
    assert!(!text.contains("limits_hit"), "{text}");
    assert_eq!(b.limits_text(), None);
    b.limits_hit = vec!["pids".into()];
    b.max_pids = Some(4096);
    let text = serde_json::to_string(&b).unwrap();
    assert!(
        text.contains(r#""limits_hit":["pids"],"max_pids":4096"#),
        "{text}"
    );
    assert_eq!(
        b.limits_text().unwrap(),
        "hit its process limit (pids.max 4096)"
    );
    assert_eq!(
        serde_json::from_str::<CheckResult>(&text)
            .unwrap()
            .limits_hit,
        b.limits_hit
    );
}

fn result(name: &str, status: CheckStatus, points: u32) -> CheckResult {
    CheckResult {
        status,
        passed: status == CheckStatus::Passed,
        duration_ms: 1,
        error: None,
        ..CheckResult::error(name, points, "")
    }
}

#[test]
fn report_json_has_exactly_the_spec_shape() {
    let mut a = result("a", CheckStatus::Passed, 2);
    a.exit_code = Some(0);
    a.stdout = "ok\n".into();
    let mut b = result("b", CheckStatus::Failed, 3);
    b.signal = Some(15);
    b.timed_out = true;
    b.stdout_truncated = true;
    b.fail_message = Some("do it".into());
    let mut c = result("c", CheckStatus::Error, 1);
    c.error = Some("the agent refused the check (400 Bad Request): unknown user".into());
    c.hint = Some("not in the JSON".into());
    let report = GradeReport::new("hello-lab".into(), None, vec![a, b, c]);
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "lab": "hello-lab", "passed": 1, "failed": 1, "errors": 1, "total": 3,
            "score": 2, "max_score": 6,
            "checks": [
                {"name": "a", "status": "passed", "passed": true, "points": 2,
                 "exit_code": 0, "signal": null, "timed_out": false,
                 "stdout": "ok\n", "stderr": "",
                 "stdout_truncated": false, "stderr_truncated": false,
                 "duration_ms": 1, "fail_message": null, "error": null},
                {"name": "b", "status": "failed", "passed": false, "points": 3,
                 "exit_code": null, "signal": 15, "timed_out": true,
                 "stdout": "", "stderr": "",
                 "stdout_truncated": true, "stderr_truncated": false,
                 "duration_ms": 1, "fail_message": "do it", "error": null},
                {"name": "c", "status": "error", "passed": false, "points": 1,
                 "exit_code": null, "signal": null, "timed_out": false,
                 "stdout": "", "stderr": "",
                 "stdout_truncated": false, "stderr_truncated": false,
                 "duration_ms": 1, "fail_message": null,
                 "error": "the agent refused the check (400 Bad Request): unknown user"},
            ]
        })
    );
    assert!(!report.all_passed() && report.has_errors());
    let back: GradeReport = serde_json::from_value(v).unwrap();
    assert_eq!(back.checks[2].status, CheckStatus::Error);
}
