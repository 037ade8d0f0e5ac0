//! Streamed exec: events as the command writes, the result last, bounded
//! like every call; the setup log followed from an offset.

use super::*;
use lab_agent_proto::{Profile, SetupState, StreamEvent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn events_come_while_the_command_runs_and_the_result_last() {
    let agent = Agent::start(AgentOptions::default());
    let c = client(&agent);
    c.wait_ready(in_secs(60)).await.unwrap();
    // The command waits, after its first line, for a file the test makes
    // only once it has that line: the event came while the command ran,
    // whatever the machine's speed. No profile: a login shell's own
    // noise (this machine's ~/.bashrc can print pyenv's rehash races to
    // stderr) is not what this test is about.
    let gate = std::env::temp_dir().join(format!("lab-agent-stream-gate-{}", std::process::id()));
    let _ = std::fs::remove_file(&gate);
    let mut s = c
        .exec_stream(
            &ExecRequest::new(format!(
                "echo 1; while [ ! -e '{}' ]; do sleep 0.02; done; echo 2; echo 3; echo e >&2; exit 4",
                gate.display()
            ))
            .timeout_secs(60)
            .profile(Profile::None),
        )
        .await
        .unwrap();
    let first = s.next_event().await.unwrap().unwrap();
    assert_eq!(first, StreamEvent::Stdout("1\n".into()));
    std::fs::write(&gate, "").unwrap();
    let r = s.collect().await.unwrap();
    let _ = std::fs::remove_file(&gate);
    assert!(!r.timed_out, "{r:?}");
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("2\n3\n", "e\n"));
    assert_eq!(r.exit_code, Some(4));

    // Timed out: what it printed, then the result.
    let r = c
        .exec_stream(&ExecRequest::new("echo a; sleep 30").timeout_secs(1))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert!(r.timed_out && r.stdout == "a\n", "{r:?}");

    // Capped: the bytes and the flag.
    let r = c
        .exec_stream(&ExecRequest::new("seq 100000").max_output_bytes(1000))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(r.stdout.len(), 1000);
    assert!(r.stdout_truncated && !r.stderr_truncated);

    // Refused before it starts: the call's error, as for exec.
    let err = c
        .exec_stream(&ExecRequest::new("true").user("no-such-user-here"))
        .await
        .unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(400), "{err:?}");
}

/// A stand-in agent that answers 200 with one line and then ends the
/// stream (or closes it mid-line): never a success.
async fn cut_short(body: &'static str) -> Error {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        let _ = s.read(&mut buf).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";
        let chunk = format!("{:x}\r\n{body}\r\n", body.len());
        let _ = s.write_all(head.as_bytes()).await;
        let _ = s.write_all(chunk.as_bytes()).await;
        let _ = s.write_all(b"0\r\n\r\n").await;
    });
    let c = Client::new(&url, &new_token()).unwrap();
    let mut s = c.exec_stream(&ExecRequest::new("x")).await.unwrap();
    loop {
        match s.next_event().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a stream without a result ended as a success"),
            Err(e) => return e,
        }
    }
}

#[tokio::test]
async fn a_stream_without_its_result_is_a_transport_error() {
    let err = cut_short("{\"stdout\":\"partial\\n\"}\n").await;
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    assert!(format!("{err:#}").contains("connection lost"), "{err}");
    let err = cut_short("{\"stdout\":\"no newline\"}").await;
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    let err = cut_short("{\"exit_code\":0}\n").await;
    assert!(matches!(err, Error::Decode { .. }), "{err:?}");
}

#[tokio::test]
async fn the_setup_log_is_followed_from_an_offset() {
    let agent = Agent::start(
        AgentOptions::default().setup("echo first; sleep 2; echo second; sleep 1; echo third"),
    );
    let c = client(&agent);
    let mut offset = 0;
    let mut text = String::new();
    let mut states = Vec::new();
    let deadline = in_secs(60);
    loop {
        assert!(Instant::now() < deadline, "still following: {text:?}");
        let log = c.setup_log(offset, 10).await.unwrap();
        assert!(!log.restarted);
        assert_eq!(log.next_offset, offset + log.bytes.len() as u64);
        offset = log.next_offset;
        text.push_str(&String::from_utf8_lossy(&log.bytes));
        states.push(log.state);
        if matches!(log.state, SetupState::Succeeded | SetupState::Failed) && log.bytes.is_empty() {
            break;
        }
    }
    assert!(
        text.contains("first\n") && text.ends_with("second\nthird\n"),
        "{text:?}"
    );
    assert!(states.contains(&SetupState::Running), "{states:?}");
    assert_eq!(states.last(), Some(&SetupState::Succeeded));
    // From the middle.
    let log = c.setup_log(offset - 6, 0).await.unwrap();
    assert_eq!(&log.bytes[..], b"third\n");
    // Past the end: from 0 again, said so.
    let log = c.setup_log(offset + 100, 0).await.unwrap();
    assert!(log.restarted && log.next_offset == offset, "{log:?}");
    assert!(c.setup_log(0, 61).await.is_err());
}
