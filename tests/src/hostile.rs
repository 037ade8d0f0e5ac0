//! A hostile fake agent: what a student who is root in their VM can put on
//! port 8899 instead of lab-agent. Loopback only; each [`Behaviour`] is one
//! way of answering that a real agent never does, and each is bounded in
//! time ([`MAX_CONNECTION_TIME`] per connection) and bytes
//! ([`MAX_FLOOD_BYTES`] per connection), so a test that goes wrong cannot
//! hang or fill the machine.
//!
//! [`HostileAgent::start`] serves on `127.0.0.1:0` from plain threads (no
//! runtime of its own, so it works beside any test's); the binary
//! `hostile-agent` serves the same for the Python tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest a connection is served (then closed).
pub const MAX_CONNECTION_TIME: Duration = Duration::from_secs(60);
/// The most bytes a flood writes on one connection.
pub const MAX_FLOOD_BYTES: u64 = 1 << 30;

/// Text full of terminal control: an OSC title, a screen clear, a carriage
/// return that would overwrite a line, a newline that forges one, a C1 CSI.
pub const ESCAPES: &str = "\x1b]0;pwned\x07\x1b[2J\rforged\nerror: forged line\u{9b}31m";

/// How the fake agent answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behaviour {
    /// Every request: `429 busy` with `Retry-After: secs`.
    Busy { retry_after: u64 },
    /// Every request: `100 Continue` heads, as fast as it can, no answer.
    ContinueFlood,
    /// Every request: `200` announcing a 2 GiB `Content-Length`, then a
    /// trickle of bytes.
    HugeContentLength,
    /// Every request: `200`, chunked, and a body without end (up to
    /// [`MAX_FLOOD_BYTES`]) as fast as it can.
    EndlessBody,
    /// Every request: `200`, chunked, then one byte of body every 100 ms
    /// (a slow drip that never ends the answer).
    Drip,
    /// `/v1/exec`: a valid answer with `stdout_bytes` bytes of stdout (in
    /// one JSON string); other paths as [`Behaviour::Honest`].
    Oversized { stdout_bytes: usize },
    /// `/v1/exec`: an answer with this exit code and signal (raw JSON
    /// numbers); other paths as [`Behaviour::Honest`].
    Exit {
        exit_code: Option<i64>,
        signal: Option<i64>,
    },
    /// `/v1/ready`: `failed` with [`ESCAPES`] in `reason` and `log_tail`;
    /// `/v1/info`: a `lab_dir` with them; `/v1/exec`: a 400 whose message
    /// is them.
    Escapes,
    /// `/v1/ready` ready, `/v1/info` an absolute `lab_dir` with
    /// [`ESCAPES`] in it, `/v1/exec` a passing answer.
    EscapedLabDir,
    /// Every request: `500` with a body that is not JSON, [`ESCAPES`] in it.
    NonJsonError,
    /// `/v1/ready`: `400` with an agent-like error body.
    Ready400,
    /// `/v1/ready`: `503` with a readiness body whose state is unknown.
    UnknownState,
    /// `/v1/info`: a relative `lab_dir`; the rest as [`Behaviour::Honest`].
    RelativeLabDir,
    /// Every request: no answer; the connection closed after 0–49 ms
    /// (varying by request), so calls end at scattered moments.
    Hangup,
    /// Ready, `lab_dir` `/opt/lab`, every exec exits 0 with no output.
    Honest,
    /// An agent older than `instance_id` in exec requests: ready as
    /// instance [`OLDER_READY_INSTANCE`]; an exec that carries the field
    /// is a 400 (serde's unknown field, as the agent words it), any other
    /// answers as instance [`OLDER_EXEC_INSTANCE`] (a reset the client
    /// must catch on the answer).
    OlderAgent,
}

/// The instance [`Behaviour::OlderAgent`]'s ready answers name.
pub const OLDER_READY_INSTANCE: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
/// The instance its exec answers name.
pub const OLDER_EXEC_INSTANCE: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

impl Behaviour {
    /// The name the `hostile-agent` binary takes (`busy:SECS` sets the
    /// `Retry-After`).
    pub fn parse(name: &str) -> Option<Behaviour> {
        if let Some(secs) = name.strip_prefix("busy:") {
            return Some(Behaviour::Busy {
                retry_after: secs.parse().ok()?,
            });
        }
        Some(match name {
            "busy" => Behaviour::Busy { retry_after: 1 },
            "continue-flood" => Behaviour::ContinueFlood,
            "huge-content-length" => Behaviour::HugeContentLength,
            "endless-body" => Behaviour::EndlessBody,
            "drip" => Behaviour::Drip,
            "oversized" => Behaviour::Oversized {
                stdout_bytes: 8 << 20,
            },
            "bad-exit" => Behaviour::Exit {
                exit_code: Some(-1),
                signal: None,
            },
            "escapes" => Behaviour::Escapes,
            "non-json-error" => Behaviour::NonJsonError,
            "ready-400" => Behaviour::Ready400,
            "unknown-state" => Behaviour::UnknownState,
            "relative-lab-dir" => Behaviour::RelativeLabDir,
            "hangup" => Behaviour::Hangup,
            "honest" => Behaviour::Honest,
            "older-agent" => Behaviour::OlderAgent,
            _ => return None,
        })
    }
}

