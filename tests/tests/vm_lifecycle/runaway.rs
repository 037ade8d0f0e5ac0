//! Runaways cost their own check, never the VM: on each guest, as root and
//! as the lab's `student`, in the foreground and left in the background —
//! a fork bomb, a memory hog that allocates past the VM's RAM, a CPU
//! spinner left running, a disk filler. After each: `/v1/ready` answers
//! within 1 s, the next `labctl grade` of hello-lab is correct and takes
//! under 30 s, and nothing of the runaway is left (the guest's process
//! count is back to its baseline; the filler's files are removed).
//!
//! What the guests differ in (SECURITY.md, "Runaway commands"): on Debian
//! 13 (systemd 257, `DelegateSubgroup=`) each command runs under its own
//! `pids.max` and `memory.max`, and a command that hits one says so
//! (`limits_hit`; `labctl exec` warns). On Debian 12 (systemd 252) there is
//! no controller to enable: a non-root command gets `RLIMIT_NPROC`, the
//! OOM killer picks the hog (the agent's `oom_score_adj` is -900, its
//! commands' 0), and what a command leaves behind dies with its shell (the
//! cgroup is killed) on both.

use crate::support::*;
use lab_agent_tests::local::{HELLO_LAB_BEFORE_THE_STEP, TempDir, check_outcomes, describe};
use lab_agent_tests::vm::http;
use lab_agent_tests::vm::{BootOptions, GuestOs, Vm};
use serde_json::Value;
use std::process::Output;
use std::time::{Duration, Instant};

const BOOT: Duration = Duration::from_secs(600);
/// How soon `/v1/ready` must answer after a runaway (the bound).
const READY_WITHIN: Duration = Duration::from_secs(1);
/// The VM's RAM: the hog must go past it.
const MEMORY_MIB: u32 = 1024;

per_guest!(runaways_cost_their_check_not_the_vm);

