//! Exec round trips, every variant one sample per round in a fresh random
//! order, so whatever the machine does meanwhile hits all of them alike.
//! [`add_streaming`]: the streamed answer beside the plain one.

use crate::floor::Floor;
use crate::http::Conn;
use crate::peers::Sshd;
use crate::stats::Rng;
use lab_agent_proto::{ExecRequest, ExecResult, StreamEvent};
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One way of running the shell; `sample` times one complete round trip.
pub trait Variant {
    fn name(&self) -> String;
    fn sample(&mut self) -> io::Result<Duration>;
    /// Untimed, after each sample: lets work a variant leaves running after
    /// its answer (an sshd session winding down) end before the next
    /// variant's sample starts.
    fn settle(&mut self) {
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub struct FloorV(pub Floor);

impl Variant for FloorV {
    fn name(&self) -> String {
        match self.0.mode() {
            crate::floor::Mode::PosixSpawn => "floor: posix_spawn + wait".into(),
            crate::floor::Mode::PosixSpawnSetsid => "(diag.) floor + POSIX_SPAWN_SETSID".into(),
            crate::floor::Mode::Fork => "(diag.) local fork + setsid + setuid, no HTTP".into(),
            crate::floor::Mode::Vfork => "(diag.) local vfork + setsid + setuid, no HTTP".into(),
            crate::floor::Mode::VforkSameSession => {
                "(diag.) local vfork + setuid, no setsid, no HTTP".into()
            }
            crate::floor::Mode::Clone3 => "(diag.) local clone3 + setsid + setuid, no HTTP".into(),
            crate::floor::Mode::Clone3Cgroup => {
                "(diag.) the same into a cgroup of its own (CLONE_INTO_CGROUP)".into()
            }
            crate::floor::Mode::Clone3CgroupHeld => {
                "(diag.) the same into a cgroup holding an idle process (as the agent's pool)"
                    .into()
            }
        }
    }
    fn sample(&mut self) -> io::Result<Duration> {
        self.0.sample()
    }
}

/// The JSON body of an exec request for `command` as `user`.
pub fn exec_body(command: &str, user: &str, cap: Option<u64>) -> Vec<u8> {
    let mut req = ExecRequest::new(command).user(user);
    if let Some(c) = cap {
        req = req.max_output_bytes(c);
    }
    serde_json::to_vec(&req).expect("plain struct")
}

/// Checks an exec response: 200 and exit code 0.
pub fn check_exec(resp: &crate::http::Response) -> io::Result<ExecResult> {
    if resp.status != 200 {
        return Err(io::Error::other(format!(
            "exec answered {}: {}",
            resp.status,
            String::from_utf8_lossy(&resp.body)
        )));
    }
    let r: ExecResult = serde_json::from_slice(&resp.body).map_err(io::Error::other)?;
    if r.exit_code != Some(0) {
        return Err(io::Error::other(format!("exec failed: {r:?}")));
    }
    Ok(r)
}

pub struct AgentKeepAlive {
    pub conn: Conn,
    pub body: Vec<u8>,
    pub label: &'static str,
}

impl Variant for AgentKeepAlive {
    fn name(&self) -> String {
        self.label.into()
    }
    fn sample(&mut self) -> io::Result<Duration> {
        let t = Instant::now();
        let resp = self.conn.request("POST", "/v1/exec", Some(&self.body))?;
        let d = t.elapsed();
        check_exec(&resp)?;
        Ok(d)
    }
}

/// The output-heavy command of the streaming rows: 100,000 lines, 500,000
/// bytes of stdout (under the default 1 MiB cap, so nothing is cut).
pub const HEAVY_COMMAND: &str = "yes line | head -n 100000";
const HEAVY_BYTES: usize = 500_000;

/// What [`AgentExec`] asks for and checks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The plain JSON answer.
    Plain,
    /// `"stream": true`: NDJSON events, the result last.
    Streamed,
}

/// A kept-alive exec whose answer is checked whole, stdout counted: the
/// streaming rows. The time is to the complete answer (the result line for
/// a stream), as for the plain rows: what streaming costs a caller that
/// waits for the end.
pub struct AgentExec {
    pub conn: Conn,
    body: Vec<u8>,
    answer: Answer,
    stdout_bytes: usize,
    label: &'static str,
}

impl AgentExec {
    pub fn new(
        conn: Conn,
        command: &str,
        user: &str,
        answer: Answer,
        stdout_bytes: usize,
        label: &'static str,
    ) -> AgentExec {
        let mut req = ExecRequest::new(command).user(user);
        req.stream = answer == Answer::Streamed;
        AgentExec {
            conn,
            body: serde_json::to_vec(&req).expect("plain struct"),
            answer,
            stdout_bytes,
            label,
        }
    }
}

impl Variant for AgentExec {
    fn name(&self) -> String {
        self.label.into()
    }
    fn sample(&mut self) -> io::Result<Duration> {
        let t = Instant::now();
        let resp = self.conn.request("POST", "/v1/exec", Some(&self.body))?;
        let d = t.elapsed();
        let stdout = match self.answer {
            Answer::Plain => check_exec(&resp)?.stdout.len(),
            Answer::Streamed => check_stream(&resp)?,
        };
        if stdout != self.stdout_bytes {
            return Err(io::Error::other(format!(
                "{stdout} bytes of stdout, not {}",
                self.stdout_bytes
            )));
        }
        Ok(d)
    }
}

/// Checks a streamed answer: 200, every line an event, the result last with
/// exit code 0. Returns the stdout bytes, streamed and in the result.
fn check_stream(resp: &crate::http::Response) -> io::Result<usize> {
    if resp.status != 200 {
        return Err(io::Error::other(format!(
            "exec answered {}: {}",
            resp.status,
            String::from_utf8_lossy(&resp.body)
        )));
    }
    let mut stdout = 0;
    let mut result = None;
    for line in resp.body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if result.is_some() {
            return Err(io::Error::other("an event after the result"));
        }
        match serde_json::from_slice(line).map_err(io::Error::other)? {
            StreamEvent::Stdout(s) => stdout += s.len(),
            StreamEvent::Stderr(_) => {}
            StreamEvent::Result(r) => result = Some(r),
        }
    }
    let r: ExecResult = result.ok_or_else(|| io::Error::other("no result in the stream"))?;
    if r.exit_code != Some(0) {
        return Err(io::Error::other(format!("exec failed: {r:?}")));
    }
    Ok(stdout + r.stdout.len())
}

