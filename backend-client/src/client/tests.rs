//! The client against hostile and broken agents, on loopback.

use super::*;

/// A test server's read of one request head into `buf`: where the head
/// ends (after its blank line), or `None` when the client went away first.
pub(crate) async fn read_head(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(p + 4);
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Something on the agent's port that answers 200 and then sends a body
/// without end (the student is root in the VM and can put it there).
async fn endless_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                while s.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
    });
    url
}

/// Regression: the client buffered a response body without limit, so a
/// hostile guest could fill the backend's memory for the whole timeout.
#[tokio::test]
async fn an_endless_response_is_cut_at_the_limit() {
    let url = endless_server().await;
    let c = Client::new(&url, "t").unwrap();
    let within = Duration::from_secs(20);
    let err = tokio::time::timeout(within, c.exec(&ExecRequest::new("true")))
        .await
        .expect("still reading after 20 s")
        .unwrap_err();
    let limit = exec_response_limit(lab_agent_proto::exec::DEFAULT_MAX_OUTPUT_BYTES);
    assert!(
        matches!(err, Error::TooLarge { limit: l, declared: None, .. } if l == limit),
        "{err:?}"
    );
    assert!(err.to_string().contains("response larger than"), "{err}");
    assert!(
        err.hint()
            .unwrap()
            .contains("something other than lab-agent")
    );
    let err = tokio::time::timeout(within, c.ready())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooLarge {
                limit: READY_RESPONSE_LIMIT,
                ..
            }
        ),
        "{err:?}"
    );
}

/// Answers every request 401 at once, as an agent does a wrong token,
/// and closes the connection.
async fn refusing_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = r#"{"error":"unauthorized","message":"bad token"}"#;
                let resp = format!(
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    url
}

/// What a scripted agent does with the requests on one connection.
#[derive(Clone, Copy)]
enum Then {
    /// Answers this many requests, then reads the next one whole and
    /// closes without a byte of answer (an agent that went away).
    DiesAfter(usize),
    /// Answers this many, then reads only the next request's head and
    /// closes with its body unread (the kernel resets the connection).
    CutsAfter(usize),
}

/// A stand-in for an agent at the URL returned: connection `i` behaves
/// as `script[i]`, later ones answer everything. Readiness and exec
/// answers are canned. Counts connections, and requests read whole.
async fn scripted_server(script: Vec<Then>) -> (String, Arc<AtomicU64>, Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const READY: &str = r#"{"state":"ready","cloud_init":{"done":true,"errors":[]},"setup":{"state":"succeeded","exit_code":0}}"#;
    const EXEC: &str = r#"{"exit_code":0,"signal":null,"timed_out":false,"duration_ms":1,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false}"#;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (conns, whole) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (c, w) = (conns.clone(), whole.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let i = c.fetch_add(1, Ordering::SeqCst) as usize;
            let then = script
                .get(i)
                .copied()
                .unwrap_or(Then::DiesAfter(usize::MAX));
            let whole = w.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for served in 0.. {
                    // The head, then its `content-length` bytes of body.
                    let Some(head_end) = read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    if matches!(then, Then::CutsAfter(n) if served == n) {
                        return; // dropped with the body unread: a reset
                    }
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buf.len() < head_end + len {
                        let mut chunk = vec![0u8; 64 * 1024];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + len);
                    whole.fetch_add(1, Ordering::SeqCst);
                    if matches!(then, Then::DiesAfter(n) if served == n) {
                        return;
                    }
                    let body = if head.starts_with("post") {
                        EXEC
                    } else {
                        READY
                    };
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, conns, whole)
}

