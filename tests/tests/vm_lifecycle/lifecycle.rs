//! hello-lab on one VM, step by step (scenarios 1, 4, 5 and 3 share the
//! boot: each boot costs minutes under TCG):
//!
//! 1. first boot with a 30 s setup: `setting_up` while it runs, `labctl
//!    wait` ready only once `result.json` exists, grading (3 pass, `hello.sh
//!    runs` fails), a check and an exec as `student`, no banner anywhere;
//!    a timed-out command's `timeout 600 sleep` is gone (the exec's cgroup);
//!    the serial console logs root in;
//! 4. `kill -9` of the agent: systemd restarts it, readiness unchanged;
//! 5. a wrong token: 401, and neither token in the agent's journal;
//! 3. the student reboots: the agent is back under systemd before
//!    cloud-init's network stage is over, not ready until this boot's
//!    cloud-init is done, setup not re-run, grading works.

use crate::support::*;
use lab_agent_tests::local::{
    HELLO_LAB_BEFORE_THE_STEP, TempDir, check_outcomes, describe, new_token, write_token,
};
use lab_agent_tests::vm::http;
use lab_agent_tests::vm::{BootOptions, GuestOs, PowerOff, Vm};
use serde_json::Value;
use std::time::{Duration, Instant};

/// hello-lab's `setup-delay-secs` knob: long enough to watch `setting_up`.
const SETUP_DELAY_SECS: u64 = 30;
/// First boot of the full payload, under TCG on 2 shared cores: 2–5 min.
const BOOT: Duration = Duration::from_secs(600);
/// The banner hello-lab installs for the student's interactive shells.
const BANNER: &str = "Your task is in ~/welcome.txt";

/// A cloud-config part added to the payload so that this boot is, on
/// purpose, what operators meet in the wild: a deprecated key (cloud-init
/// ≥ 23.4 then calls the boot "degraded done", and `cloud-init status`
/// exits 2; on Debian 13 deprecations are logged as warnings) and a module
/// that fails (an unknown time zone: `cc_timezone` raises, `result.json`
/// lists it). Neither may hold readiness back (the contract: cloud-init's errors
/// are warnings, not fatal), and both must be visible in `/v1/ready`. A
/// separate part, so the payload's own lists (`runcmd`, `bootcmd`) are not
/// replaced by cloud-init's merge.
const DEGRADING_PART: &str = "#cloud-config\n\
    # lab-agent VM test: a deprecated key and a failing module, on purpose\n\
    apt_update: false\n\
    timezone: Lab/No-Such-Zone\n";
const TIMEZONE_ERROR: &str = "No-Such-Zone";

per_guest!(hello_lab_first_boot_crash_wrong_token_reboot; arm64);