/// A fake agent serving one [`Behaviour`] until dropped.
#[derive(Debug)]
pub struct HostileAgent {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests read so far.
    pub requests: Arc<AtomicU64>,
    /// Bytes written so far.
    pub written: Arc<AtomicU64>,
}

impl HostileAgent {
    pub fn start(behaviour: Behaviour) -> HostileAgent {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let written = Arc::new(AtomicU64::new(0));
        let (s, r, w) = (stop.clone(), requests.clone(), written.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (b, s, r, w) = (behaviour.clone(), s.clone(), r.clone(), w.clone());
                std::thread::spawn(move || serve(conn, &b, &s, &r, &w));
            }
        });
        HostileAgent {
            addr,
            stop,
            requests,
            written,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for HostileAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Serves one connection: reads requests (head and `Content-Length` body)
/// and answers each as `behaviour` says, until the client closes, the
/// server stops, or [`MAX_CONNECTION_TIME`] passes.
fn serve(
    conn: TcpStream,
    b: &Behaviour,
    stop: &AtomicBool,
    requests: &AtomicU64,
    written: &AtomicU64,
) {
    let started = Instant::now();
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut out = conn;
    let mut write = |bytes: &[u8]| -> bool {
        if stop.load(Ordering::Relaxed) || started.elapsed() > MAX_CONNECTION_TIME {
            return false;
        }
        written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        out.write_all(bytes).is_ok()
    };
    loop {
        let Some((method, path, body)) = read_request(&mut reader) else {
            return;
        };
        requests.fetch_add(1, Ordering::Relaxed);
        let path = path.split('?').next().unwrap_or("").to_owned();
        let keep_going = match (b, method.as_str(), path.as_str()) {
            (Behaviour::Busy { retry_after }, ..) => write(&response(
                "429 Too Many Requests",
                &[("retry-after", &retry_after.to_string())],
                &error_body("busy", "8 commands are running"),
            )),
            (Behaviour::ContinueFlood, ..) => {
                let head = b"HTTP/1.1 100 Continue\r\n\r\n";
                let mut sent = 0;
                while sent < MAX_FLOOD_BYTES && write(head) {
                    sent += head.len() as u64;
                }
                false
            }
            (Behaviour::HugeContentLength, ..) => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2147483648\r\n\r\n{";
                if write(head.as_bytes()) {
                    // A trickle, so only a client that waits for the body
                    // waits: one byte a second.
                    while write(b" ") {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
                false
            }
            (Behaviour::EndlessBody, ..) => {
                const CHUNKED: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                let chunk = format!("10000\r\n{{{}\r\n", " ".repeat(0xffff));
                let mut sent = 0;
                if write(CHUNKED.as_bytes()) {
                    while sent < MAX_FLOOD_BYTES && write(chunk.as_bytes()) {
                        sent += chunk.len() as u64;
                    }
                }
                false
            }
            (Behaviour::Drip, ..) => {
                const CHUNKED: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if write(CHUNKED.as_bytes()) {
                    while write(b"1\r\n \r\n") {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                false
            }
            (Behaviour::Oversized { stdout_bytes }, "POST", "/v1/exec") => {
                let stdout = "x".repeat(*stdout_bytes);
                write(&ok(&exec_body(Some(0), None, &stdout, "")))
            }
            (Behaviour::Exit { exit_code, signal }, "POST", "/v1/exec") => {
                let json = |v: &Option<i64>| v.map_or("null".to_owned(), |v| v.to_string());
                let (exit_code, signal) = (json(exit_code), json(signal));
                let body = format!(
                    r#"{{"exit_code":{exit_code},"signal":{signal},"timed_out":false,"duration_ms":1,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false}}"#
                );
                write(&ok(&body))
            }
            (Behaviour::Escapes, _, "/v1/ready") => {
                let body = serde_json::json!({
                    "state": "failed",
                    "reason": format!("setup failed: {ESCAPES}"),
                    "cloud_init": {"done": true, "errors": []},
                    "setup": {"state": "failed", "exit_code": 1, "duration_ms": 5,
                              "log_tail": format!("step 1\n{ESCAPES}\nstep 2\n")},
                });
                write(&response("503 Service Unavailable", &[], &body.to_string()))
            }
            (Behaviour::Escapes, _, "/v1/exec") => write(&response(
                "400 Bad Request",
                &[],
                &error_body("bad_request", ESCAPES),
            )),
            (Behaviour::Escapes | Behaviour::EscapedLabDir, _, "/v1/info") => {
                write(&ok(&info_body(&format!("/opt/lab{ESCAPES}"))))
            }
            (Behaviour::NonJsonError, ..) => write(&response(
                "500 Internal Server Error",
                &[("content-type", "text/plain")],
                &format!("<html>{ESCAPES}</html>"),
            )),
            (Behaviour::Ready400, _, "/v1/ready") => write(&response(
                "400 Bad Request",
                &[],
                &error_body("bad_request", "unknown query parameter"),
            )),
            (Behaviour::UnknownState, _, "/v1/ready") => {
                let body = serde_json::json!({
                    "state": "rebooting",
                    "reason": "the VM is rebooting",
                    "cloud_init": {"done": false, "errors": []},
                    "setup": {"state": "pending"},
                });
                write(&response("503 Service Unavailable", &[], &body.to_string()))
            }
            (Behaviour::Hangup, ..) => {
                let n = requests.load(Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(n * 7 % 50));
                false
            }
            (Behaviour::RelativeLabDir, _, "/v1/info") => write(&ok(&info_body("opt/lab"))),
            (Behaviour::OlderAgent, _, "/v1/exec") => {
                let sent: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                if sent.get("instance_id").is_some() {
                    write(&response(
                        "400 Bad Request",
                        &[],
                        &error_body(
                            "bad_request",
                            "invalid exec request: unknown field `instance_id`, expected one of `command`, `timeout_secs` at line 1 column 60",
                        ),
                    ))
                } else {
                    let mut answer: serde_json::Value =
                        serde_json::from_str(&exec_body(Some(0), None, "", "")).unwrap();
                    answer["instance_id"] = OLDER_EXEC_INSTANCE.into();
                    write(&ok(&answer.to_string()))
                }
            }
            (Behaviour::OlderAgent, _, "/v1/ready") => {
                let body = serde_json::json!({
                    "state": "ready",
                    "cloud_init": {"done": true, "errors": []},
                    "setup": {"state": "succeeded", "exit_code": 0, "duration_ms": 5, "log_tail": ""},
                    "instance": {"id": OLDER_READY_INSTANCE, "boots": 1,
                        "boot_id": "00000000-0000-0000-0000-000000000000",
                        "first_boot_at": "2026-01-01T00:00:00Z"},
                });
                write(&ok(&body.to_string()))
            }
            (_, _, "/v1/ready") => {
                let body = serde_json::json!({
                    "state": "ready",
                    "cloud_init": {"done": true, "errors": []},
                    "setup": {"state": "succeeded", "exit_code": 0, "duration_ms": 5, "log_tail": ""},
                });
                write(&ok(&body.to_string()))
            }
            (_, _, "/v1/info") => write(&ok(&info_body("/opt/lab"))),
            (_, "POST", "/v1/exec") => write(&ok(&exec_body(Some(0), None, "", ""))),
            _ => write(&response(
                "404 Not Found",
                &[],
                &error_body("not_found", "no such path"),
            )),
        };
        if !keep_going {
            return;
        }
    }
}

/// Reads one request: its method, path and body.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut words = line.split_whitespace();
    let (method, path) = (words.next()?.to_owned(), words.next()?.to_owned());
    let mut length = 0u64;
    let mut head_bytes = line.len();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        head_bytes += h.len();
        if head_bytes > 64 * 1024 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().ok()?;
            }
        }
    }
    if length > 2 << 20 {
        return None;
    }
    let mut body = Vec::new();
    r.by_ref().take(length).read_to_end(&mut body).ok()?;
    Some((method, path, body))
}

fn response(status: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    if !headers.iter().any(|(k, _)| *k == "content-type") {
        out.push_str("content-type: application/json\r\n");
    }
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

fn ok(body: &str) -> Vec<u8> {
    response("200 OK", &[], body)
}

fn error_body(code: &str, message: &str) -> String {
    serde_json::json!({"error": {"code": code, "message": message}}).to_string()
}

fn info_body(lab_dir: &str) -> String {
    serde_json::json!({
        "version": "0.0.0-hostile", "os": "Debian", "uptime_secs": 1, "agent_uptime_secs": 1,
        "boot_id": "00000000-0000-0000-0000-000000000000", "lab_dir": lab_dir,
    })
    .to_string()
}

fn exec_body(exit_code: Option<i32>, signal: Option<i32>, stdout: &str, stderr: &str) -> String {
    serde_json::json!({
        "exit_code": exit_code, "signal": signal, "timed_out": false, "duration_ms": 1,
        "stdout": stdout, "stderr": stderr,
        "stdout_truncated": false, "stderr_truncated": false,
    })
    .to_string()
}
