//! A lab of several VMs (`[[vms]]`) in the sandbox: one sandbox per VM on a
//! private network. Each VM is a machine of its own (its hostname the VM's
//! name, its PID 1, its network namespace), the VMs reach each other by
//! name, each check runs on its VM, `examples/two-vm-lab` passes `try` and
//! `test`, and nothing of the session is left on the machine afterwards:
//! not after a normal end, not after `kill -9` of `labctl` mid-setup (no
//! process, namespace, mount, try dir, network interface).

use super::*;

/// What a session could leave on the machine: the host's network
/// interfaces, its hostname, `/etc/hosts`, its mounts of try dirs.
#[derive(Debug, PartialEq)]
struct Host {
    links: BTreeSet<String>,
    hostname: String,
    hosts: Vec<u8>,
}

impl Host {
    fn now() -> Host {
        Host {
            links: std::fs::read_dir("/sys/class/net")
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
            hosts: std::fs::read("/etc/hosts").unwrap(),
        }
    }
}

/// Every try dir a run staged ("staged `LAB` (VM `NAME`) in `DIR/lab`").
fn staged_dirs(err: &str) -> Vec<PathBuf> {
    err.lines()
        .filter(|l| l.starts_with("staged "))
        .map(staged_dir)
        .collect()
}

fn nothing_left_of(dirs: &[PathBuf]) {
    assert!(!dirs.is_empty());
    for dir in dirs {
        let d = dir.display().to_string();
        assert!(
            eventually(Duration::from_secs(10), || !dir.exists()
                && processes_with(&d).is_empty()),
            "try dir {d} or a process of it left"
        );
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(&d), "a mount of {d} on the host");
    }
}

/// Two VMs; each check prints what it sees, on its VM. `beta`'s setup
/// serves on `port` (all addresses) for `alpha` to reach by name.
fn facts_lab(port: u16) -> TempDir {
    let facts = r#"echo "$(hostname) $LAB_VM [$LAB_VMS] $(readlink /proc/self/ns/pid) $(readlink /proc/self/ns/net) $(readlink /proc/self/ns/uts)""#;
    let lab = lab_folder(
        "sbx-session",
        &format!(
            r#"name = "pair"
profile = "none"
[[vms]]
name = "alpha"
[[vms]]
name = "beta"
setup = "setup-beta.sh"
[[checks]]
name = "alpha's facts"
vm = "alpha"
run = '{facts}'
[[checks]]
name = "beta's facts"
vm = "beta"
run = '{facts}'
[[checks]]
name = "alpha reaches beta by name"
vm = "alpha"
run = 'getent hosts beta && exec 3<>/dev/tcp/beta/{port} && cat <&3'
[[checks]]
name = "beta resolves alpha"
vm = "beta"
run = 'getent hosts alpha'
"#
        ),
    );
    lab.write(
        "setup-beta.sh",
        &format!(
            r#"#!/bin/bash
set -euo pipefail
setsid /usr/bin/python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {port})); s.listen()
while True:
    c = s.accept()[0]; c.sendall(socket.gethostname().encode() + b"\n"); c.close()
' </dev/null >/dev/null 2>&1 &
for i in $(seq 1200); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && exit 0; sleep 0.05; done
exit 1
"#
        ),
        0o755,
    );
    lab
}

#[test]
fn two_vms_are_two_machines_that_find_each_other_by_name() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let host = Host::now();
    let port = 18_473;
    let lab = facts_lab(port);
    let out = try_lab(&lab.path, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v = json(&out);
    let checks = v["checks"].as_array().unwrap();
    let fact = |i: usize| -> Vec<String> {
        let c = &checks[i];
        c["stdout"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let (alpha, beta) = (fact(0), fact(1));
    // Each check on its VM: its hostname and LAB_VM are the VM's.
    assert_eq!(alpha[..3], ["alpha", "alpha", "[alpha"], "{alpha:?}");
    assert_eq!(beta[..3], ["beta", "beta", "[alpha"], "{beta:?}");
    assert_eq!(checks[0]["vm"], "alpha");
    assert_eq!(checks[1]["vm"], "beta");
    // Separate machines: PID, network and UTS namespaces of their own,
    // and none of them the host's.
    for (i, ns) in ["pid", "net", "uts"].iter().enumerate() {
        let (a, b) = (&alpha[4 + i], &beta[4 + i]);
        assert_ne!(a, b, "{ns}: {alpha:?} {beta:?}");
        let mine = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        assert_ne!(a, &mine.display().to_string(), "{ns}");
    }
    // By name, across the private network: beta's service answers alpha
    // with beta's hostname; and names resolve both ways.
    let reach = checks[2]["stdout"].as_str().unwrap();
    assert!(
        reach.starts_with("10.89.0.3") && reach.ends_with("beta\n"),
        "{reach}"
    );
    assert!(
        checks[3]["stdout"]
            .as_str()
            .unwrap()
            .starts_with("10.89.0.2"),
        "{}",
        checks[3]
    );
    assert_eq!(v["passed"], 4, "{v}");
    // Each VM's changes, by name.
    assert!(v["changes"]["alpha"]["added"].is_array(), "{v}");
    assert!(v["changes"]["beta"]["added"].is_array(), "{v}");

    assert_eq!(Host::now(), host, "the machine changed");
    assert!(!listening_ports().contains(&port));
    let dirs = staged_dirs(&stderr(&out));
    assert_eq!(dirs.len(), 2, "{}", stderr(&out));
    nothing_left_of(&dirs);
}

#[test]
fn the_two_vm_example_tries_and_tests() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let host = Host::now();
    let lab = repo_root().join("examples/two-vm-lab");

    // Before the student's step: the service runs on server, and client
    // cannot reach it yet (refused: the name resolves, the port is closed).
    let tried = try_lab(&lab, &["--json"]);
    assert_eq!(tried.status.code(), Some(1), "{}", describe(&tried));
    let v = json(&tried);
    let checks = v["checks"].as_array().unwrap();
    let on: Vec<(&str, &str)> = checks
        .iter()
        .map(|c| (c["vm"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        on,
        [
            ("server", "passed"),
            ("server", "failed"),
            ("client", "failed")
        ]
    );
    assert!(
        checks[2]["stderr"]
            .as_str()
            .unwrap()
            .contains("Connection refused"),
        "{}",
        checks[2]
    );
    nothing_left_of(&staged_dirs(&stderr(&tried)));

    let mut args = try_args(&lab, &["--json"]);
    args[0] = "test".into();
    let tested = labctl(args);
    assert_eq!(tested.status.code(), Some(0), "{}", describe(&tested));
    assert_eq!(json(&tested)["ok"], true);
    assert!(
        stderr(&tested).contains("solve on VM `server`"),
        "{}",
        describe(&tested)
    );
    nothing_left_of(&staged_dirs(&stderr(&tested)));
    assert_eq!(Host::now(), host, "the machine changed");
}

/// The namespaces (`ns:[INODE]`) process `pid` is in, and those its
/// descriptors hold.
fn namespaces_of(pid: u32) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for ns in ["net", "mnt", "pid", "uts", "ipc"] {
        if let Ok(l) = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")) {
            out.insert(l.display().to_string());
        }
    }
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(l) = std::fs::read_link(e.path()) {
            let l = l.display().to_string();
            if l.starts_with("net:[") {
                out.insert(l);
            }
        }
    }
    out
}

