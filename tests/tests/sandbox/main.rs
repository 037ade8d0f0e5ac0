//! `labctl try`'s sandbox, with the real `labctl` and `lab-agent`: a lab
//! that does what real labs do (users, groups, files under /etc, /usr/local,
//! /var and /root, a removed file, a daemon on a port with a detached
//! child, a new hostname) leaves this machine exactly as it was, `--changes`
//! lists exactly those writes, and nothing survives the end of a try: a
//! normal one, `--keep` then `--stop`, Ctrl-C during setup, `kill -9` of
//! `labctl`. Needs root, as CI has it (fails otherwise, saying so, as
//! `labctl try` without `--vm` refuses).
//!
//! Only one test runs a lab with `--host`, and that lab writes nothing
//! outside its own `$LAB_DIR` (a temp dir `labctl` removes): that test
//! changes nothing on the machine either.
//!
//! Every test that runs a sandbox lives in this binary, because of
//! [`HOST_SHELLS`]; `try_lab` and `as_author` hold `try` as an author meets it.

use lab_agent_tests::local::{
    HELLO_LAB_BEFORE_THE_STEP, ReservedPort, TempDir, agent_bin, check_outcomes, describe, labctl,
    labctl_bin, require_root,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

mod as_author;
mod author_loop;
mod image;
mod session;
mod test_lab;
mod try_lab;

/// A login shell of root's on this machine and one inside a sandbox must not
/// run at the same time. The sandbox sees the machine's files through an
/// overlay, and a file the machine creates and removes while a sandbox looks
/// it up stays visible inside (overlayfs caches the lookup; README, "What the
/// sandbox cannot isolate"). Root's profile on our CI machines runs `pyenv
/// rehash`, whose lock file is such a file: a sandboxed login shell that met
/// it waited out pyenv's 60 s and its check timed out (CI, 2026-12-01). So
/// the one test that runs shells on the machine (`--host`) takes this alone,
/// every other test shares it; other test binaries run before or after this
/// one, never beside it.
static HOST_SHELLS: RwLock<()> = RwLock::new(());

fn sandboxed() -> RwLockReadGuard<'static, ()> {
    HOST_SHELLS.read().unwrap_or_else(PoisonError::into_inner)
}

fn host_shells_alone() -> RwLockWriteGuard<'static, ()> {
    HOST_SHELLS.write().unwrap_or_else(PoisonError::into_inner)
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A lab folder holding this `lab.toml`; a test adds what else it needs.
fn lab_folder(tag: &str, lab_toml: &str) -> TempDir {
    let dir = TempDir::new(tag);
    dir.write("lab.toml", lab_toml, 0o644);
    dir
}

fn try_lab(lab: &Path, extra: &[&str]) -> std::process::Output {
    labctl(try_args(lab, extra))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

const USER: &str = "labctl-sbx-user";
const GROUP: &str = "labctl-sbx-group";
const HOSTNAME: &str = "labctl-sbx-host";

fn try_args(lab: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "try".to_owned(),
        lab.display().to_string(),
        "--agent".into(),
        agent_bin().display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(out)))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// PIDs of processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmdline).contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// Polls until `done` or `within` passes; false on timeout.
fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// The host's listening TCP ports (this network namespace's).
fn listening_ports() -> BTreeSet<u16> {
    let mut ports = BTreeSet::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.get(3) == Some(&"0A") {
                if let Some(port) = cols[1].rsplit(':').next() {
                    ports.insert(u16::from_str_radix(port, 16).unwrap());
                }
            }
        }
    }
    ports
}

/// The try dir of `labctl try` process `labctl`: its sandbox keeper's
/// `--dir` (the keeper is its child).
fn try_dir_of(labctl: u32) -> Option<PathBuf> {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid != Some(labctl) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if let Some(i) = args.iter().position(|a| a == "--dir") {
            return args.get(i + 1).map(PathBuf::from);
        }
    }
    None
}

/// The try dir a run used, from its "staged … in `DIR/lab`" line.
fn staged_dir(err: &str) -> PathBuf {
    let start = err.find(" in `").expect("a staged line") + 5;
    let end = start + err[start..].find('`').unwrap();
    PathBuf::from(&err[start..end]).parent().unwrap().to_owned()
}

