//! What the VM scenarios share: the static agent and the payload, `labctl`
//! pointed at a VM, a readiness probe that timestamps what it sees, the
//! guest's clock, and `labctl` children whose stderr is read as it comes.

use lab_agent_tests::local::{TempDir, describe, labctl_bin};
use lab_agent_tests::vm::http;
use lab_agent_tests::vm::{Arch, GuestOs, VmImage, guest_cpus};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `labctl wait`'s timeout in the scenarios: far beyond a boot (2–5 min
/// here under TCG), so that "fails fast" and "ready" mean something.
pub const WAIT_TIMEOUT_SECS: u64 = 900;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The guest's image; a host that cannot run it fails here, saying why.
pub fn image(guest: GuestOs) -> VmImage {
    VmImage::ensure(guest).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a scenario on `guest`. A guest `LAB_AGENT_VM_GUESTS` leaves out has
/// its tests ignored at build time ([`per_guest!`]); one that runs anyway
/// (`--ignored`, `--include-ignored`, or the test binary run by hand with
/// another value than it was built with) fails here, saying how to run it,
/// rather than passing without a boot or building an image nobody asked for.
pub fn on_guest(guest: GuestOs, scenario: fn(GuestOs)) {
    assert!(
        guest.selected(),
        "{guest} is left out by LAB_AGENT_VM_GUESTS (unset: debian-12,debian-13), so this test \
         is ignored and ran only because ignored tests were asked for; to run it, name the \
         guest: LAB_AGENT_VM_GUESTS={guest} cargo test -p lab-agent-tests --test vm_lifecycle"
    );
    eprintln!("── on {guest} ──");
    scenario(guest);
}

/// One test per guest for each scenario `fn NAME(guest: GuestOs)`:
/// `NAME::debian_12` and `NAME::debian_13`, so a filter on the scenario's
/// name runs it on both and a filter on `debian_13` runs one guest's.
/// `per_guest!(NAME; arm64)` adds `NAME::debian_13_arm64`. A guest that
/// `LAB_AGENT_VM_GUESTS` leaves out (by default `debian-13-arm64`) has its
/// tests `#[ignore]`d through `build.rs`'s `vm_guest_left_out` cfg, so cargo
/// reports them as ignored: `ok` always means the VM booted.
macro_rules! per_guest {
    ($($scenario:ident),* $(,)?) => {$(
        per_guest!(@mod $scenario {});
    )*};
    ($scenario:ident; arm64) => {
        per_guest!(@mod $scenario {
            #[test]
            #[cfg_attr(
                vm_guest_left_out = "debian-13-arm64",
                ignore = "LAB_AGENT_VM_GUESTS leaves out debian-13-arm64"
            )]
            fn debian_13_arm64() {
                $crate::support::on_guest(GuestOs::Debian13Arm64, super::$scenario)
            }
        });
    };
    (@mod $scenario:ident { $($more:tt)* }) => {
        mod $scenario {
            use lab_agent_tests::vm::GuestOs;
            #[test]
            #[cfg_attr(
                vm_guest_left_out = "debian-12",
                ignore = "LAB_AGENT_VM_GUESTS leaves out debian-12"
            )]
            fn debian_12() {
                $crate::support::on_guest(GuestOs::Debian12, super::$scenario)
            }
            #[test]
            #[cfg_attr(
                vm_guest_left_out = "debian-13",
                ignore = "LAB_AGENT_VM_GUESTS leaves out debian-13"
            )]
            fn debian_13() {
                $crate::support::on_guest(GuestOs::Debian13, super::$scenario)
            }
            $($more)*
        }
    };
}

/// The amd64 static agent the payload carries ([`static_agent_for`]).
pub fn static_agent() -> &'static Path {
    static_agent_for(Arch::Amd64)
}

/// The static agent for `arch` (one definition, shared with the sandbox's
/// tests).
pub use lab_agent_tests::local::static_agent_for;