/// Streaming's cost beside the plain answer: adds the `true` round trip
/// streamed (paired with the plain kept-alive row at `plain_true`), and the
/// output-heavy command both ways, each on its own kept-alive connection.
/// Returns the pairs (streamed row, plain row, what the ratio says).
pub fn add_streaming<'a>(
    variants: &mut Vec<Box<dyn Variant + 'a>>,
    plain_true: usize,
    addr: SocketAddr,
    token: &str,
    user: &str,
    command: &str,
) -> io::Result<Vec<(usize, usize, &'static str)>> {
    let mut row = |command: &str, answer, bytes, label| -> io::Result<usize> {
        let conn = Conn::connect(addr, token)?;
        variants.push(Box::new(AgentExec::new(
            conn, command, user, answer, bytes, label,
        )));
        Ok(variants.len() - 1)
    };
    let streamed_true = row(
        command,
        Answer::Streamed,
        0,
        "lab-agent, streamed (`\"stream\": true`), kept-alive",
    )?;
    let heavy_plain = row(
        HEAVY_COMMAND,
        Answer::Plain,
        HEAVY_BYTES,
        "lab-agent, 500 KB of stdout, plain answer, kept-alive",
    )?;
    let heavy_streamed = row(
        HEAVY_COMMAND,
        Answer::Streamed,
        HEAVY_BYTES,
        "lab-agent, 500 KB of stdout, streamed, kept-alive",
    )?;
    Ok(vec![
        (
            streamed_true,
            plain_true,
            "lab-agent `true`: streamed ÷ plain answer",
        ),
        (
            heavy_streamed,
            heavy_plain,
            "lab-agent, 500 KB of stdout: streamed ÷ plain answer",
        ),
    ])
}

/// Diagnostic: the HTTP hop alone, `GET /v1/ready` on a kept-alive
/// connection (answered from the agent's cache).
pub struct AgentReady {
    pub conn: Conn,
}

impl Variant for AgentReady {
    fn name(&self) -> String {
        "(diag.) lab-agent GET /v1/ready, kept-alive".into()
    }
    fn sample(&mut self) -> io::Result<Duration> {
        let t = Instant::now();
        let resp = self.conn.request("GET", "/v1/ready", None)?;
        let d = t.elapsed();
        if resp.status != 200 {
            return Err(io::Error::other(format!("ready answered {}", resp.status)));
        }
        Ok(d)
    }
}

/// Diagnostic: what any TCP service pays, with no HTTP and no agent: one
/// byte to an echo thread on loopback and one back, on a kept connection.
/// Sampled in the same rounds as the rest, so it meets the machine as
/// they do (after the same idle gap: on a VM, waking an idle vCPU is most
/// of it).
pub struct TcpPingPong {
    conn: std::net::TcpStream,
}

impl TcpPingPong {
    pub fn start() -> io::Result<TcpPingPong> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        // Ends when the bench's end closes (read returns 0).
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let _ = s.set_nodelay(true);
                let mut b = [0u8; 1];
                while let Ok(1) = std::io::Read::read(&mut s, &mut b) {
                    if s.write_all(&b).is_err() {
                        break;
                    }
                }
            }
        });
        let conn = std::net::TcpStream::connect(addr)?;
        conn.set_nodelay(true)?;
        Ok(TcpPingPong { conn })
    }
}

impl Variant for TcpPingPong {
    fn name(&self) -> String {
        "(diag.) loopback TCP, 1 byte there and back (no HTTP, no agent)".into()
    }
    fn sample(&mut self) -> io::Result<Duration> {
        let mut b = [0u8; 1];
        let t = Instant::now();
        self.conn.write_all(b"p")?;
        std::io::Read::read_exact(&mut self.conn, &mut b)?;
        Ok(t.elapsed())
    }
}