/// Every namespace any process is in or holds.
fn all_namespaces() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() {
            out.extend(namespaces_of(pid));
        }
    }
    out
}

/// Children of `parent` (their PIDs).
fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn kill_9_of_labctl_mid_session_leaves_nothing() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let host = Host::now();
    let tag = "session-kill";
    let lab = lab_folder(
        "sbx-session-kill",
        r#"name = "stalls"
profile = "none"
[setup]
script = "setup.sh"
[[vms]]
name = "one"
[[vms]]
name = "two"
[[checks]]
name = "x"
vm = "one"
run = "true"
"#,
    );
    lab.write(
        "setup.sh",
        &format!(
            "#!/bin/bash\nsetsid bash -c \"exec -a sbx-stall-{tag}-$LAB_VM sleep 1000\" </dev/null >/dev/null 2>&1 &\n\
             echo x > /etc/labctl-sbx-{tag}\nsleep 600\n"
        ),
        0o755,
    );
    let mut child = spawn_try(&lab.path, &[]);
    let labctl_pid = child.0.id();
    let markers = [
        format!("sbx-stall-{tag}-one"),
        format!("sbx-stall-{tag}-two"),
    ];
    assert!(
        eventually(Duration::from_secs(120), || markers
            .iter()
            .all(|m| !processes_with(m).is_empty())),
        "the setups never started"
    );
    // The session's namespaces: each keeper's, and the switch's, which
    // only labctl's descriptor holds.
    let keepers = children_of(labctl_pid);
    assert_eq!(keepers.len(), 2, "a keeper per VM");
    let mut ours: BTreeSet<String> = keepers.iter().flat_map(|k| namespaces_of(*k)).collect();
    let mine = namespaces_of(std::process::id());
    ours.extend(namespaces_of(labctl_pid));
    let ours: BTreeSet<String> = ours.difference(&mine).cloned().collect();
    assert!(
        ours.iter().filter(|n| n.starts_with("net:[")).count() >= 3,
        "two VMs' and the switch's: {ours:?}"
    );
    let dirs: Vec<PathBuf> = keepers
        .iter()
        .map(|k| {
            let cmdline = std::fs::read(format!("/proc/{k}/cmdline")).unwrap();
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let i = args.iter().position(|a| a == "--dir").unwrap();
            PathBuf::from(&args[i + 1])
        })
        .collect();

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(labctl_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.0.wait();
    nothing_left_of(&dirs);
    assert!(
        eventually(Duration::from_secs(10), || markers
            .iter()
            .all(|m| processes_with(m).is_empty())),
        "a setup's process outlived labctl"
    );
    assert!(
        eventually(Duration::from_secs(10), || all_namespaces()
            .is_disjoint(&ours)),
        "a namespace of the session is still held: {:?}",
        all_namespaces().intersection(&ours).collect::<Vec<_>>()
    );
    assert!(!Path::new(&format!("/etc/labctl-sbx-{tag}")).exists());
    assert_eq!(Host::now(), host, "the machine changed");
}

#[test]
fn what_a_session_does_not_do_is_refused_saying_what_does() {
    let _shells = sandboxed();
    require_root("`labctl try` without `--vm`");
    let lab = repo_root().join("examples/two-vm-lab");
    for (extra, says) in [
        (
            vec!["--host"],
            "`--host` would run every VM's setup on this one machine",
        ),
        (
            vec!["--keep"],
            "`--keep` keeps a session's VMs under qemu (`--vm IMAGE`), not its sandboxes",
        ),
        (
            vec!["--keep-going"],
            "a session is graded only when every VM is ready",
        ),
    ] {
        let out = try_lab(&lab, &extra);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains("lab `two-vm-lab` has several VMs (server, client)") && err.contains(says),
            "{extra:?}: {err}"
        );
        assert!(!err.contains("staged "), "nothing started: {err}");
    }
}