/// `labctl VERB LAB --vm DISK --arch ARCH` (`try` or `test`) booting the
/// guest's bootable disk image (firmware, GRUB, the kernel from the disk),
/// as an author boots a cloud image.
pub fn on_disk(verb: &str, lab: &Path, image: &VmImage) -> Command {
    let arch = image.os.arch();
    let mut cmd = Command::new(labctl_bin());
    cmd.arg(verb)
        .arg(lab)
        .arg("--agent")
        .arg(static_agent_for(arch))
        .args(["--arch", arch.name()])
        .args(["--cpus", &guest_cpus().to_string()])
        .arg("--vm")
        .arg(&image.disk);
    cmd
}

/// `labctl VERB LAB` (`try` or `test`) booting the test image from its
/// kernel, with the static agent, by this `labctl` (the tree's, or an
/// older build to compare).
pub fn on_kernel_with(labctl: &Path, verb: &str, lab: &Path, image: &VmImage) -> Command {
    let arch = image.os.arch();
    let mut cmd = Command::new(labctl);
    cmd.arg(verb)
        .arg(lab)
        .arg("--agent")
        .arg(static_agent_for(arch))
        .args(["--arch", arch.name()])
        .args(["--cpus", &guest_cpus().to_string()])
        .arg("--kernel")
        .arg(&image.kernel)
        .arg("--initrd")
        .arg(&image.initrd)
        .arg("--rootfs")
        .arg(&image.rootfs);
    cmd
}

/// `user_data` (a MIME multipart message as `labctl secret` renders it)
/// with one more part, appended before the closing boundary.
pub fn with_part(user_data: &[u8], content_type: &str, body: &str) -> Vec<u8> {
    let text = std::str::from_utf8(user_data).expect("the user-data is ASCII");
    let boundary = text
        .lines()
        .next()
        .and_then(|l| l.split("boundary=\"").nth(1))
        .and_then(|b| b.split('"').next())
        .expect("a multipart user-data");
    let closing = format!("--{boundary}--\n");
    let head = text
        .strip_suffix(&closing)
        .expect("ends with its closing boundary");
    format!("{head}--{boundary}\nContent-Type: {content_type}\n\n{body}\n{closing}").into_bytes()
}