/// Lets the first call's connection go back to the pool before the
/// next call. hyper-util returns it from a task of its own once the
/// connection is idle; without this the next call may find no idle
/// connection and open another. On this (current-thread) runtime the
/// tasks that return it are ready to run, and all run before the
/// runtime parks for the timer, whatever the machine's load.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// The agent went away between two reads: the kept-alive connection
/// dies under the second after it was written. It is sent once more,
/// on a fresh connection, and answered.
#[tokio::test]
async fn a_read_on_a_connection_that_died_is_sent_again_on_a_fresh_one() {
    let (url, conns, whole) = scripted_server(vec![Then::DiesAfter(1)]).await;
    let c = Client::new(&url, "t").unwrap();
    c.ready().await.unwrap();
    settle().await;
    let r = c.ready().await.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(r.state, lab_agent_proto::ReadyState::Ready);
    assert_eq!(c.connections_opened(), 2);
    assert_eq!(conns.load(Ordering::SeqCst), 2);
    assert_eq!(whole.load(Ordering::SeqCst), 3, "one read sent twice");
}

/// A fresh connection that dies is the agent not answering (qemu's
/// port forward before the guest listens): not retried.
#[tokio::test]
async fn a_fresh_connection_that_dies_is_a_transport_error() {
    let (url, conns, whole) = scripted_server(vec![Then::DiesAfter(0), Then::DiesAfter(0)]).await;
    let c = Client::new(&url, "t").unwrap();
    let err = c.ready().await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    assert!(err.is_unreachable() && !err.is_agent_went_away());
    assert_eq!(conns.load(Ordering::SeqCst), 1, "no retry");
    assert_eq!(whole.load(Ordering::SeqCst), 1);
    let err = c.exec(&ExecRequest::new("true")).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
}

/// An exec written whole into a kept-alive connection that then dies:
/// the agent may have started it. It is not sent again.
#[tokio::test]
async fn an_exec_on_a_connection_that_died_may_have_started_and_is_not_rerun() {
    let (url, conns, whole) = scripted_server(vec![Then::DiesAfter(1)]).await;
    let c = Client::new(&url, "t").unwrap();
    c.exec(&ExecRequest::new("true")).await.unwrap();
    settle().await;
    let err = c.exec(&ExecRequest::new("touch /x")).await.unwrap_err();
    assert!(err.is_agent_went_away() && err.is_unreachable(), "{err:?}");
    assert_eq!(err.may_have_started(), Some(true));
    assert_eq!(
        err.to_string(),
        format!(
            "the agent went away before answering when posting to {url}/v1/exec: the \
             command may have started (the request was sent whole); it was not sent again"
        )
    );
    assert!(
        err.hint().unwrap().contains("may have run"),
        "{:?}",
        err.hint()
    );
    assert_eq!(whole.load(Ordering::SeqCst), 2, "the exec was sent once");
    assert_eq!(conns.load(Ordering::SeqCst), 1);
    // The next call goes over a fresh connection and is answered.
    c.exec(&ExecRequest::new("true")).await.unwrap();
    assert_eq!(c.connections_opened(), 2);
}

