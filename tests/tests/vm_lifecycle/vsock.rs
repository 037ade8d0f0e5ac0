//! Grading that the student's network cannot break: hello-lab on a guest
//! with a real virtio-vsock device (qemu's `vhost-user-vsock-pci` on
//! rust-vmm's `vhost-device-vsock`), reached over the guest's vsock: through
//! the device's hybrid socket (`vsock+unix://`) and through the KubeVirt
//! stand-in (`lab_agent_tests::relay`) relaying to that same real vsock
//! (`kubevirt://`). One boot per guest:
//!
//! 1. the payload of `labctl secret --channel vsock`: ready and graded over
//!    vsock, directly and through the KubeVirt stand-in; nothing listens
//!    on TCP in the guest (`ss -ltn`) and the TCP port forward never
//!    answers;
//! 2. the unit as `--channel both` renders it (its `ExecStart`, the agent
//!    restarted): TCP answers too;
//! 3. the student (root) firewalls and unplugs the network, as
//!    `iptables -P INPUT DROP; iptables -P OUTPUT DROP; ip link set NIC
//!    down` would: the images have neither iptables nor nft, so `tc`
//!    (iproute2's, in every image) drops every packet of the NIC both
//!    ways, then `ip link set NIC down` and `ip route flush dev NIC`: over
//!    TCP the backend's call fails as unreachable; over vsock `/v1/ready`
//!    and grading still answer, and the lab's network check fails, named
//!    (a failure, not an error);
//! 4. the student reboots: once the guest is back (over TCP, the network
//!    restored by the reboot), the agent answers over vsock again, ready
//!    and graded;
//! 5. exec round trips of `true` over TCP, vsock and the KubeVirt stand-in
//!    on the same guest, side by side (printed; `BENCHMARKS.md`).

use crate::support::*;
use lab_agent_client::{Client, KubeApi};
use lab_agent_proto::ExecRequest;
use lab_agent_proto::exec::Profile;
use lab_agent_tests::local::{TempDir, check_outcomes, describe, labctl_bin};
use lab_agent_tests::relay::kubevirt::Account;
use lab_agent_tests::relay::{GuestVsock, KubevirtStandIn, StandInVmi};
use lab_agent_tests::vm::{BootOptions, GuestOs, Vm};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

per_guest!(vsock_survives_the_student_s_network);

/// The check hello-lab gets here: the one a student's firewall breaks (a
/// NIC up, and an IPv4 route through it: the tests' network has no
/// gateway, `restrict=on`).
const NETWORK_CHECK: &str = r#"
[[checks]]
name = "the network is up"
run = "ip -o link show | grep -v ' lo:' | grep -q 'state UP' && ip -4 route show | grep -q ."
initially = "pass"
fail_message = "The VM's network is down."
"#;

/// The unit's command line as each channel renders it.
const SERVE_VSOCK: &str = "ExecStart=/usr/local/bin/lab-agent serve --listen vsock:8899";
const SERVE_BOTH: &str =
    "ExecStart=/usr/local/bin/lab-agent serve --listen 0.0.0.0:8899 --listen vsock:8899";

/// Execs of `true` per channel in the round-trip figures.
const ROUND_TRIPS: usize = 40;