/// A copy of `src` (a lab folder) at `dst`, modes kept.
pub fn copy_lab(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_lab(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

/// A lab's payload as `labctl secret --user-data-out --token-out` renders it.
#[derive(Debug)]
pub struct Payload {
    pub user_data: Vec<u8>,
    pub token: String,
    pub token_file: PathBuf,
}

pub fn render_payload(lab: &Path, dir: &TempDir, arch: Arch) -> Payload {
    render_payload_with(lab, dir, arch, &[])
}

/// [`render_payload`] with more of `labctl secret`'s flags (e.g.
/// `--agent-from disk`).
pub fn render_payload_with(lab: &Path, dir: &TempDir, arch: Arch, flags: &[&str]) -> Payload {
    let token_file = dir.join("token");
    let user_data_file = dir.join("user-data");
    let out = Command::new(labctl_bin())
        .arg("secret")
        .arg(lab)
        .args(["--name", "vm-test", "--arch", arch.name(), "--agent"])
        .arg(static_agent_for(arch))
        .args(flags)
        .arg("--user-data-out")
        .arg(&user_data_file)
        .arg("--token-out")
        .arg(&token_file)
        .arg("-o")
        .arg(dir.join("secret.yaml"))
        .stdin(Stdio::null())
        .output()
        .expect("run labctl secret");
    assert!(out.status.success(), "labctl secret: {}", describe(&out));
    Payload {
        user_data: std::fs::read(&user_data_file).unwrap(),
        token: std::fs::read_to_string(&token_file)
            .unwrap()
            .trim_end()
            .to_owned(),
        token_file,
    }
}

/// `labctl` pointed at one agent.
#[derive(Debug, Clone)]
pub struct Conn {
    pub url: String,
    pub token_file: PathBuf,
}

impl Conn {
    /// `labctl VERB --url URL --token-file F ARGS…`, output captured.
    pub fn labctl(&self, verb: &str, args: &[&str]) -> Output {
        self.command(verb, args).output().expect("run labctl")
    }

    /// The same, not yet started.
    pub fn command(&self, verb: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(labctl_bin());
        cmd.arg(verb)
            .args(["--url", &self.url, "--token-file"])
            .arg(&self.token_file)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `labctl exec [--user U] -- sh-command`.
    pub fn exec(&self, user: Option<&str>, command: &str) -> Output {
        let mut args = Vec::new();
        if let Some(u) = user {
            args.extend(["--user", u]);
        }
        args.extend(["--", command]);
        self.labctl("exec", &args)
    }

    /// A root command that must succeed; its stdout.
    pub fn run(&self, command: &str) -> String {
        let out = self.exec(None, command);
        assert_eq!(
            out.status.code(),
            Some(0),
            "`{command}` in the guest: {}",
            describe(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// What one probe attempt saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Since the probe's origin.
    pub at: Duration,
    /// HTTP status and the readiness state in the body, or why no answer.
    pub answer: Result<(u16, Option<String>), String>,
}

/// Polls `GET /v1/ready` (with the token) every 100 ms in a thread,
/// recording every outcome: when the agent first answered (any HTTP answer)
/// and which states it went through.
#[derive(Debug)]
pub struct Probe {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    pub fn start(addr: SocketAddr, token: &str, origin: Instant) -> Probe {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2, token) = (seen.clone(), stop.clone(), token.to_owned());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let answer =
                    http::get_within(addr, "/v1/ready", Some(&token), Duration::from_millis(1000))
                        .map(|a| {
                            let state = serde_json::from_str::<Value>(a.body())
                                .ok()
                                .and_then(|v| v["state"].as_str().map(str::to_owned));
                            (a.status, state)
                        });
                seen2.lock().unwrap().push(Seen {
                    at: origin.elapsed(),
                    answer,
                });
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Probe {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    pub fn snapshot(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// When the agent first gave any HTTP answer.
    pub fn first_answer(&self) -> Option<Duration> {
        self.snapshot()
            .iter()
            .find(|s| s.answer.is_ok())
            .map(|s| s.at)
    }

    /// When `state` was first and last seen.
    pub fn seen_state(&self, state: &str) -> Option<(Duration, Duration)> {
        let seen = self.snapshot();
        let mut hits = seen
            .iter()
            .filter(|s| matches!(&s.answer, Ok((_, Some(st))) if st == state));
        let first = hits.next()?.at;
        Some((first, hits.next_back().map_or(first, |s| s.at)))
    }

    /// The states in the order they appeared (each once per run of it).
    pub fn state_sequence(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.snapshot() {
            if let Ok((_, Some(st))) = s.answer {
                if out.last() != Some(&st) {
                    out.push(st);
                }
            }
        }
        out
    }

    /// Waits (polling) until the probe has seen `state`; `None` on timeout.
    pub fn wait_for_state(&self, state: &str, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if let Some((first, _)) = self.seen_state(state) {
                return Some(first);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn stop(mut self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.snapshot()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Seconds since the epoch.
pub fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The guest's clock against the host's: `guest = host + offset`, known to
/// ± `uncertainty` seconds (half the exec's round trip).
#[derive(Debug, Clone, Copy)]
pub struct GuestClock {
    pub offset: f64,
    pub uncertainty: f64,
}

impl GuestClock {
    pub fn measure(conn: &Conn) -> GuestClock {
        let before = unix(SystemTime::now());
        let out = conn.run("date +%s.%N");
        let after = unix(SystemTime::now());
        let guest: f64 = out.trim().parse().expect("date +%s.%N");
        GuestClock {
            offset: guest - (before + after) / 2.0,
            uncertainty: (after - before) / 2.0,
        }
    }

    /// A host instant on the guest's clock.
    pub fn guest_time(&self, host: SystemTime) -> f64 {
        unix(host) + self.offset
    }
}

/// The guest's modification times (`stat -c %.9Y`, of the link itself for a
/// symlink) of `paths`; `None` for a missing one.
pub fn guest_mtimes(conn: &Conn, paths: &[&str]) -> Vec<Option<f64>> {
    let script = paths
        .iter()
        .map(|p| format!("stat -c %.9Y {p} 2>/dev/null || echo missing"))
        .collect::<Vec<_>>()
        .join("; ");
    let out = conn.run(&script);
    out.lines().map(|l| l.trim().parse().ok()).collect()
}

/// A `labctl` child whose stderr is read line by line as it comes (and
/// echoed, for `--nocapture`), stdout collected at the end.
#[derive(Debug)]
pub struct Running {
    pub child: Child,
    lines: Receiver<String>,
    pub stderr: Vec<String>,
    pub started: Instant,
    tag: String,
}

impl Running {
    pub fn spawn(mut cmd: Command, tag: &str) -> Running {
        cmd.env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().expect("spawn labctl");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines: rx,
            stderr: Vec::new(),
            started,
            tag: tag.to_owned(),
        }
    }

    fn take_lines(&mut self, wait: Duration) -> bool {
        match self.lines.recv_timeout(wait) {
            Ok(line) => {
                eprintln!("  [{}] {line}", self.tag);
                self.stderr.push(line);
                while let Ok(line) = self.lines.try_recv() {
                    eprintln!("  [{}] {line}", self.tag);
                    self.stderr.push(line);
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Waits for a stderr line containing `needle`; returns it.
    pub fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.stderr.iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            assert!(
                Instant::now() < deadline,
                "[{}] no {needle:?} on stderr within {timeout:?}:\n{}",
                self.tag,
                self.stderr.join("\n")
            );
            if !self.take_lines(Duration::from_millis(200)) {
                if let Ok(Some(status)) = self.child.try_wait() {
                    // Drain what is left before giving up.
                    while self.take_lines(Duration::from_millis(200)) {}
                    if let Some(l) = self.stderr.iter().find(|l| l.contains(needle)) {
                        return l.clone();
                    }
                    panic!(
                        "[{}] exited ({status}) without {needle:?} on stderr:\n{}",
                        self.tag,
                        self.stderr.join("\n")
                    );
                }
            }
        }
    }

    /// Waits for the child to exit; returns its status code, stdout, the
    /// whole stderr and when it exited.
    pub fn finish(mut self) -> Finished {
        let mut stdout = Vec::new();
        if let Some(mut out) = self.child.stdout.take() {
            std::io::Read::read_to_end(&mut out, &mut stdout).unwrap();
        }
        let status = self.child.wait().unwrap();
        let exited = Instant::now();
        while self.take_lines(Duration::from_millis(200)) {}
        Finished {
            code: status.code(),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: self.stderr.join("\n"),
            took: exited - self.started,
            exited,
        }
    }
}

#[derive(Debug)]
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From spawn to exit.
    pub took: Duration,
    pub exited: Instant,
}

impl std::fmt::Display for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.took, self.stdout, self.stderr
        )
    }
}

/// `s` seconds, for figures.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Cloud-init's own stage banners on a console: `(stage, guest uptime)`
/// for `init-local`, `init`, `modules:config`, `modules:final` and
/// `finished`, in order. Only the last boot on the console counts.
pub fn cloud_init_stages(console: &str) -> Vec<(String, f64)> {
    let boot = console
        .rfind("Linux version")
        .map_or(console, |at| &console[at..]);
    let mut out = Vec::new();
    for line in boot.lines() {
        let Some(at) = line.find("Cloud-init v. ") else {
            continue;
        };
        let rest = &line[at..];
        let stage = if let Some(i) = rest.find("running '") {
            let s = &rest[i + 9..];
            s[..s.find('\'').unwrap_or(s.len())].to_owned()
        } else if rest.contains(" finished at ") {
            "finished".to_owned()
        } else {
            continue;
        };
        let up = rest
            .rfind("Up ")
            .and_then(|i| rest[i + 3..].split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok());
        if let Some(up) = up {
            out.push((stage, up));
        }
    }
    out
}

#[test]
fn stage_banners_are_read_from_the_last_boot() {
    let console = "[0.0] Linux version 6.1\n\
        cloud-init[1]: Cloud-init v. 22.4.2 running 'init-local' at X. Up 50.00 seconds.\n\
        [0.0] Linux version 6.1\n\
        [ 1] cloud-init[2]: Cloud-init v. 22.4.2 running 'init-local' at X. Up 20.50 seconds.\n\
        login: [ 9] cloud-init[3]: Cloud-init v. 22.4.2 running 'modules:final' at X. Up 30.25 seconds.\n\
        Cloud-init v. 22.4.2 finished at X. Datasource DataSourceNoCloud.  Up 31.00 seconds\n";
    assert_eq!(
        cloud_init_stages(console),
        [
            ("init-local".to_owned(), 20.5),
            ("modules:final".to_owned(), 30.25),
            ("finished".to_owned(), 31.0)
        ]
    );
}

/// The wall-clock time of an `Instant` in the past.
pub fn wall(at: Instant) -> SystemTime {
    SystemTime::now() - at.elapsed()
}

/// A test's figures, printed as one table at the end.
#[derive(Debug, Default)]
pub struct Figures {
    rows: Vec<[String; 4]>,
}

impl Figures {
    /// One scenario: from `origin` (what it counts from) to the agent's
    /// first answer and to ready.
    pub fn row(
        &mut self,
        scenario: &str,
        origin: &str,
        answered: Option<Duration>,
        ready: Option<Duration>,
    ) {
        let show = |d: Option<Duration>| d.map_or("-".to_owned(), secs);
        self.rows.push([
            scenario.to_owned(),
            origin.to_owned(),
            show(answered),
            show(ready),
        ]);
    }

    pub fn print(&self, test: &str) {
        let header = ["scenario", "from", "agent answering", "ready"].map(str::to_owned);
        let widths: Vec<usize> = (0..4)
            .map(|i| {
                self.rows
                    .iter()
                    .chain(std::iter::once(&header))
                    .map(|r| r[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |r: &[String; 4]| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            format!("figures[{test}] | {} |", cells.join(" | "))
        };
        eprintln!("{}", line(&header));
        for r in &self.rows {
            eprintln!("{}", line(r));
        }
    }
}

/// "vm: qemu start → agent answered A s → ready R s", as `labctl try` prints it.
pub fn figures_line(stderr: &str) -> (Duration, Duration) {
    let line = stderr
        .lines()
        .find(|l| l.contains("vm: qemu start → agent answered "))
        .unwrap_or_else(|| panic!("no figures line in:\n{stderr}"));
    let nums: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|n| n.trim_end_matches('.').parse().ok())
        .collect();
    assert_eq!(nums.len(), 2, "{line}");
    (
        Duration::from_secs_f64(nums[0]),
        Duration::from_secs_f64(nums[1]),
    )
}

/// The text between the first `start` and the `end` after it.
pub fn between(text: &str, start: &str, end: &str) -> String {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in:\n{text}"))
        + start.len();
    text[at..at + text[at..].find(end).unwrap()].to_owned()
}

/// The JSON object a guest program printed on the serial console between
/// two markers, without what the console interleaves with it: the kernel's
/// lines (`[   72.56] …`, printk and what journald forwards) and systemd's
/// status lines (`[  OK  ] Finished …`), both of which begin with `[`,
/// which no line of a pretty-printed object does. Debian 13's
/// single-process cloud-init prints its ssh host keys there, and systemd
/// its units, while the test's unit prints `result.json`.
pub fn console_json(text: &str) -> String {
    let kept: Vec<&str> = text
        .split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim_start().starts_with('['))
        .collect();
    let kept = kept.join("\n");
    match (kept.find('{'), kept.rfind('}')) {
        (Some(a), Some(b)) if a < b => kept[a..=b].to_owned(),
        _ => kept,
    }
}

#[test]
fn console_lines_are_dropped_around_and_inside_the_json() {
    let console = "\n[\u{1b}[0;32m  OK  \u{1b}[0m] Finished cloud-final.service\r\n{\"v1\": {\r\n\
                   [   72.564227] cloud-init[425]: | o .  |\r\n  \"errors\": []}}\r\n\n";
    assert_eq!(console_json(console), "{\"v1\": {\n  \"errors\": []}}");
}

/// One YAML load cloud-init logged (`util.load_yaml`): how large, and how
/// long until its next log line (the load's duration, to the log's ms).
#[derive(Debug, Clone, PartialEq)]
pub struct YamlLoad {
    pub bytes: usize,
    pub secs: f64,
}

/// The YAML loads in a guest's `/var/log/cloud-init.log`, one list per boot
/// (a boot begins with cloud-init's `init-local` stage).
pub fn yaml_loads(log: &str) -> Vec<Vec<YamlLoad>> {
    // "2026-11-30 22:40:12,345 - util.py[DEBUG]: …": seconds of the day.
    let stamp = |line: &str| -> Option<f64> {
        let time = line.get(11..23)?;
        let (hms, ms) = time.split_once(',')?;
        let mut parts = hms.split(':').map(|p| p.parse::<f64>().ok());
        let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
        Some(h * 3600.0 + m * 60.0 + s + ms.parse::<f64>().ok()? / 1000.0)
    };
    const LOAD: &str = "Attempting to load yaml from string of length ";
    let lines: Vec<&str> = log.lines().collect();
    let mut boots: Vec<Vec<YamlLoad>> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("running 'init-local'") {
            boots.push(Vec::new());
        }
        let (Some(boot), Some(at)) = (boots.last_mut(), line.find(LOAD)) else {
            continue;
        };
        let Some(bytes) = line[at + LOAD.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let next = lines[i + 1..].iter().find_map(|l| stamp(l));
        let secs = match (stamp(line), next) {
            (Some(a), Some(b)) => (b - a).rem_euclid(86_400.0),
            _ => 0.0,
        };
        boot.push(YamlLoad { bytes, secs });
    }
    boots
}

#[test]
fn yaml_loads_are_read_per_boot() {
    let log = "\
2026-11-30 22:40:00,000 - util.py[DEBUG]: Attempting to load yaml from string of length 9 with allowed root types (<class 'dict'>,)
2026-11-30 22:40:01,000 - util.py[DEBUG]: Cloud-init v. 22.4.2 running 'init-local' at Mon. Up 5.0 seconds.
2026-11-30 22:40:02,000 - util.py[DEBUG]: Attempting to load yaml from string of length 1863 with allowed root types (<class 'dict'>,)
2026-11-30 22:40:02,250 - util.py[DEBUG]: Read 12 bytes from /etc/x
2026-11-30 23:59:59,900 - util.py[DEBUG]: Cloud-init v. 22.4.2 running 'init-local' at Mon. Up 4.0 seconds.
2026-11-30 23:59:59,950 - util.py[DEBUG]: Attempting to load yaml from string of length 664000 with allowed root types (<class 'dict'>,)
  a continuation line without a stamp
2026-12-01 00:00:04,450 - util.py[DEBUG]: loaded
";
    let boots = yaml_loads(log);
    assert_eq!(boots.len(), 2);
    assert_eq!(boots[0].len(), 1);
    assert_eq!(boots[0][0].bytes, 1863);
    assert!((boots[0][0].secs - 0.25).abs() < 1e-6, "{boots:?}");
    assert_eq!(boots[1][0].bytes, 664_000);
    assert!((boots[1][0].secs - 4.5).abs() < 1e-6, "{boots:?}");
}
