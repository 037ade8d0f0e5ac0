//! A lab of several VMs under qemu: `examples/two-vm-lab` as a
//! `VmSession` (the runner's API, driven directly), one Debian 12 guest
//! per VM, each booted with its own payload and joined to the other on
//! the session's private network. The lab's own self-test proves the
//! network: its third check fetches `http://server:8080/` from `client`,
//! so it passes only when `server` resolves and routes from `client`.
//!
//! Debian 12 only (two TCG guests at once take the machine's two slots:
//! one guest OS is what CI's time allows); ignored when
//! `LAB_AGENT_VM_GUESTS` leaves debian-12 out.

use crate::support::*;
use lab_agent_client::{CheckStatus, Client};
use lab_agent_proto::lab::Lab;
use lab_agent_tests::vm::{GuestOs, VmLock, accel_mode};
use lab_runner::selftest::{self, Verdict, VmAgent};
use lab_runner::vm::{Stop, VmRequest, VmSession};
use std::time::{Duration, Instant};

#[test]
#[cfg_attr(
    vm_guest_left_out = "debian-12",
    ignore = "LAB_AGENT_VM_GUESTS leaves out debian-12"
)]
fn two_vm_lab_holds_on_two_guests() {
    on_guest(GuestOs::Debian12, two_vm_lab_on_guests);
}

fn two_vm_lab_on_guests(guest: GuestOs) {
    let image = image(guest);
    let arch = guest.arch();
    let agent = static_agent_for(arch);
    let lab = Lab::load(repo_root().join("examples/two-vm-lab")).expect("load two-vm-lab");
    // One vCPU each: two TCG guests on a 2-core host, a core each.
    let config = VmRequest {
        kernel: Some(image.kernel.clone()),
        initrd: Some(image.initrd.clone()),
        rootfs: Some(image.rootfs.clone()),
        arch: Some(arch),
        memory_mib: Some(1024),
        cpus: Some(1),
        accel: Some(accel_mode()),
        ..VmRequest::default()
    }
    .config(None)
    .expect("a valid VM config")
    .expect("a VM");

    let _lock = VmLock::acquire_all("vm-session").expect("every VM slot");
    let t0 = Instant::now();
    let session = VmSession::start(&lab, agent, &config, false, &|| false).expect("start");
    let booted = t0.elapsed();
    let run_dir = session.dir().to_owned();
    let names: Vec<&str> = session.vms().map(|(n, _)| n).collect();
    assert_eq!(names, ["server", "client"]);
    let pids: Vec<u32> = session
        .vms()
        .map(|(_, t)| t.qemu_pid().expect("running"))
        .collect();
    for (name, t) in session.vms() {
        assert_eq!(
            t.dir(),
            run_dir.join(name),
            "each VM's dir is in the session's"
        );
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clients = session.session().expect("the session's clients");
    let deadline = Instant::now() + Duration::from_secs(WAIT_TIMEOUT_SECS);
    rt.block_on(async {
        tokio::select! {
            r = clients.wait_ready_with(deadline, |vm, p| {
                session.on_progress(vm, p);
            }) => { r.expect("both VMs ready"); }
            e = session.qemu_exited() => panic!("{e}"),
            e = session.silent_console(Duration::from_secs(120)) => panic!("{e}"),
        }
    });
    let ready = t0.elapsed();
    for (_, t) in session.vms() {
        t.on_ready();
    }

    // The names and addresses the seed gave: each VM knows the other's.
    let client = clients.client("client").unwrap();
    let hosts = rt
        .block_on(client.exec(&lab_agent_proto::exec::ExecRequest::new(
            "getent hosts server; ip -4 -o addr show",
        )))
        .expect("exec on client");
    assert_eq!(hosts.exit_code, Some(0), "{hosts:?}");
    assert!(
        hosts
            .stdout
            .lines()
            .any(|l| l.split_whitespace().eq(["10.89.0.2", "server"])),
        "{}",
        hosts.stdout
    );
    assert!(
        hosts.stdout.contains("inet 10.89.0.3/24"),
        "{}",
        hosts.stdout
    );

    // Before the solve: the service runs (check 1), the rest fail.
    let report = rt.block_on(clients.grade(&lab, None)).expect("grade");
    let statuses: Vec<(&str, CheckStatus)> = report
        .checks
        .iter()
        .map(|c| (c.vm.as_deref().unwrap_or(""), c.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("server", CheckStatus::Passed),
            ("server", CheckStatus::Failed),
            ("client", CheckStatus::Failed)
        ],
        "{report:?}"
    );

    // The lab's self-test, as `labctl test` runs it: grade, each check's
    // solve on its VM, grade, grade in reverse.
    let owned: Vec<(String, Client, String)> = session
        .vms()
        .map(|(n, t)| {
            (
                n.to_owned(),
                t.client().unwrap(),
                t.guest_lab_dir().to_owned(),
            )
        })
        .collect();
    let agents: Vec<VmAgent<'_>> = owned
        .iter()
        .map(|(vm, client, lab_dir)| VmAgent {
            vm,
            client,
            lab_dir,
        })
        .collect();
    let solve = selftest::load_solve_script(&lab).expect("the solve script");
    let setup_ms = ready.as_millis() as u64;
    let tested = rt
        .block_on(selftest::run_session(
            &agents,
            &lab,
            solve.as_deref(),
            setup_ms,
        ))
        .expect("the self-test ran");
    eprintln!("{}", tested.render());
    assert_eq!(tested.verdict(), Verdict::Holds, "{}", tested.render());
    let tested_at = t0.elapsed();

    drop(agents);
    drop(clients);
    session.stop(Stop::Discard);
    let stopped = t0.elapsed();
    assert!(!run_dir.exists(), "`{}` is left", run_dir.display());
    for pid in pids {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(
            !cmdline.contains(&*run_dir.to_string_lossy()),
            "qemu {pid} still runs: {cmdline}"
        );
    }
    eprintln!(
        "figures[session] | start {} | both ready {} | self-test done {} | stopped {} |",
        secs(booted),
        secs(ready),
        secs(tested_at),
        secs(stopped)
    );
}