/// A file of the machine's that the lab removes inside; gone afterwards.
struct Victim(PathBuf);

impl Victim {
    fn new(tag: &str) -> Victim {
        let p = PathBuf::from(format!("/etc/labctl-sbx-victim-{tag}"));
        std::fs::write(&p, "the machine's own\n").unwrap();
        Victim(p)
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The lab real labs look like. `tag` names its marker processes and
/// paths; the daemon listens on `port`.
fn busy_lab(tag: &str, port: u16, victim: &Path) -> TempDir {
    let lab = TempDir::new(&format!("sbx-{tag}"));
    lab.write(
        "lab.toml",
        &format!(
            r#"name = "busy"
[setup]
script = "setup.sh"
[files]
source = "files"
[[checks]]
name = "user and group"
run = "id -u {USER} && getent group {GROUP}"
[[checks]]
name = "files"
run = "test -f /etc/labctl-sbx-{tag}.conf && test -f /usr/local/share/labctl-sbx-{tag}/data && test -f /var/lib/labctl-sbx-{tag}/state && test -f /root/labctl-sbx-{tag} && ! test -e {victim}"
[[checks]]
name = "daemon"
run = "exec 3<>/dev/tcp/127.0.0.1/{port} && pgrep -f sbx-child-{tag}"
[[checks]]
name = "hostname"
run = "test \"$(hostname)\" = {HOSTNAME}"
[[checks]]
name = "kernel sysctls are read-only, the network's own are not"
run = "! sh -c 'echo 1 > /proc/sys/vm/overcommit_memory' 2>/dev/null && echo 1 > /proc/sys/net/ipv4/ip_forward"
[[checks]]
name = "no disk device can be made"
run = "! mknod /tmp/disk b 7 0 2>/dev/null"
"#,
            victim = victim.display()
        ),
        0o644,
    );
    lab.write("files/port", &port.to_string(), 0o644);
    lab.write(
        "setup.sh",
        &format!(
            r#"#!/bin/bash
set -euo pipefail
groupadd {GROUP}
useradd --create-home -g {GROUP} {USER}
echo conf > /etc/labctl-sbx-{tag}.conf
mkdir -p /usr/local/share/labctl-sbx-{tag} && echo data > /usr/local/share/labctl-sbx-{tag}/data
mkdir -p /var/lib/labctl-sbx-{tag} && echo state > /var/lib/labctl-sbx-{tag}/state
echo note > /root/labctl-sbx-{tag}
rm {victim}
# what `systemctl enable` leaves (there is no systemd to ask)
printf '[Service]\nExecStart=/bin/true\n' > /etc/systemd/system/labctl-sbx-{tag}.service
mkdir -p /etc/systemd/system/multi-user.target.wants
ln -s /etc/systemd/system/labctl-sbx-{tag}.service /etc/systemd/system/multi-user.target.wants/
# a daemon on a port, which forks a detached child, as services do
port=$(cat "$LAB_DIR/port")
setsid /usr/bin/python3 -c '
import os, socket, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sbx-child-{tag}", "1000"])
    os._exit(0)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
while True:
    s.accept()[0].close()
' "$port" sbx-daemon-{tag} </dev/null >/dev/null 2>&1 &
for i in $(seq 1200); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
hostname {HOSTNAME}
"#,
            victim = victim.display()
        ),
        0o755,
    );
    lab
}

/// What a busy lab must not leave on the machine.
#[derive(Debug, PartialEq)]
struct Snapshot {
    passwd: Vec<u8>,
    group: Vec<u8>,
    hostname: String,
    victim: Vec<u8>,
    written: Vec<bool>,
    port_listens: bool,
}

fn snapshot(tag: &str, port: u16, victim: &Path) -> Snapshot {
    let written = [
        format!("/etc/labctl-sbx-{tag}.conf"),
        format!("/usr/local/share/labctl-sbx-{tag}"),
        format!("/var/lib/labctl-sbx-{tag}"),
        format!("/root/labctl-sbx-{tag}"),
        format!("/home/{USER}"),
        format!("/etc/systemd/system/labctl-sbx-{tag}.service"),
    ];
    Snapshot {
        passwd: std::fs::read("/etc/passwd").unwrap(),
        group: std::fs::read("/etc/group").unwrap(),
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        victim: std::fs::read(victim).unwrap(),
        written: written.iter().map(|p| Path::new(p).exists()).collect(),
        port_listens: listening_ports().contains(&port),
    }
}

#[test]
fn a_busy_lab_leaves_the_machine_as_it_was_and_lists_its_changes() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let tag = "busy";
    let victim = Victim::new(tag);
    // Held (bound, not listening) on the host; inside, the lab's daemon
    // listens on it.
    let reserved = ReservedPort::new();
    let port = reserved.port;
    let lab = busy_lab(tag, port, &victim.0);
    let before = snapshot(tag, port, &victim.0);
    assert_eq!(before.written, [false; 6], "a leftover of an earlier run");

    let out = labctl(try_args(&lab.path, &["--json", "--changes"]));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["passed"], 6, "the setup did everything, inside: {v}");