fn vsock_survives_the_student_s_network(guest: GuestOs) {
    let image = image(guest);
    let name = format!("vm-vsock-{guest}");
    let dir = TempDir::new("vm-vsock");
    let lab = dir.join("hello-lab");
    copy_lab(&repo_root().join("examples/hello-lab"), &lab);
    let toml = std::fs::read_to_string(lab.join("lab.toml")).unwrap();
    std::fs::write(lab.join("lab.toml"), format!("{toml}{NETWORK_CHECK}")).unwrap();
    let lab_arg = lab.to_str().unwrap();

    // ── 1. `--channel vsock` ──────────────────────────────────────────────
    let user_data = dir.join("user-data");
    let token_file = dir.join("token");
    let out = Command::new(labctl_bin())
        .args([
            "secret",
            lab_arg,
            "--name",
            "vm-vsock",
            "--channel",
            "vsock",
        ])
        .arg("--agent")
        .arg(static_agent())
        .arg("--user-data-out")
        .arg(&user_data)
        .arg("--token-out")
        .arg(&token_file)
        .arg("-o")
        .arg(dir.join("secret.yaml"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "labctl secret: {}", describe(&out));
    let user_data = std::fs::read(&user_data).unwrap();
    assert!(String::from_utf8_lossy(&user_data).contains(SERVE_VSOCK));
    let vm = Vm::boot(
        &image,
        BootOptions {
            vsock: true,
            ..BootOptions::new(&name, user_data)
        },
    )
    .expect("qemu starts");
    let vsock = Conn {
        url: vm.vsock_url().expect("the guest has a vsock device"),
        token_file: token_file.clone(),
    };
    let tcp = Conn {
        url: vm.agent_url(),
        token_file: token_file.clone(),
    };
    let waited = Running::spawn(
        vsock.command("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]),
        "wait over vsock",
    )
    .finish();
    assert_eq!(waited.code, Some(0), "labctl wait over vsock: {waited}");
    let t_ready = waited.exited - vm.started_at();

    let journal = || vsock.run("journalctl -u lab-agent.service --no-pager -o cat");
    let listening = journal();
    assert!(
        listening.contains("listening addr=vsock:8899 "),
        "{listening}"
    );
    assert!(!listening.contains("no vsock"), "{listening}");
    let sockets = vsock.run("ss -Htlnp");
    assert!(
        !sockets.contains(":8899") && !sockets.contains("lab-agent"),
        "the agent listens on TCP: {sockets}"
    );
    let never = tcp.labctl("wait", &["--timeout", "15"]);
    assert_eq!(never.status.code(), Some(3), "{}", describe(&never));

    let grade = |conn: &Conn, extra: &[&str]| -> (Option<i32>, Value) {
        let mut args = vec!["--json"];
        args.extend(extra);
        let mut cmd = conn.command("grade", &[]);
        cmd.arg(lab_arg).args(&args);
        let out = cmd.output().unwrap();
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("grade --json: {e}: {}", describe(&out)));
        (out.status.code(), report)
    };
    let mut before: Vec<(&str, bool)> = lab_agent_tests::local::HELLO_LAB_BEFORE_THE_STEP.to_vec();
    before.push(("the network is up", true));
    let (code, report) = grade(&vsock, &[]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(check_outcomes(&report), before, "{report}");

    // Through KubeVirt's relay, as its source says it relays, to the
    // guest's real vsock.
    let k = KubevirtStandIn::start(
        &dir.path,
        vec![StandInVmi::running(
            "labs",
            &name,
            GuestVsock::Hybrid(vm.paths().vsock.clone()),
        )],
        vec![Account {
            token: "grader-token".into(),
            user: "system:serviceaccount:lab-backend:grader".into(),
            vsock_in: vec!["labs".into()],
        }],
        None,
    );
    let api_token = dir.write("api-token", "grader-token\n", 0o600);
    let kube = [
        "--kube-server".to_owned(),
        k.server(),
        "--kube-token-file".to_owned(),
        api_token.display().to_string(),
        "--kube-ca-file".to_owned(),
        k.certs().ca.display().to_string(),
    ];
    let kube: Vec<&str> = kube.iter().map(String::as_str).collect();
    let kubevirt = Conn {
        url: format!("kubevirt://labs/{name}"),
        token_file: token_file.clone(),
    };
    let (code, report) = grade(&kubevirt, &kube);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(
        check_outcomes(&report),
        before,
        "through KubeVirt: {report}"
    );
    let mut args = kube.clone();
    args.extend(["--", "echo relayed; hostname"]);
    let out = kubevirt.labctl("exec", &args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("relayed\n"));

    // ── 2. The unit of `--channel both` ───────────────────────────────────
    vsock.run(&format!(
        "sed -i 's|^{SERVE_VSOCK}$|{SERVE_BOTH}|' /etc/systemd/system/lab-agent.service && \
         grep -qxF '{SERVE_BOTH}' /etc/systemd/system/lab-agent.service && \
         systemctl daemon-reload && \
         systemd-run --no-block --on-active=1 --unit=lab-test-restart systemctl restart lab-agent"
    ));
    let both = tcp.labctl("wait", &["--timeout", "120"]);
    assert_eq!(both.status.code(), Some(0), "{}", describe(&both));
    let listening = journal();
    assert!(
        listening.contains("listening addr=0.0.0.0:8899,vsock:8899 "),
        "{listening}"
    );
    let (code, report) = grade(&tcp, &[]);
    assert_eq!((code, check_outcomes(&report)), (Some(1), before.clone()));

    // ── 3. The student locks the door ─────────────────────────────────────
    let nic = vsock.run("ls /sys/class/net | grep -vx lo | head -n1");
    let nic = nic.trim();
    assert!(!nic.is_empty(), "no NIC in the guest");
    vsock.run(&format!(
        "tc qdisc add dev {nic} clsact && \
         tc filter add dev {nic} ingress matchall action drop && \
         tc filter add dev {nic} egress matchall action drop && \
         ip link set {nic} down && ip route flush dev {nic}"
    ));
    let cut = tcp.labctl("wait", &["--timeout", "15"]);
    assert_eq!(
        cut.status.code(),
        Some(3),
        "TCP after the firewall: {}",
        describe(&cut)
    );
    let cut_err = String::from_utf8_lossy(&cut.stderr);
    assert!(cut_err.contains("never answered"), "{cut_err}");
    let still = vsock.labctl("wait", &["--timeout", "30"]);
    assert_eq!(still.status.code(), Some(0), "{}", describe(&still));
    let (code, report) = grade(&vsock, &[]);
    let mut cut_off = before.clone();
    cut_off.last_mut().unwrap().1 = false;
    assert_eq!(code, Some(1), "a failed check, not an error: {report}");
    assert_eq!(check_outcomes(&report), cut_off, "{report}");
    let network = &report["checks"][4];
    assert_eq!(network["status"], "failed", "{report}");
    assert_eq!(
        network["fail_message"], "The VM's network is down.",
        "{report}"
    );
    let (code, report) = grade(&kubevirt, &kube);
    assert_eq!((code, check_outcomes(&report)), (Some(1), cut_off.clone()));

    // ── 4. The student reboots ────────────────────────────────────────────
    let mark = vm.console_mark();
    vsock.run("systemd-run --no-block --on-active=1 --unit=lab-test-reboot systemctl reboot");
    vm.wait_for_console_since(mark, "reboot: Restarting system", Duration::from_secs(180))
        .expect("the guest reboots");
    // The guest is back over TCP first (the reboot undid the student's
    // `tc` and link): vhost-device-vsock 0.3.0, the harness's device
    // model, wedges for good when a host connection arrives while the
    // guest resets the device (tests/vm/README.md); KubeVirt's
    // in-kernel vhost-vsock is not that backend.
    let back = Running::spawn(
        tcp.command("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]),
        "wait over TCP after the reboot",
    )
    .finish();
    assert_eq!(back.code, Some(0), "after the reboot, over TCP: {back}");
    let again = vsock.labctl("wait", &["--timeout", "60"]);
    assert_eq!(
        again.status.code(),
        Some(0),
        "after the reboot, over vsock: {}",
        describe(&again)
    );
    let out = vsock.labctl("wait", &["--json", "--timeout", "30"]);
    let ready: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("wait --json: {e}: {}", describe(&out)));
    assert_eq!(ready["vms"][0]["ready"]["instance"]["boots"], 2, "{ready}");
    let (code, report) = grade(&vsock, &[]);
    assert_eq!(
        (code, check_outcomes(&report)),
        (Some(1), before.clone()),
        "after the reboot, the network back: {report}"
    );

    // ── 5. Round trips, side by side ──────────────────────────────────────
    let token = std::fs::read_to_string(&token_file).unwrap();
    let api = KubeApi::from_files(&k.server(), &api_token, &k.certs().ca).unwrap();
    let clients = [
        ("tcp", Client::new(&tcp.url, &token).unwrap()),
        ("vsock", Client::new(&vsock.url, &token).unwrap()),
        (
            "kubevirt",
            Client::builder()
                .kube_api(api)
                .build(&kubevirt.url, &token)
                .unwrap(),
        ),
    ];
    let figures = round_trips(&clients);
    eprintln!(
        "vsock, {guest}: ready over vsock {:.1}s; exec `true` round trip, median of {ROUND_TRIPS} \
         (ms): {}",
        t_ready.as_secs_f64(),
        figures
            .iter()
            .map(|(n, ms)| format!("{n} {ms:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    drop(k);
    vm.powerdown(Duration::from_secs(30)).unwrap();
}

/// The median round trip of `exec true` (no profile, kept alive) over each
/// client, the channels taking turns so that a busy moment of the shared
/// cores falls on all of them.
fn round_trips(clients: &[(&'static str, Client)]) -> Vec<(&'static str, f64)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let req = ExecRequest::new("true").profile(Profile::None);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); clients.len()];
    rt.block_on(async {
        for (_, c) in clients {
            c.exec(&req).await.expect("a warm-up exec");
        }
        for _ in 0..ROUND_TRIPS {
            for (i, (name, c)) in clients.iter().enumerate() {
                let t = Instant::now();
                let r = c.exec(&req).await.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(r.exit_code, Some(0));
                times[i].push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
    });
    clients
        .iter()
        .zip(times)
        .map(|((name, _), mut t)| {
            t.sort_by(f64::total_cmp);
            (*name, t[t.len() / 2])
        })
        .collect()
}