/// An exec whose body was still being written when the connection was
/// reset cannot have started, and says so. (Through `request_unchecked`,
/// the same path as `exec`'s, so the body is made before the first call:
/// serializing a large `ExecRequest` in a debug build takes longer than
/// the pool keeps a connection idle.)
#[tokio::test]
async fn an_exec_cut_short_did_not_start() {
    let (url, conns, whole) = scripted_server(vec![Then::CutsAfter(1)]).await;
    let c = Client::new(&url, "t").unwrap();
    // More than loopback's socket buffers (both ends) hold: the reset
    // comes while the body is still being written.
    let mut big = br#"{"command":"cat >/dev/null","stdin":""#.to_vec();
    big.resize(big.len() + 64 * 1024 * 1024, b'x');
    big.extend_from_slice(br#""}"#);
    c.exec(&ExecRequest::new("true")).await.unwrap();
    settle().await;
    let timeout = Duration::from_secs(60);
    let err = c
        .request_unchecked(Method::POST, paths::EXEC, Some(big), timeout)
        .await
        .unwrap_err();
    assert!(err.is_agent_went_away(), "{err:?}");
    assert_eq!(err.may_have_started(), Some(false), "{err}");
    assert!(
        err.to_string()
            .ends_with("the command did not start (the request was cut short)"),
        "{err}"
    );
    assert!(err.hint().unwrap().contains("safe"), "{:?}", err.hint());
    assert_eq!(whole.load(Ordering::SeqCst), 1);
    assert_eq!(conns.load(Ordering::SeqCst), 1);
}

#[test]
fn a_deadline_past_the_clock_saturates() {
    let now = Instant::now();
    assert_eq!(deadline_after(now, Duration::MAX), now + FAR_FUTURE);
    assert_eq!(
        deadline_after(now, Duration::from_secs(u64::MAX)),
        now + FAR_FUTURE
    );
    let minute = Duration::from_secs(60);
    assert_eq!(deadline_after(now, minute), now + minute);
}

/// Regression: `request_timeout(Duration::MAX)`, an exec's
/// `timeout_secs = u64::MAX` and a huge `request_unchecked` timeout
/// panicked with "overflow when adding durations" / "... duration to
/// instant" before anything was sent. Each call now reaches the agent
/// and reports its answer.
#[tokio::test]
async fn huge_timeouts_send_the_request_instead_of_panicking() {
    let url = refusing_server().await;
    let within = Duration::from_secs(10);
    let unlimited = Client::builder()
        .connect_timeout(Duration::MAX)
        .request_timeout(Duration::MAX)
        .build(&url, "t")
        .unwrap();
    let huge_exec = ExecRequest::new("true").timeout_secs(u64::MAX);
    let defaults = Client::new(&url, "t").unwrap();
    for (what, err) in [
        (
            "info",
            tokio::time::timeout(within, unlimited.info())
                .await
                .map(|r| r.map(drop)),
        ),
        (
            "ready",
            tokio::time::timeout(within, unlimited.ready())
                .await
                .map(|r| r.map(drop)),
        ),
        (
            "ready_wait",
            tokio::time::timeout(within, unlimited.ready_wait(Duration::MAX))
                .await
                .map(|r| r.map(drop)),
        ),
        (
            "exec",
            tokio::time::timeout(within, unlimited.exec(&huge_exec))
                .await
                .map(|r| r.map(drop)),
        ),
        (
            "exec, default request timeout",
            tokio::time::timeout(within, defaults.exec(&huge_exec))
                .await
                .map(|r| r.map(drop)),
        ),
    ] {
        let err = err
            .unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
            .unwrap_err();
        assert!(err.is_unauthorized(), "{what}: {err:?}");
    }
    let raw = tokio::time::timeout(
        within,
        defaults.request_unchecked(Method::GET, "/v1/info", None, Duration::MAX),
    )
    .await
    .expect("request_unchecked: no answer within 10 s")
    .unwrap();
    assert_eq!(raw.status, StatusCode::UNAUTHORIZED);
}

#[test]
fn urls() {
    let c = Client::new("http://10.0.0.5:8899", "t").unwrap();
    assert_eq!(c.url(), "http://10.0.0.5:8899");
    let req = c.build_request(&Method::GET, "/v1/info", &None);
    assert_eq!(
        (req.uri().host(), req.uri().port_u16()),
        (Some("10.0.0.5"), Some(8899))
    );
    let c = Client::new("http://[::1]:8899/", "t").unwrap();
    assert_eq!(c.url(), "http://[::1]:8899");
    let req = c.build_request(&Method::GET, "/v1/info", &None);
    assert_eq!(req.uri().host(), Some("[::1]"));
    let c = Client::new("http://proxy/vm-1/", "t").unwrap();
    assert_eq!(c.url(), "http://proxy/vm-1");
    let req = c.build_request(&Method::GET, "/v1/ready?wait=5", &None);
    // The pool sends the origin form (`/vm-1/v1/ready?wait=5`) to port 80.
    assert_eq!(req.uri(), "http://proxy/vm-1/v1/ready?wait=5");
    assert_eq!(req.uri().port_u16(), None);
    assert_eq!(req.headers()[HOST], "proxy");
    let c = Client::new("http://vm:1", "t").unwrap();
    assert_eq!(
        c.build_request(&Method::GET, "/v1/info", &None).uri(),
        "http://vm:1/v1/info"
    );

    for (url, want) in [
        ("10.0.0.5:8899", "no scheme"),
        ("https://vm:8899", "plain HTTP"),
        ("ftp://vm", "scheme `ftp`"),
        ("http://vm?x=1", "query string"),
        ("http://", "invalid agent URL"),
    ] {
        let err = Client::new(url, "t").unwrap_err();
        assert!(err.to_string().contains(want), "{url}: {err}");
        assert!(err.to_string().contains(url), "{url}: {err}");
    }
    assert!(Client::new("http://vm", "  \n").is_err());
    assert!(Client::new("http://vm", "a\nb").is_err());
}

#[test]
fn only_an_instance_id_pins() {
    let id = "0123456789abcdef0123456789abcdef";
    let c = Client::builder()
        .instance(id)
        .build("http://10.0.0.5:8899", "t")
        .unwrap();
    assert_eq!(c.instance(), Some(id));
    let c = Client::new("http://10.0.0.5:8899", "t").unwrap();
    assert_eq!(c.instance(), None);
    assert_eq!(c.pinned(id).unwrap().instance(), Some(id));
    for bad in ["", "0123456789ABCDEF0123456789abcdef", "../x", &id[1..]] {
        let e = Client::builder()
            .instance(bad)
            .build("http://10.0.0.5:8899", "t")
            .unwrap_err();
        assert!(matches!(e, Error::InvalidInstanceId { .. }), "{bad}: {e}");
        assert!(c.pinned(bad).is_err(), "{bad}");
    }
    let changed = c.pinned(id).unwrap().check_instance(
        Some("ffffffffffffffffffffffffffffffff"),
        Some("2026-12-03T10:00:00Z"),
    );
    assert!(changed.unwrap_err().is_instance_changed());
    let pinned = c.pinned(id).unwrap();
    assert!(pinned.check_instance(Some(id), None).is_ok());
    assert!(
        pinned
            .check_instance(None, None)
            .unwrap_err()
            .is_instance_unknown()
    );
    assert!(c.check_instance(None, None).is_ok());
}

#[test]
fn the_token_never_shows() {
    let c = Client::new("http://vm:1", "s3cret-token").unwrap();
    assert!(!format!("{c:?}").contains("s3cret"));
    let req = c.build_request(&Method::GET, "/v1/info", &None);
    assert_eq!(req.headers()[AUTHORIZATION], "Bearer s3cret-token");
    assert!(req.headers()[AUTHORIZATION].is_sensitive());
}

#[test]
fn status_errors_carry_the_agents_message() {
    let request = Request {
        method: Method::POST,
        url: "http://vm/v1/exec".into(),
    };
    let mut headers = HeaderMap::new();
    headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
    let resp = RawResponse {
        status: StatusCode::TOO_MANY_REQUESTS,
        headers,
        body: Bytes::from_static(
            br#"{"error":{"code":"busy","message":"8 commands are running"}}"#,
        ),
    };
    let e = status_error(request.clone(), &resp);
    assert_eq!(
        e.to_string(),
        "status 429 when posting to http://vm/v1/exec: 8 commands are running"
    );
    assert_eq!(e.error_code(), Some(lab_agent_proto::ErrorCode::Busy));
    assert!(matches!(
        e,
        Error::Status {
            retry_after: Some(3),
            ..
        }
    ));
    let resp = RawResponse {
        status: StatusCode::BAD_GATEWAY,
        headers: HeaderMap::new(),
        body: Bytes::new(),
    };
    assert_eq!(
        status_error(request, &resp).to_string(),
        "status 502 when posting to http://vm/v1/exec: bad gateway"
    );
}

#[tokio::test]
async fn refused_is_unreachable() {
    // Bind and drop to find a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = Client::new(&format!("http://127.0.0.1:{port}"), "t").unwrap();
    let err = c.ready().await.unwrap_err();
    assert!(err.is_unreachable(), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("failed to connect when getting http://127.0.0.1:{port}/v1/ready")
    );
}