    assert_eq!(snapshot(tag, port, &victim.0), before);
    assert!(
        processes_with(&format!("sbx-child-{tag}")).is_empty()
            && processes_with(&format!("sbx-daemon-{tag}")).is_empty(),
        "a process of the lab outlived the try"
    );
    let dir = staged_dir(&String::from_utf8_lossy(&out.stderr));
    assert!(!dir.exists(), "try dir removed");

    let c = &v["changes"];
    assert_eq!(strings(&c["removed"]), [victim.0.display().to_string()]);
    assert_eq!(strings(&c["users_added"]), [USER]);
    assert_eq!(strings(&c["groups_added"]), [GROUP]);
    assert_eq!(
        strings(&c["services_enabled"]),
        [format!("labctl-sbx-{tag}.service")]
    );
    let mut expected: BTreeSet<String> = [
        format!("/etc/labctl-sbx-{tag}.conf"),
        format!("/usr/local/share/labctl-sbx-{tag}"),
        format!("/usr/local/share/labctl-sbx-{tag}/data"),
        format!("/var/lib/labctl-sbx-{tag}"),
        format!("/var/lib/labctl-sbx-{tag}/state"),
        format!("/root/labctl-sbx-{tag}"),
        format!("/etc/systemd/system/labctl-sbx-{tag}.service"),
        format!("/etc/systemd/system/multi-user.target.wants/labctl-sbx-{tag}.service"),
        format!("/home/{USER}"),
    ]
    .into();
    // `useradd --create-home` copies /etc/skel.
    for e in std::fs::read_dir("/etc/skel")
        .into_iter()
        .flatten()
        .flatten()
    {
        expected.insert(format!("/home/{USER}/{}", e.file_name().to_string_lossy()));
    }
    if !Path::new("/etc/systemd/system/multi-user.target.wants").exists() {
        expected.insert("/etc/systemd/system/multi-user.target.wants".into());
    }
    // useradd's databases, and the backups (`FILE-`) it writes beside each:
    // a backup is added where the machine had none yet (a fresh image's
    // `/etc/subuid` without `/etc/subuid-`), changed where it had one.
    const USERADD_FILES: [&str; 6] = [
        "/etc/passwd",
        "/etc/group",
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/subuid",
        "/etc/subgid",
    ];
    let added: BTreeSet<String> = strings(&c["added"])
        .into_iter()
        .filter(|f| !(f.ends_with('-') && USERADD_FILES.contains(&f.trim_end_matches('-'))))
        .collect();
    assert_eq!(added, expected);
    // useradd's own files, and nothing else: no agent state, no /tmp.
    let changed = strings(&c["changed"]);
    for f in ["/etc/passwd", "/etc/group"] {
        assert!(changed.iter().any(|c| c == f), "{f} not in {changed:?}");
    }
    for f in &changed {
        let base = f.trim_end_matches('-');
        assert!(
            USERADD_FILES.contains(&base),
            "unexpected change {f}: {changed:?}"
        );
    }
}