fn hello_lab_first_boot_crash_wrong_token_reboot(guest: GuestOs) {
    let image = image(guest);
    let name = format!("vm-lc-{guest}");
    let dir = TempDir::new("vm-lifecycle");
    let lab = dir.join("hello-lab");
    copy_lab(&repo_root().join("examples/hello-lab"), &lab);
    std::fs::write(
        lab.join("files/setup-delay-secs"),
        format!("{SETUP_DELAY_SECS}\n"),
    )
    .unwrap();
    let lab_arg = lab.to_str().unwrap();
    let payload = render_payload(&lab, &dir, guest.arch());
    let user_data = with_part(&payload.user_data, "text/cloud-config", DEGRADING_PART);
    let mut figures = Figures::default();

    // One NoCloud instance-id for both disks below: a VM restarted onto a
    // fresh disk keeps its meta-data, as KubeVirt's does.
    let instance_id = format!("{name}-{}", std::process::id());
    let boot_opts = BootOptions {
        instance_id: Some(instance_id.clone()),
        ..BootOptions::new(&name, user_data.clone())
    };
    let vm = Vm::boot(&image, boot_opts.clone()).expect("qemu starts");
    let conn = Conn {
        url: vm.agent_url(),
        token_file: payload.token_file.clone(),
    };

    // ── 1. First boot, slow setup ─────────────────────────────────────────
    let probe = Probe::start(vm.addr(), &payload.token, vm.started_at());
    // The backend starts waiting as soon as it created the VM.
    let wait = Running::spawn(
        conn.command("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]),
        "wait",
    );
    probe
        .wait_for_state("setting_up", BOOT)
        .unwrap_or_else(|| panic!("never saw `setting_up`: {:?}", probe.state_sequence()));
    // Setup runs inside cloud-init's runcmd: the final stage cannot be done.
    let during = conn.run(
        "if test -e /run/cloud-init/result.json; then echo present; else echo absent; fi; \
         cat /var/lib/lab-agent/setup.json",
    );
    assert!(
        during.starts_with("absent\n"),
        "result.json during setup: {during}"
    );
    assert!(during.contains("\"state\":\"running\""), "{during}");

    let waited = wait.finish();
    assert_eq!(waited.code, Some(0), "labctl wait: {waited}");
    assert!(waited.stderr.contains("ready after"), "{waited}");
    let t_ready = waited.exited - vm.started_at();
    // The probe polls on its own: let it see `ready` too.
    probe.wait_for_state("ready", Duration::from_secs(30));
    let (set_first, set_last) = probe.seen_state("setting_up").unwrap();
    let t_answer = probe.first_answer().expect("the probe saw an answer");
    let seq = probe.state_sequence();
    probe.stop();
    assert!(
        set_last - set_first >= Duration::from_secs(SETUP_DELAY_SECS - 8),
        "`setting_up` seen only from {set_first:?} to {set_last:?}: {seq:?}"
    );
    assert_eq!(seq.last().map(String::as_str), Some("ready"), "{seq:?}");
    assert!(!seq.iter().any(|s| s == "failed"), "{seq:?}");

    // The guest is the machine it was booted as (arm64: the arm64 payload
    // on `virt`), and the agent in it was built for it.
    let machine = conn.run("uname -m; od -An -tx1 -j18 -N2 /usr/local/bin/lab-agent");
    let elf_machine = guest.arch().elf_machine().to_le_bytes();
    assert_eq!(
        machine.split_whitespace().collect::<Vec<_>>(),
        [
            guest.arch().uname().to_owned(),
            format!("{:02x}", elf_machine[0]),
            format!("{:02x}", elf_machine[1])
        ],
        "{machine}"
    );

    // `labctl wait` returned after result.json (and boot-finished) existed.
    let clock = GuestClock::measure(&conn);
    let returned = clock.guest_time(wall(waited.exited));
    let slack = clock.uncertainty + 0.25;
    let times = guest_mtimes(
        &conn,
        &[
            "/run/cloud-init/result.json",
            "/var/lib/cloud/instance/boot-finished",
        ],
    );
    for (path, t) in ["result.json", "boot-finished"].iter().zip(&times) {
        let t = t.unwrap_or_else(|| panic!("{path} is missing after ready"));
        assert!(
            t <= returned + slack,
            "{path} appeared {:.2} s after `labctl wait` returned",
            t - returned
        );
        eprintln!(
            "lifecycle: {path} {:.2} s before `labctl wait` returned (± {:.2} s)",
            returned - t,
            clock.uncertainty
        );
    }
    // Ready although cloud-init reported an error and (cloud-init ≥ 23.4)
    // a degraded boot; both in `/v1/ready`. Had readiness been decided
    // from `cloud-init status` (exit 1 here, 2 when only degraded) or
    // from `errors` being empty, `labctl wait` above would not have
    // returned 0.
    let result: Value = serde_json::from_str(&conn.run("cat /run/cloud-init/result.json")).unwrap();
    let errors = result["v1"]["errors"]
        .as_array()
        .expect("errors in result.json");
    assert!(
        errors.iter().any(|e| e.to_string().contains("timezone")),
        "the failing module is in result.json: {result}"
    );
    let ready = http::get(vm.addr(), "/v1/ready", Some(&payload.token)).expect("/v1/ready");
    assert_eq!(ready.status, 200, "{}", ready.raw);
    let ready: Value = serde_json::from_str(ready.body()).unwrap();
    assert_eq!(ready["state"], "ready", "{ready}");
    // The VM's life: a new instance on its first boot, this boot's
    // timeline in cloud-init's order with the setup inside its final stage,
    // the root disk as `df` sees it.
    let first_life = ready["instance"].clone();
    assert_eq!(first_life["boots"], 1, "{ready}");
    let first_id = first_life["id"]
        .as_str()
        .expect("an instance id")
        .to_owned();
    assert_first_boot_timeline(&ready);
    assert_root_is_what_df_says(&conn, &ready);
    // A never-booted image: nothing of an earlier life on its disk.
    assert_eq!(
        ready["disk"],
        serde_json::json!({"booted_before": false, "evidence": []}),
        "{ready}"
    );
    let shown = |key: &str| -> Vec<String> {
        ready["cloud_init"][key]
            .as_array()
            .unwrap_or_else(|| panic!("no cloud_init.{key}: {ready}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let (errors, warnings) = (shown("errors"), shown("warnings"));
    assert!(
        errors.iter().any(|e| e.contains(TIMEZONE_ERROR)),
        "the module's failure is shown: {ready}"
    );
    eprintln!("lifecycle: cloud-init errors {errors:?}, warnings {warnings:?}");
    let status = conn.run("cloud-init status >/dev/null 2>&1; echo $?");
    if guest.cloud_init_reports_degraded() {
        assert!(
            warnings.iter().any(|w| w.contains("apt_update")),
            "the deprecated key is shown as a warning: {ready}"
        );
    } else {
        // cloud-init 22.4 keeps no recoverable errors: nothing to show.
        assert_eq!(warnings, Vec::<String>::new(), "{ready}");
    }
    assert_eq!(
        status.trim(),
        "1",
        "`cloud-init status` calls this boot an error"
    );
    figures.row(
        &format!("1. first boot, hello-lab, {SETUP_DELAY_SECS} s setup"),
        "qemu start",
        Some(t_answer),
        Some(t_ready),
    );

    // Grading: three checks pass, the student's step is still to do.
    let graded = conn.labctl("grade", &[lab_arg, "--json"]);
    assert_eq!(graded.status.code(), Some(1), "{}", describe(&graded));
    let report: Value = serde_json::from_slice(&graded.stdout).unwrap();
    assert_eq!(
        check_outcomes(&report),
        HELLO_LAB_BEFORE_THE_STEP,
        "{report}"
    );
    assert!(
        report["checks"][3]["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{report}"
    );
    assert_no_banner(&report);

    // A command as the student: a login shell, the student's home, no banner.
    let me = conn.exec(Some("student"), "id -un; echo \"$HOME\"; pwd");
    assert_eq!(me.status.code(), Some(0), "{}", describe(&me));
    assert_eq!(
        String::from_utf8_lossy(&me.stdout),
        "student\n/home/student\n/home/student\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&me.stderr),
        "",
        "no banner on stderr"
    );
    // …while the banner does greet the student's interactive shells.
    let interactive = conn.exec(Some("student"), "bash --login -i -c true 2>/dev/null");
    assert!(
        String::from_utf8_lossy(&interactive.stdout).contains(BANNER),
        "{}",
        describe(&interactive)
    );

    // Containment under systemd: the unit delegates a cgroup, each command
    // runs in one of its own, and a check's `timeout 600 sleep` (timeout(1)
    // puts itself in a process group of its own) is gone with its timeout.
    let timed_out = conn.labctl(
        "exec",
        &["--timeout", "2", "--", "timeout 600 sleep 600 & sleep 600"],
    );
    assert_ne!(timed_out.status.code(), Some(0), "{}", describe(&timed_out));
    let left = conn.run("pgrep -f 'sleep 6[0]0' || echo none");
    assert_eq!(left, "none\n", "a timed-out check's child survived");
    let cgroups = conn.run(
        "cat /proc/$(systemctl show -p MainPID --value lab-agent.service)/cgroup; \
         journalctl -u lab-agent.service --no-pager -o cat | grep -c 'each command runs in a cgroup of its own'",
    );
    assert!(
        cgroups.contains("/system.slice/lab-agent.service/agent\n"),
        "the agent is not in its delegated leaf: {cgroups}"
    );

    // The serial console (the student's web terminal) logs root in.
    vm.wait_for_console("login: root (automatic login)", Duration::from_secs(60))
        .expect("serial-console autologin");
    vm.wait_for_console(&format!("root@{name}:~#"), Duration::from_secs(60))
        .expect("a root shell prompt on the serial console");

    // ── 4. The agent is killed (-9) ───────────────────────────────────────
    let unit = |conn: &Conn| {
        let out = conn.run("systemctl show -p MainPID -p NRestarts lab-agent.service");
        let get = |key: &str| -> u32 {
            out.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {out:?}"))
        };
        (get("MainPID="), get("NRestarts="))
    };
    let (pid, restarts) = unit(&conn);
    assert!(pid > 1, "MainPID {pid}");
    // The exec's answer would die with the agent: a transient unit of its
    // own kills it a second later, after the exec has answered.
    conn.run(&format!(
        "systemd-run --no-block --unit=lab-test-kill-agent sh -c 'sleep 1; kill -9 {pid}'"
    ));
    let asked = Instant::now();
    let probe = Probe::start(vm.addr(), &payload.token, asked);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (down, back) = loop {
        let seen = probe.snapshot();
        let down = seen.iter().find(|s| s.answer.is_err()).map(|s| s.at);
        let back = down.and_then(|d| seen.iter().find(|s| s.at > d && s.answer.is_ok()));
        if let (Some(d), Some(b)) = (down, back) {
            break (d, b.clone());
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not go away and come back: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    probe.stop();
    assert!(
        matches!(&back.answer, Ok((200, Some(s))) if s == "ready"),
        "readiness after the restart: {:?}",
        back.answer
    );
    let (new_pid, new_restarts) = unit(&conn);
    assert_ne!(new_pid, pid, "a new agent process");
    assert_eq!(new_restarts, restarts + 1, "systemd restarted it once");
    let waited = conn.labctl("wait", &["--timeout", "30"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let journal = conn.run("journalctl -u lab-agent.service --no-pager -o cat");
    assert!(
        journal.contains("code=killed, status=9/KILL"),
        "systemd saw the kill: {journal}"
    );
    figures.row(
        "4. agent kill -9 (down after 1 s sleep)",
        "kill scheduled",
        Some(back.at),
        Some(back.at),
    );

    // `systemctl restart` (an operator's, or a package upgrade's): the
    // agent stops on SIGTERM and is started again into its delegated
    // leaf, a new process, still ready. On systemd 257 a delegated unit's
    // cgroup must have no process beside enabled controllers, or the
    // restart fails with EBUSY.
    let (pid, _) = unit(&conn);
    conn.run(
        "systemd-run --no-block --unit=lab-test-restart-agent \
         sh -c 'sleep 1; systemctl restart lab-agent.service'",
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // The agent is away for a moment: a failed exec is "not yet".
        let out = conn.exec(None, "systemctl show -p MainPID --value lab-agent.service");
        let now: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        if out.status.success() && now != pid && now != 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "`systemctl restart` did not replace the agent (MainPID {pid})"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let waited = conn.labctl("wait", &["--timeout", "60"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let restarted = conn.run(
        "systemctl show -p Result -p ActiveState lab-agent.service; \
         cat /proc/$(systemctl show -p MainPID --value lab-agent.service)/cgroup",
    );
    assert!(
        restarted.contains("ActiveState=active")
            && restarted.contains("Result=success")
            && restarted.contains("/system.slice/lab-agent.service/agent\n"),
        "after `systemctl restart`: {restarted}"
    );
    eprintln!(
        "lifecycle: agent unreachable from {} to {} after the kill was scheduled",
        secs(down),
        secs(back.at)
    );

    // ── 5. A wrong token ──────────────────────────────────────────────────
    let wrong_token = new_token();
    assert_ne!(wrong_token, payload.token);
    let wrong_file = dir.join("wrong-token");
    write_token(&wrong_file, &wrong_token);
    let wrong = Conn {
        url: vm.agent_url(),
        token_file: wrong_file,
    };
    let started = Instant::now();
    let refused = wrong.labctl("wait", &["--timeout", "300"]);
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a 401 ends the wait at once"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{}",
        describe(&refused)
    );
    for (path, bearer) in [
        ("/v1/ready", Some(wrong_token.as_str())),
        ("/v1/info", Some(wrong_token.as_str())),
        ("/v1/no-such-path", Some(wrong_token.as_str())),
        ("/v1/ready", None),
    ] {
        let answer = http::get(vm.addr(), path, bearer).expect("an answer");
        assert_eq!(answer.status, 401, "{path}: {}", answer.raw);
        let body: Value = serde_json::from_str(answer.body()).unwrap();
        assert_eq!(body["error"]["code"], "unauthorized", "{path}: {body}");
        assert!(!answer.body().contains("/v1/"), "no hint of paths: {body}");
    }
    // The first 401 after a quiet minute is logged at once (the rest are
    // summarised); journald may take a moment to have it.
    let journal_now = || conn.run("journalctl -u lab-agent.service --no-pager -o cat");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut journal = journal_now();
    while !journal.contains("unauthorized=") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        journal = journal_now();
    }
    assert!(
        journal.contains("unauthorized="),
        "the refusals are logged: {journal}"
    );
    for (what, token) in [("real", &payload.token), ("wrong", &wrong_token)] {
        assert!(
            !journal.contains(token.as_str()),
            "the {what} token is in the agent's journal"
        );
    }
    // Nowhere else in the journal either (cloud-init's, systemd's).
    let everything = conn.run("journalctl --no-pager -o cat");
    for (what, token) in [("real", &payload.token), ("wrong", &wrong_token)] {
        assert!(
            !everything.contains(token.as_str()),
            "the {what} token is in the guest's journal"
        );
    }

    // ── 3. The student reboots ────────────────────────────────────────────
    let setup_before = conn.run("cat /var/lib/lab-agent/setup.json");
    let boot_id = |conn: &Conn| -> String {
        let token = std::fs::read_to_string(&conn.token_file).unwrap();
        let answer = http::get(vm.addr(), "/v1/info", Some(token.trim())).expect("/v1/info");
        assert_eq!(answer.status, 200, "{}", answer.raw);
        let info: Value = serde_json::from_str(answer.body()).unwrap();
        info["boot_id"].as_str().expect("a boot id").to_owned()
    };
    let boot_before = boot_id(&conn);
    let written_before = ready_root(&conn, "written_bytes");
    // The student does the lab's step, then reboots from inside.
    let hello = conn.exec(Some("student"), "chmod +x ~/hello.sh && ~/hello.sh");
    assert_eq!(
        String::from_utf8_lossy(&hello.stdout),
        "Hello from student\n",
        "{}",
        describe(&hello)
    );
    let mark = vm.console_mark();
    conn.run("systemd-run --no-block --on-active=1 --unit=lab-test-reboot systemctl reboot");
    let t_restart = vm
        .wait_for_console_since(mark, "reboot: Restarting system", Duration::from_secs(180))
        .expect("the guest reboots");
    let restarted = vm.started_at() + t_restart;
    let probe = Probe::start(vm.addr(), &payload.token, restarted);
    let wait = Running::spawn(
        conn.command("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]),
        "wait after reboot",
    );
    let waited = wait.finish();
    assert_eq!(
        waited.code,
        Some(0),
        "labctl wait after the reboot: {waited}"
    );
    let t_ready2 = waited.exited - restarted;
    probe.wait_for_state("ready", Duration::from_secs(30));
    let t_answer2 = probe.first_answer();
    let seq = probe.state_sequence();
    probe.stop();
    // Back long before cloud-init's final stage, and not ready until that
    // stage is done; setup is not waited for again.
    assert_eq!(
        seq,
        ["waiting_for_cloud_init", "ready"],
        "states after the reboot"
    );
    let clock = GuestClock::measure(&conn);
    let returned = clock.guest_time(wall(waited.exited));
    let times = guest_mtimes(&conn, &["/run/cloud-init/result.json"]);
    let result_json = times[0].expect("result.json after the reboot");
    assert!(
        result_json <= returned + clock.uncertainty + 0.25,
        "result.json appeared {:.2} s after `labctl wait` returned",
        result_json - returned
    );
    assert_eq!(
        conn.run("cat /var/lib/lab-agent/setup.json"),
        setup_before,
        "setup ran again"
    );
    assert_ne!(boot_id(&conn), boot_before, "boot_id after the reboot");
    // The same life of the VM (the student's work is there), one more boot;
    // this boot's timeline has cloud-init's stages and no setup (it ran in
    // the first boot), and ready when the final stage ended.
    let ready2: Value = serde_json::from_str(
        http::get(vm.addr(), "/v1/ready", Some(&payload.token))
            .expect("/v1/ready")
            .body(),
    )
    .unwrap();
    assert_eq!(ready2["instance"]["id"], first_id.as_str(), "{ready2}");
    assert_eq!(ready2["instance"]["boots"], 2, "{ready2}");
    // The write layer over the life: this boot's writes and the last boot's
    // (kept by the agent when systemd stopped it for the reboot, at least
    // what it had written when last asked).
    let (total, now) = (
        ready2["root"]["written_bytes_total"].as_u64(),
        ready2["root"]["written_bytes"].as_u64(),
    );
    assert!(
        total.zip(now).is_some_and(|(t, n)| t >= n + written_before),
        "written_bytes_total after the reboot: {total:?}, this boot {now:?}, the last boot at least \
         {written_before}: {ready2}"
    );
    assert_eq!(
        ready2["instance"]["first_boot_at"],
        first_life["first_boot_at"]
    );
    let t2 = &ready2["timeline"];
    assert!(
        t2.get("setup").is_none(),
        "setup in the reboot's timeline: {t2}"
    );
    let stages2 = stage_spans(t2);
    assert_eq!(
        stages2.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
        STAGES,
        "{t2}"
    );
    assert_eq!(t2["ready_secs"].as_f64(), stages2[3].2, "{t2}");
    eprintln!("lifecycle, {guest}: timeline after the reboot: {t2}");
    // The unit does not wait for sysinit.target, so the agent was up before
    // cloud-init's network stage (which parses the whole payload, tens of
    // seconds here) had finished: not held back by its own size.
    let network_stage = guest.network_stage_unit();
    // When the stage's process exited: on Debian 13 the unit is a oneshot
    // shim that never enters `active` (its ActiveEnterTimestamp stays 0).
    let entered = conn.run(&format!(
        "systemctl show -p ActiveEnterTimestampMonotonic --value lab-agent.service; \
         systemctl show -p ExecMainExitTimestampMonotonic --value {network_stage}"
    ));
    let entered: Vec<u64> = entered
        .split_whitespace()
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{e}: {entered:?}")))
        .collect();
    let [agent_up, init_done] = entered[..] else {
        panic!("two timestamps expected: {entered:?}")
    };
    assert!(
        0 < agent_up && agent_up < init_done,
        "after the reboot the agent became active at {:.1} s, cloud-init's network \
         stage ({network_stage}) finished at {:.1} s (monotonic)",
        agent_up as f64 / 1e6,
        init_done as f64 / 1e6
    );
    eprintln!(
        "after the reboot: agent active at {:.1} s, {network_stage} done at {:.1} s \
         (guest monotonic clock)",
        agent_up as f64 / 1e6,
        init_done as f64 / 1e6
    );
    assert_eq!(
        conn.run("systemctl is-active lab-agent.service; systemctl is-enabled lab-agent.service"),
        "active\nenabled\n"
    );
    let graded = conn.labctl("grade", &[lab_arg, "--json"]);
    assert_eq!(graded.status.code(), Some(0), "{}", describe(&graded));
    let report: Value = serde_json::from_slice(&graded.stdout).unwrap();
    assert_eq!(report["passed"], 4, "{report}");
    assert_no_banner(&report);
    vm.wait_for_console_since(
        mark,
        "login: root (automatic login)",
        Duration::from_secs(60),
    )
    .expect("autologin after the reboot");
    figures.row(
        "3. reboot (systemctl reboot)",
        "`reboot: Restarting system`",
        t_answer2,
        Some(t_ready2),
    );

    let off = vm.powerdown(Duration::from_secs(30)).expect("power-off");
    assert!(matches!(off, PowerOff::Clean(_)), "{off:?}");
    drop(vm);

    // ── 6. The VM is restarted onto a fresh disk ──────────────────────────
    // What a containerDisk restart is (node drain, eviction): the same
    // image and meta-data, a new overlay. cloud-init and the setup run
    // again and the agent says `ready` — but it is another life of the VM,
    // the student's work is gone, and grading pinned to the life the
    // backend saw says so instead of failing the student.
    let vm = Vm::boot(&image, boot_opts).expect("qemu starts on a fresh disk");
    let conn = Conn {
        url: vm.agent_url(),
        token_file: payload.token_file.clone(),
    };
    let waited = conn.labctl("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let ready3: Value = serde_json::from_str(
        http::get(vm.addr(), "/v1/ready", Some(&payload.token))
            .expect("/v1/ready")
            .body(),
    )
    .unwrap();
    let new_id = ready3["instance"]["id"].as_str().expect("an instance id");
    assert_ne!(new_id, first_id, "a fresh disk kept the instance: {ready3}");
    assert_eq!(ready3["instance"]["boots"], 1, "{ready3}");
    assert_eq!(
        ready3["disk"]["booted_before"], false,
        "a fresh disk: {ready3}"
    );
    assert_eq!(
        ready3["root"]["written_bytes_total"], ready3["root"]["written_bytes"],
        "a new life counts its own writes: {ready3}"
    );
    let pinned = conn.labctl("grade", &[lab_arg, "--json", "--instance", &first_id]);
    assert_eq!(pinned.status.code(), Some(6), "{}", describe(&pinned));
    let said = String::from_utf8_lossy(&pinned.stderr);
    assert!(said.contains("reset"), "{said}");
    // Nothing ran: the student's step is as a fresh VM has it.
    let graded = conn.labctl("grade", &[lab_arg, "--json", "--instance", new_id]);
    assert_eq!(graded.status.code(), Some(1), "{}", describe(&graded));
    let report: Value = serde_json::from_slice(&graded.stdout).unwrap();
    assert_eq!(
        check_outcomes(&report),
        HELLO_LAB_BEFORE_THE_STEP,
        "{report}"
    );
    assert_eq!(report["instance"]["id"], new_id, "{report}");
    let off = vm.powerdown(Duration::from_secs(30)).expect("power-off");
    assert!(matches!(off, PowerOff::Clean(_)), "{off:?}");
    figures.print(&format!("lifecycle, {guest}"));
}

const STAGES: [&str; 4] = ["init-local", "init", "modules-config", "modules-final"];

/// `(stage, start, finished)` of each stage in the timeline, in `STAGES` order.
fn stage_spans(timeline: &Value) -> Vec<(String, Option<f64>, Option<f64>)> {
    STAGES
        .iter()
        .filter_map(|name| {
            let span = timeline["cloud_init"].get(*name)?;
            Some((
                name.to_string(),
                span["start_secs"].as_f64(),
                span["finished_secs"].as_f64(),
            ))
        })
        .collect()
}

/// A first boot's timeline: the kernel, then the agent (before the final
/// stage: it answers `setting_up`), cloud-init's four stages one after the
/// other, the setup inside the final stage (runcmd runs it), ready at the
/// final stage's end.
fn assert_first_boot_timeline(ready: &Value) {
    let t = &ready["timeline"];
    eprintln!("lifecycle: first boot's timeline: {t}");
    let stages = stage_spans(t);
    assert_eq!(
        stages.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
        STAGES,
        "{t}"
    );
    let mut last_end = 0.0;
    for (name, start, end) in &stages {
        let (start, end) = (start.expect(name), end.expect(name));
        assert!(
            last_end <= start && start <= end,
            "{name} out of order: {t}"
        );
        last_end = end;
    }
    let final_stage = (stages[3].1.unwrap(), stages[3].2.unwrap());
    let setup = (
        t["setup"]["start_secs"].as_f64().expect("setup start"),
        t["setup"]["finished_secs"].as_f64().expect("setup end"),
    );
    assert!(
        final_stage.0 <= setup.0 && setup.0 <= setup.1 && setup.1 <= final_stage.1,
        "setup {setup:?} is not inside the final stage {final_stage:?}: {t}"
    );
    // runcmd starts the agent with --no-block, then runs the setup: the
    // agent may come up a moment after the setup began, never after it.
    let agent = t["agent_started_secs"].as_f64().expect("agent start");
    assert!(0.0 < agent && agent < setup.1, "agent at {agent}: {t}");
    assert_eq!(t["ready_secs"].as_f64(), Some(final_stage.1), "{t}");
}

/// `root` in `/v1/ready` is `/` as `df` in the guest sees it.
fn assert_root_is_what_df_says(conn: &Conn, ready: &Value) {
    let df = conn.run("df -B1 --output=size / | tail -n 1");
    let size: u64 = df.trim().parse().unwrap_or_else(|e| panic!("{e}: {df:?}"));
    assert_eq!(ready["root"]["size_bytes"].as_u64(), Some(size), "{ready}");
    let written = ready["root"]["written_bytes"].as_u64();
    assert!(written.is_some_and(|w| w > 0), "root disk writes: {ready}");
}

/// `/v1/ready`'s `root.KEY` now, a number.
fn ready_root(conn: &Conn, key: &str) -> u64 {
    let token = std::fs::read_to_string(&conn.token_file).unwrap();
    let addr = conn.url.trim_start_matches("http://").parse().unwrap();
    let answer = http::get(addr, "/v1/ready", Some(token.trim())).expect("/v1/ready");
    let ready: Value = serde_json::from_str(answer.body()).unwrap();
    ready["root"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no root.{key}: {ready}"))
}

/// No check's output carries hello-lab's interactive-only banner.
fn assert_no_banner(report: &Value) {
    for c in report["checks"].as_array().unwrap() {
        for stream in ["stdout", "stderr"] {
            let text = c[stream].as_str().unwrap();
            assert!(
                !text.contains(BANNER) && !text.contains("Welcome to hello-lab!"),
                "the banner leaked into {stream} of {c}"
            );
        }
    }
}