fn runaways_cost_their_check_not_the_vm(guest: GuestOs) {
    let image = image(guest);
    let dir = TempDir::new("vm-runaway");
    let lab = dir.join("hello-lab");
    copy_lab(&repo_root().join("examples/hello-lab"), &lab);
    let lab_arg = lab.to_str().unwrap().to_owned();
    let payload = render_payload(&lab, &dir);
    let name = format!("vm-runaway-{guest}");
    let mut opts = BootOptions::new(&name, payload.user_data.clone());
    opts.memory_mib = MEMORY_MIB;
    let vm = Vm::boot(&image, opts).expect("qemu starts");
    let conn = Conn {
        url: vm.agent_url(),
        token_file: payload.token_file.clone(),
    };
    let waited = conn.labctl("wait", &["--timeout", &BOOT.as_secs().to_string()]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));

    let limited = guest.has_delegate_subgroup();
    let agent_oom = conn.run(
        "cat /proc/$(systemctl show -p MainPID --value lab-agent.service)/oom_score_adj; \
         cat /proc/self/oom_score_adj",
    );
    assert_eq!(
        agent_oom, "-900\n0\n",
        "the agent's oom_score_adj is lowered, its commands' reset"
    );
    let controllers =
        conn.run("cat /sys/fs/cgroup/system.slice/lab-agent.service/cgroup.subtree_control; echo");
    eprintln!("runaway[{guest}]: the unit's subtree_control: {controllers:?}");
    if limited {
        assert!(
            controllers.contains("pids") && controllers.contains("memory"),
            "systemd ≥ 254 delegates the controllers: {controllers:?}"
        );
    }
    let baseline = process_count(&conn);
    let setup_json = conn.run("cat /var/lib/lab-agent/setup.json");
    let mut rows: Vec<String> = Vec::new();

    for user in ["root", "student"] {
        // Debian 12 has no per-command limit for root: a root fork bomb
        // fills the unit's whole `TasksMax` and a root hog meets the
        // global OOM killer, and the guest (TCG, 1 GiB) is still reaping
        // them when the exec has answered — in CI `/v1/ready` once took
        // over 3 s after the background bomb. That is the gap SECURITY.md
        // documents; there the bound is the recovery's, not 1 s.
        let unguarded = if !limited && user == "root" {
            Duration::from_secs(30)
        } else {
            READY_WITHIN
        };
        // ── A fork bomb left in the background: dies with its shell ──────
        let t = Instant::now();
        let bomb = exec_as(
            &conn,
            user,
            30,
            &[],
            "b() { b | b & }; b; sleep 2; echo shell-done",
        );
        assert!(
            String::from_utf8_lossy(&bomb.stdout).contains("shell-done"),
            "{}",
            describe(&bomb)
        );
        rows.push(recover(
            &vm,
            &conn,
            &lab_arg,
            baseline,
            t,
            &format!("{user}: fork bomb, background"),
            unguarded,
        ));

        // ── A fork bomb in the foreground: stopped at the process limit,
        // or by its timeout, and said so ─────────────────────────────────
        let t = Instant::now();
        let bomb = exec_as(&conn, user, 20, &[], "b() { b | b; }; b");
        let stderr = String::from_utf8_lossy(&bomb.stderr);
        assert_ne!(bomb.status.code(), Some(0), "{}", describe(&bomb));
        if limited {
            assert!(
                stderr.contains("process limit"),
                "a command that hit pids.max says so: {}",
                describe(&bomb)
            );
        }
        rows.push(recover(
            &vm,
            &conn,
            &lab_arg,
            baseline,
            t,
            &format!("{user}: fork bomb, foreground"),
            unguarded,
        ));

        // ── A memory hog past the VM's RAM: the hog dies, not the agent ──
        let t = Instant::now();
        let hog = exec_as(&conn, user, 120, &[], "tail /dev/zero");
        assert_eq!(
            hog.status.code(),
            Some(137),
            "the OOM killer picked the hog: {}",
            describe(&hog)
        );
        if limited {
            assert!(
                String::from_utf8_lossy(&hog.stderr).contains("memory limit"),
                "a command that hit memory.max says so: {}",
                describe(&hog)
            );
        }
        rows.push(recover(
            &vm,
            &conn,
            &lab_arg,
            baseline,
            t,
            &format!("{user}: memory hog ({MEMORY_MIB} MiB VM)"),
            unguarded,
        ));

        // ── A CPU spinner: killed with its shell by default; left running
        // when asked, grading still works beside it ──────────────────────
        let spin = format!("lab-spin-{user}");
        let t = Instant::now();
        let out = exec_as(
            &conn,
            user,
            30,
            &[],
            &format!("(exec -a {spin} bash -c 'while :; do :; done') & echo started"),
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        // `exec -a` sets argv[0], not the process name: match the command
        // line, anchored (the checking shell's own has it later on).
        let left = conn.run(&format!("sleep 1; pgrep -f '^{spin}' || echo none"));
        assert_eq!(left, "none\n", "a spinner outlived its command");
        rows.push(recover(
            &vm,
            &conn,
            &lab_arg,
            baseline,
            t,
            &format!("{user}: spinner, killed with its shell"),
            READY_WITHIN,
        ));

        let t = Instant::now();
        let out = exec_as(
            &conn,
            user,
            30,
            &["--leave-running"],
            &format!("(exec -a {spin} bash -c 'while :; do :; done') & echo started"),
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let kept = conn.run(&format!("pgrep -f '^{spin}' | wc -l"));
        assert_eq!(kept.trim(), "1", "--leave-running keeps the spinner");
        // Ready and grading while it spins.
        let (ready_in, graded_in) = ready_and_grade(&vm, &conn, &lab_arg, READY_WITHIN);
        let left = conn.run(&format!(
            "pkill -f '^{spin}'; sleep 1; pgrep -f '^{spin}' || echo none"
        ));
        assert_eq!(left, "none\n", "the spinner left running was not stopped");
        rows.push(format!(
            "{user}: spinner left running (--leave-running) | ready {ready_in:.2?} | grade {graded_in:.1?} | {:.1?}",
            t.elapsed()
        ));
    }

    // ── A full disk, as the student then as root ────────────────────────
    let state_copy = "/var/tmp/lab-agent-state-copy";
    conn.run(&format!(
        "rm -rf {state_copy}; cp -a /var/lib/lab-agent {state_copy}"
    ));
    for user in ["student", "root"] {
        let t = Instant::now();
        let fill = exec_as(
            &conn,
            user,
            300,
            &[],
            "f=${HOME}/fill; fallocate -l $(( $(df --output=avail -B1 ${HOME} | tail -n1) - 67108864 )) $f.a; \
             dd if=/dev/zero of=$f.b bs=64k status=none; df --output=avail -B1 ${HOME} | tail -n1",
        );
        let avail = String::from_utf8_lossy(&fill.stdout);
        assert!(
            String::from_utf8_lossy(&fill.stderr).contains("No space left"),
            "{}",
            describe(&fill)
        );
        eprintln!(
            "runaway[{guest}]: {user} filled the disk, {} bytes left",
            avail.trim()
        );
        let (ready_in, graded_in) = ready_and_grade(&vm, &conn, &lab_arg, READY_WITHIN);
        // A record rewritten on a full disk: the old one or a new one,
        // never a torn one (temp file + rename; the temp write fails).
        let rewrite = conn.exec(
            None,
            &format!(
                "/usr/local/bin/lab-agent setup --state-dir {state_copy} --script /bin/true; \
                 echo exit=$?; cat {state_copy}/setup.json"
            ),
        );
        let text = String::from_utf8_lossy(&rewrite.stdout);
        let record = text.lines().last().unwrap_or_default();
        let parsed: Value = serde_json::from_str(record).unwrap_or_else(|e| {
            panic!(
                "setup.json torn on a full disk ({e}): {}",
                describe(&rewrite)
            )
        });
        assert!(parsed["state"].is_string(), "{parsed}");
        eprintln!(
            "runaway[{guest}]: `lab-agent setup` on a full disk: {}; the record: {record}",
            text.lines().find(|l| l.starts_with("exit=")).unwrap_or("?")
        );
        assert_eq!(
            conn.run("cat /var/lib/lab-agent/setup.json"),
            setup_json,
            "the real record is unchanged"
        );
        let home = if user == "root" {
            "/root"
        } else {
            "/home/student"
        };
        conn.run(&format!("rm -f {home}/fill.a {home}/fill.b; sync"));
        let left = conn.run("df --output=avail -B1M / | tail -n1");
        assert!(
            left.trim().parse::<u64>().unwrap_or(0) > 500,
            "disk space back after the cleanup: {left} MiB"
        );
        rows.push(format!(
            "{user}: disk filled | ready {ready_in:.2?} | grade {graded_in:.1?} | {:.1?}",
            t.elapsed()
        ));
    }
    assert!(process_count(&conn) <= baseline + 2);

    let off = vm.powerdown(Duration::from_secs(30)).expect("power-off");
    eprintln!("runaway[{guest}]: power-off {off:?}");
    eprintln!(
        "figures[runaway, {guest}] | runaway | /v1/ready after | next grade | recovered (processes at baseline) after"
    );
    for row in rows {
        eprintln!("figures[runaway, {guest}] | {row}");
    }
}

/// `labctl exec --user USER --timeout SECS [flags] -- COMMAND`.
fn exec_as(conn: &Conn, user: &str, timeout: u64, flags: &[&str], command: &str) -> Output {
    let timeout = timeout.to_string();
    let mut args = vec!["--user", user, "--timeout", &timeout];
    args.extend_from_slice(flags);
    args.extend(["--", command]);
    conn.labctl("exec", &args)
}

/// Processes in the guest that are not kernel threads.
fn process_count(conn: &Conn) -> usize {
    conn.run("ps --ppid 2 -p 2 --deselect --no-headers | wc -l")
        .trim()
        .parse()
        .unwrap()
}

/// `/v1/ready` answers 200 within `within`; hello-lab grades as before
/// the student's step, within 30 s. Returns both times.
fn ready_and_grade(vm: &Vm, conn: &Conn, lab: &str, within: Duration) -> (Duration, Duration) {
    let token = std::fs::read_to_string(&conn.token_file).unwrap();
    let token = token.trim();
    let t = Instant::now();
    let ready_in = loop {
        let left = within
            .saturating_sub(t.elapsed())
            .max(Duration::from_millis(100));
        match http::get_within(vm.addr(), "/v1/ready", Some(token), left) {
            Ok(a) if a.status == 200 => break t.elapsed(),
            other => assert!(
                t.elapsed() < within,
                "/v1/ready did not answer 200 within {within:?}: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(ready_in < within, "/v1/ready took {ready_in:?}");
    let t = Instant::now();
    let graded = conn.labctl("grade", &[lab, "--json"]);
    let graded_in = t.elapsed();
    let report: Value = serde_json::from_slice(&graded.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", describe(&graded)));
    assert_eq!(
        check_outcomes(&report),
        HELLO_LAB_BEFORE_THE_STEP,
        "{report}"
    );
    assert!(
        graded_in < Duration::from_secs(30),
        "grading took {graded_in:?}"
    );
    (ready_in, graded_in)
}

/// After a runaway: ready and grading as [`ready_and_grade`], and the
/// guest's processes back to `baseline` (+2 for the checking shell's
/// children) within 30 s. One figures row.
fn recover(
    vm: &Vm,
    conn: &Conn,
    lab: &str,
    baseline: usize,
    since: Instant,
    what: &str,
    ready_within: Duration,
) -> String {
    let (ready_in, graded_in) = ready_and_grade(vm, conn, lab, ready_within);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = process_count(conn);
        if n <= baseline + 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {n} processes left, baseline {baseline}: {}",
            conn.run("ps -eo pid,ppid,user,comm --no-headers | tail -n 40")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    format!(
        "{what} | {ready_in:.2?} | {graded_in:.1?} | {:.1?}",
        since.elapsed()
    )
}