#[test]
fn host_and_sandbox_grade_alike() {
    let _shells = host_shells_alone();
    require_root("`labctl try` without `--vm`");
    // Harmless with `--host` too: it writes only in its `$LAB_DIR`, which
    // `labctl` removes. Its least root (1 EiB) is a VM's matter: not
    // checked here, and said so.
    let lab = TempDir::new("sbx-alike");
    lab.write(
        "lab.toml",
        r#"name = "alike"
[setup]
script = "setup.sh"
[readiness]
min_root_bytes = 1152921504606846976
[[checks]]
name = "setup wrote its file"
run = 'test "$(cat "$LAB_DIR/made")" = made'
[[checks]]
name = "fails with output"
run = "echo out; echo err >&2; exit 3"
fail_message = "it fails"
[[checks]]
name = "runs as root"
run = "id -un"
[[checks]]
name = "as nobody"
run = "id -un"
user = "nobody"
[[checks]]
name = "no such user"
run = "true"
user = "labctl-sbx-nosuchuser"
"#,
        0o644,
    );
    lab.write("setup.sh", "echo made > \"$LAB_DIR/made\"\n", 0o755);
    let sandbox = labctl(try_args(&lab.path, &["--json"]));
    let host = labctl(try_args(&lab.path, &["--json", "--host"]));
    assert_eq!(sandbox.status.code(), Some(5), "{}", describe(&sandbox));
    assert_eq!(
        host.status.code(),
        sandbox.status.code(),
        "{}",
        describe(&host)
    );
    for out in [&sandbox, &host] {
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(
                "note: [readiness] min_root_bytes (1073741824.0 GiB) is checked in VMs only (`--vm IMAGE`): not here"
            ),
            "{}",
            describe(out)
        );
    }
    assert!(
        String::from_utf8_lossy(&host.stderr).contains("warning: `--host`"),
        "{}",
        describe(&host)
    );
    let (s, h) = (json(&sandbox), json(&host));
    let view = |v: &Value| -> Vec<Value> {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                serde_json::json!([
                    c["name"],
                    c["status"],
                    c["exit_code"],
                    c["stdout"],
                    c["stderr"],
                    c["points"],
                    c["fail_message"],
                    c["error"]
                ])
            })
            .collect()
    };
    assert_eq!(view(&s), view(&h));
    for k in ["passed", "failed", "errors", "total", "score", "max_score"] {
        assert_eq!(s[k], h[k], "{k}");
    }
    assert_eq!(h.get("changes"), None, "no sandbox, no changes");
    assert_eq!(
        s["changes"]["added"].as_array().map(Vec::len),
        Some(0),
        "{}",
        s["changes"]
    );
}

/// A lab whose setup starts a marker process, then waits for `go`.
fn stalling_lab(tag: &str) -> TempDir {
    let lab = TempDir::new(&format!("sbx-{tag}"));
    lab.write(
        "lab.toml",
        "name = \"stall\"\n[setup]\nscript = \"setup.sh\"\n[[checks]]\nname = \"x\"\nrun = \"true\"\n",
        0o644,
    );
    lab.write(
        "setup.sh",
        &format!(
            "#!/bin/bash\nsetsid bash -c 'exec -a sbx-stall-{tag} sleep 1000' </dev/null >/dev/null 2>&1 &\n\
             echo {tag} > /etc/labctl-sbx-{tag}\nsleep 600\n"
        ),
        0o755,
    );
    lab
}

/// A running `labctl try`, killed if the test fails first.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_try(lab: &Path, extra: &[&str]) -> Running {
    Running(
        Command::new(labctl_bin())
            .args(try_args(lab, extra))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn ends_with_nothing_left(tag: &str, signal: nix::sys::signal::Signal, code: Option<i32>) {
    let lab = stalling_lab(tag);
    let mut child = spawn_try(&lab.path, &[]);
    let marker = format!("sbx-stall-{tag}");
    assert!(
        eventually(Duration::from_secs(120), || !processes_with(&marker)
            .is_empty()),
        "the setup never started"
    );
    let dir = try_dir_of(child.0.id()).expect("the sandbox keeper is labctl's child");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.0.id() as i32), signal).unwrap();
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        eventually(Duration::from_secs(10), || processes_with(&marker)
            .is_empty()
            && processes_with(&dir.display().to_string()).is_empty()
            && !dir.exists()),
        "left: processes {:?}, dir exists {}",
        processes_with(&marker),
        dir.exists()
    );
    assert!(!Path::new(&format!("/etc/labctl-sbx-{tag}")).exists());
}