pub struct AgentFresh {
    pub addr: SocketAddr,
    pub token: String,
    pub body: Vec<u8>,
}

impl Variant for AgentFresh {
    fn name(&self) -> String {
        "lab-agent, new TCP connection each".into()
    }
    fn sample(&mut self) -> io::Result<Duration> {
        let t = Instant::now();
        let mut conn = Conn::connect(self.addr, &self.token)?;
        let resp = conn.request("POST", "/v1/exec", Some(&self.body))?;
        let d = t.elapsed();
        check_exec(&resp)?;
        Ok(d)
    }
}

/// `ssh user@127.0.0.1 'bash --login -c true'`: sshd runs the user's shell
/// with `-c`, which execs the login shell (one extra exec of a plain
/// `bash -c`, ~1 ms, which the row includes).
pub struct Ssh<'a> {
    pub sshd: &'a Sshd,
    pub mux: Option<PathBuf>,
    pub remote: String,
    /// sshd's session processes when idle (the ControlMaster's session).
    pub idle_sessions: usize,
}

impl Variant for Ssh<'_> {
    fn name(&self) -> String {
        match self.mux {
            None => "OpenSSH, new connection each".into(),
            Some(_) => "OpenSSH, ControlMaster session".into(),
        }
    }
    /// Until sshd's session processes for this sample are gone (measured:
    /// with a fixed 30 ms pause instead, their teardown still slowed the
    /// next sample, and lab-agent's ratio to the floor read 1.069 instead
    /// of 1.014 with 150 ms).
    fn settle(&mut self) {
        let until = Instant::now() + Duration::from_secs(2);
        while self.sshd.sessions() > self.idle_sessions && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    fn sample(&mut self) -> io::Result<Duration> {
        let mut cmd = self.sshd.ssh(self.mux.as_deref(), &self.remote);
        let t = Instant::now();
        let out = cmd.output()?;
        let d = t.elapsed();
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "ssh failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(d)
    }
}

/// qemu-guest-agent: `guest-exec` with captured output, then
/// `guest-exec-status` back to back until it reports `exited` (no sleep
/// between polls: the fastest a client can learn of the exit).
pub struct Qga {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    exec: String,
    pub polls: u64,
}

impl Qga {
    pub fn connect(socket: &Path, argv: &[&str]) -> io::Result<Qga> {
        let writer = UnixStream::connect(socket)?;
        writer.set_read_timeout(Some(Duration::from_secs(60)))?;
        let reader = BufReader::new(writer.try_clone()?);
        let exec = serde_json::json!({
            "execute": "guest-exec",
            "arguments": {"path": argv[0], "arg": &argv[1..], "capture-output": true}
        })
        .to_string();
        Ok(Qga {
            reader,
            writer,
            exec,
            polls: 0,
        })
    }

    fn call(&mut self, request: &str) -> io::Result<serde_json::Value> {
        self.writer.write_all(request.as_bytes())?;
        self.writer.write_all(b"\n")?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::other("qemu-ga closed the connection"));
        }
        let v: serde_json::Value = serde_json::from_str(&line).map_err(io::Error::other)?;
        match v.get("return") {
            Some(r) => Ok(r.clone()),
            None => Err(io::Error::other(format!("qemu-ga: {line}"))),
        }
    }
}

impl Variant for Qga {
    fn name(&self) -> String {
        "qemu-ga, guest-exec + status polls".into()
    }
    fn sample(&mut self) -> io::Result<Duration> {
        let t = Instant::now();
        let exec = self.exec.clone();
        let r = self.call(&exec)?;
        let pid = r["pid"]
            .as_i64()
            .ok_or_else(|| io::Error::other(format!("guest-exec: {r}")))?;
        let status = format!(r#"{{"execute":"guest-exec-status","arguments":{{"pid":{pid}}}}}"#);
        loop {
            let s = self.call(&status)?;
            self.polls += 1;
            if s["exited"].as_bool() == Some(true) {
                let d = t.elapsed();
                if s["exitcode"].as_i64() != Some(0) {
                    return Err(io::Error::other(format!("guest-exec: {s}")));
                }
                return Ok(d);
            }
        }
    }
}

/// Runs `warmup` unrecorded rounds, then `rounds` recorded ones, each round
/// taking one sample of every variant in a random order.
pub fn interleave(
    variants: &mut [Box<dyn Variant + '_>],
    warmup: usize,
    rounds: usize,
    rng: &mut Rng,
) -> io::Result<Vec<Vec<Duration>>> {
    let mut samples = vec![Vec::with_capacity(rounds); variants.len()];
    let mut order: Vec<usize> = (0..variants.len()).collect();
    for round in 0..warmup + rounds {
        rng.shuffle(&mut order);
        for &i in &order {
            let d = variants[i]
                .sample()
                .map_err(|e| io::Error::other(format!("{}: {e}", variants[i].name())))?;
            if round >= warmup {
                samples[i].push(d);
            }
            variants[i].settle();
        }
        if (round + 1) % 50 == 0 {
            eprintln!("bench: exec round {}/{}", round + 1, warmup + rounds);
        }
    }
    Ok(samples)
}