#[test]
fn ctrl_c_during_setup_leaves_nothing() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    ends_with_nothing_left("int", nix::sys::signal::Signal::SIGINT, Some(130));
}

#[test]
fn kill_9_of_labctl_leaves_nothing() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    ends_with_nothing_left("kill", nix::sys::signal::Signal::SIGKILL, None);
}

#[test]
fn keep_then_enter_then_stop() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let tag = "keep";
    let lab = TempDir::new("sbx-keep");
    lab.write(
        "lab.toml",
        "name = \"kept\"\n[setup]\nscript = \"setup.sh\"\n[[checks]]\nname = \"x\"\nrun = \"true\"\n",
        0o644,
    );
    lab.write(
        "setup.sh",
        &format!(
            "#!/bin/bash\nsetsid bash -c 'exec -a sbx-kept-{tag} sleep 1000' </dev/null >/dev/null 2>&1 &\n\
             echo inside > /etc/labctl-sbx-{tag}\nhostname {HOSTNAME}\n"
        ),
        0o755,
    );
    let out = labctl(try_args(&lab.path, &["--keep"]));
    let err = String::from_utf8_lossy(&out.stderr);
    let dir = staged_dir(&err);
    // Stops the kept sandbox if an assertion fails first.
    struct Stop(PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            if self.0.exists() {
                let _ = labctl([Path::new("try"), Path::new("--stop"), &self.0]);
            }
        }
    }
    let _stop = Stop(dir.clone());
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        err.contains(&format!("try --stop {}", dir.display())),
        "{err}"
    );
    assert!(err.contains("nsenter --target "), "{err}");
    // labctl is gone; the sandbox is not.
    assert_eq!(processes_with(&format!("sbx-kept-{tag}")).len(), 1);

    let d = dir.display().to_string();
    let entered = labctl([
        "try",
        "--enter",
        &d,
        "--",
        "sh",
        "-c",
        &format!("cat /etc/labctl-sbx-{tag}; hostname; echo $$"),
    ]);
    assert_eq!(entered.status.code(), Some(0), "{}", describe(&entered));
    let text = String::from_utf8_lossy(&entered.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..2], ["inside", HOSTNAME], "{text}");
    assert!(
        lines[2].parse::<u32>().unwrap() < 1000,
        "in the sandbox's PID namespace: {text}"
    );
    let status = labctl(["try", "--enter", &d, "--", "sh", "-c", "exit 7"]);
    assert_eq!(status.status.code(), Some(7), "the command's status");
    assert!(!Path::new(&format!("/etc/labctl-sbx-{tag}")).exists());

    let stopped = labctl(["try", "--stop", &d]);
    assert_eq!(stopped.status.code(), Some(0), "{}", describe(&stopped));
    assert!(!dir.exists());
    assert!(eventually(Duration::from_secs(5), || processes_with(
        &format!("sbx-kept-{tag}")
    )
    .is_empty()
        && processes_with(&d).is_empty()));
    let again = labctl(["try", "--enter", &d]);
    assert_eq!(again.status.code(), Some(2), "{}", describe(&again));
}

#[test]
fn a_lab_that_needs_systemd_is_told_to_use_a_vm() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let lab = TempDir::new("sbx-systemd");
    lab.write(
        "lab.toml",
        "name = \"svc\"\n[setup]\nscript = \"setup.sh\"\n[[checks]]\nname = \"x\"\nrun = \"true\"\n",
        0o644,
    );
    lab.write(
        "setup.sh",
        "#!/bin/bash\nset -e\nsystemctl restart labctl-sbx-nothing.service\n",
        0o755,
    );
    let out = labctl(try_args(&lab.path, &[]));
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the setup script `setup.sh` calls `systemctl`") && err.contains("--vm IMAGE"),
        "{err}"
    );
}
