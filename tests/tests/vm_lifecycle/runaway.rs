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
//!
//! The figures each row prints: the peak of the agent unit's tasks and
//! memory and of the agent's own RSS during the runaway, sampled every
//! 50 ms by a transient unit outside the agent's cgroup ([`Peaks`]). On
//! Debian 13 the test also measures what the default limits cost a normal
//! check ([`limits_cost`]): the same VM's agent restarted without them,
//! then with `pids.max` only, exec latency side by side.

use crate::support::*;
use lab_agent_tests::local::{HELLO_LAB_BEFORE_THE_STEP, TempDir, check_outcomes, describe};
use lab_agent_tests::vm::http;
use lab_agent_tests::vm::{BootOptions, GuestOs, Vm};
use serde_json::Value;
use std::process::Output;
use std::time::{Duration, Instant};

const BOOT: Duration = Duration::from_secs(600);
/// How soon `/v1/ready` must answer after a runaway (the issue's bound).
const READY_WITHIN: Duration = Duration::from_secs(1);
/// The VM's RAM: the hog must go past it.
const MEMORY_MIB: u32 = 1024;
/// How much the agent's peak RSS may grow over a run of runaways: the
/// 8 MiB the memory target allows over the agent's own needs with hostile clients
/// (these commands' answers are a few KiB each).
const AGENT_MEMORY_SLACK_KIB: u64 = 8 * 1024;
/// Execs of `true` per configuration and round in [`limits_cost`].
const COST_EXECS: usize = 60;
/// Rounds of the three configurations, interleaved.
const COST_ROUNDS: usize = 2;

per_guest!(runaways_cost_their_check_not_the_vm);

fn runaways_cost_their_check_not_the_vm(guest: GuestOs) {
    let image = image(guest);
    let dir = TempDir::new("vm-runaway");
    let lab = dir.join("hello-lab");
    copy_lab(&repo_root().join("examples/hello-lab"), &lab);
    let lab_arg = lab.to_str().unwrap().to_owned();
    let payload = render_payload(&lab, &dir, guest.arch());
    let name = format!("vm-runaway-{guest}");
    let mut opts = BootOptions::new(&name, payload.user_data.clone());
    opts.memory_mib = MEMORY_MIB;
    // The runaways contend with the agent for the guest's CPUs, as in a
    // lab VM: two, whatever the other scenarios boot with.
    opts.cpus = 2;
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
    if limited {
        limits_cost(&conn, guest);
    }
    // The agent's memory before any runaway (after one grade, so its
    // buffers and connections have been used once).
    let _ = ready_and_grade(&vm, &conn, &lab_arg, READY_WITHIN);
    let agent = agent_memory(&conn);
    let peaks = Peaks::start(&conn, agent.pid);
    let baseline = process_count(&conn);
    let setup_json = conn.run("cat /var/lib/lab-agent/setup.json");
    let mut rows: Vec<String> = Vec::new();

    for user in ["root", "student"] {
        // Debian 12 has no per-command limit for root: a root fork bomb
        // fills the unit's whole `TasksMax` and a root hog meets the
        // global OOM killer, and the guest (TCG, 1 GiB) is still reaping
        // them when the exec has answered — in CI `/v1/ready` once took
        // over 3 s after the background bomb, and with the host's two
        // cores shared by a compile at load 55, over 30 s after the
        // foreground one. That is the gap SECURITY.md documents; there the
        // bound is the bomb's timeout and the guest's reaping, not 1 s.
        let unguarded = if !limited && user == "root" {
            Duration::from_secs(90)
        } else {
            READY_WITHIN
        };
        // ── A fork bomb left in the background: dies with its shell ──────
        peaks.reset(&conn);
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
            &peaks,
            &lab_arg,
            baseline,
            t,
            &format!("{user}: fork bomb, background"),
            unguarded,
        ));

        // ── A fork bomb in the foreground: stopped at the process limit,
        // or by its timeout, and said so ─────────────────────────────────
        peaks.reset(&conn);
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
            &peaks,
            &lab_arg,
            baseline,
            t,
            &format!("{user}: fork bomb, foreground"),
            unguarded,
        ));

        // ── A memory hog past the VM's RAM: the hog dies, not the agent ──
        peaks.reset(&conn);
        let t = Instant::now();
        let hog = exec_as(&conn, user, 120, &[], "tail /dev/zero");
        // Debian 12, root: no memory limit, so the hog meets the global
        // OOM killer, and under TCG the guest can thrash (the agent's pages
        // evicted with everything else) until past the exec's answer
        // deadline — once in CI the answer did not come within 150 s. That
        // check is lost (the documented gap); the VM must still recover
        // and grade right, which `recover` below asserts.
        let stalled = !limited
            && user == "root"
            && hog.status.code() == Some(3)
            && String::from_utf8_lossy(&hog.stderr).contains("no response within");
        if stalled {
            eprintln!(
                "runaway[{guest}]: root's hog stalled the guest past the exec's deadline (no memory limit on systemd 252): {}",
                describe(&hog)
            );
        } else {
            assert_eq!(
                hog.status.code(),
                Some(137),
                "the OOM killer picked the hog: {}",
                describe(&hog)
            );
        }
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
            &peaks,
            &lab_arg,
            baseline,
            t,
            &format!("{user}: memory hog ({MEMORY_MIB} MiB VM)"),
            unguarded,
        ));

        // ── A CPU spinner: killed with its shell by default; left running
        // when asked, grading still works beside it ──────────────────────
        let spin = format!("lab-spin-{user}");
        peaks.reset(&conn);
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
            &peaks,
            &lab_arg,
            baseline,
            t,
            &format!("{user}: spinner, killed with its shell"),
            READY_WITHIN,
        ));

        peaks.reset(&conn);
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
            "{user}: spinner left running (--leave-running) | {ready_in:.2?} | {graded_in:.1?} | {:.1?} | {}",
            t.elapsed(),
            peaks.read(&conn)
        ));
    }

    // ── A full disk, as the student then as root ────────────────────────
    let state_copy = "/var/tmp/lab-agent-state-copy";
    conn.run(&format!(
        "rm -rf {state_copy}; cp -a /var/lib/lab-agent {state_copy}"
    ));
    for user in ["student", "root"] {
        peaks.reset(&conn);
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
            "{user}: disk filled | {ready_in:.2?} | {graded_in:.1?} | {:.1?} | {}",
            t.elapsed(),
            peaks.read(&conn)
        ));
    }
    assert!(process_count(&conn) <= baseline + 2);
    peaks.stop(&conn);
    // The agent outlived every runaway (never OOM-killed nor restarted),
    // and its memory did not grow with them: its peak RSS over the whole
    // run stays within the slack the memory target gives it over its own idle.
    let after = agent_memory(&conn);
    assert_eq!(
        after.pid, agent.pid,
        "the agent was replaced during the runaways"
    );
    assert_eq!(
        after.restarts, agent.restarts,
        "the agent restarted during the runaways"
    );
    eprintln!(
        "runaway[{guest}]: the agent's memory: RSS {} KiB before the runaways (peak {} KiB), \
         {} KiB after (peak over the whole run {} KiB)",
        agent.rss_kib, agent.hwm_kib, after.rss_kib, after.hwm_kib
    );
    assert!(
        after.hwm_kib <= agent.hwm_kib + AGENT_MEMORY_SLACK_KIB,
        "the agent's peak RSS grew from {} KiB to {} KiB during the runaways",
        agent.hwm_kib,
        after.hwm_kib
    );

    let off = vm.powerdown(Duration::from_secs(30)).expect("power-off");
    eprintln!("runaway[{guest}]: power-off {off:?}");
    eprintln!(
        "figures[runaway, {guest}] | runaway | /v1/ready after | next grade | recovered (processes at baseline) after | peak tasks in the agent's unit | peak memory of the unit | the agent's peak RSS"
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

/// The guest's processes, kernel threads and the agent's cgroup holders
/// aside (one idle process per pooled cgroup: the pool holds one or two).
fn process_count(conn: &Conn) -> usize {
    conn.run("ps --ppid 2 -p 2 --deselect --no-headers -o args | grep -v '^/proc/self/exe hold-cgroup ' | wc -l")
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
    let mut seen = Vec::new();
    let ready_in = loop {
        let left = within
            .saturating_sub(t.elapsed())
            .max(Duration::from_millis(100));
        let tried = t.elapsed();
        match http::get_within(vm.addr(), "/v1/ready", Some(token), left) {
            Ok(a) if a.status == 200 => break t.elapsed(),
            Ok(a) => seen.push(format!("{tried:.2?}: {}", a.status)),
            Err(e) => seen.push(format!("{tried:.2?}: {e}")),
        }
        if t.elapsed() >= within {
            panic!(
                "/v1/ready did not answer 200 within {within:?} ({}); {}",
                seen.join(", "),
                after_a_miss(vm, conn)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(ready_in < within, "/v1/ready took {ready_in:?}");
    if !seen.is_empty() {
        // Within the bound, but not at once: what it answered meanwhile,
        // and what the guest logged, for the figures' reader.
        eprintln!(
            "runaway[{}]: /v1/ready answered 200 after {ready_in:.2?}, before it: {}; the guest: {}",
            vm.machine().name(),
            seen.join(", "),
            describe(&conn.exec(None, GUEST_LOG))
        );
    }
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

/// What a missed readiness bound was: a slow agent or none (a reset is
/// the guest refusing the forwarded connection: nothing listening). Any
/// answer within 60 s more (a 401 counts) says an agent is there; then the
/// guest says whether it was replaced and what it logged.
fn after_a_miss(vm: &Vm, conn: &Conn) -> String {
    let t = Instant::now();
    let late = match http::wait_for_answer(vm.addr(), "/v1/ready", Duration::from_secs(60)) {
        Ok(a) => format!("an answer ({}) after {:.1?} more", a.status, t.elapsed()),
        Err(e) => e.to_string(),
    };
    let out = conn.exec(None, GUEST_LOG);
    format!("then {late}; the guest says: {}", describe(&out))
}

/// Whether the agent was replaced, what it logged last, and the kernel.
const GUEST_LOG: &str = "systemctl show -p MainPID -p NRestarts -p ActiveEnterTimestamp lab-agent.service; \
    journalctl -o short-monotonic --no-pager -n 30 -u lab-agent.service; dmesg | tail -n 15";

/// After a runaway: ready and grading as [`ready_and_grade`], and the
/// guest's processes back to `baseline` (+2 for the checking shell's
/// children) within 30 s. One figures row.
#[allow(clippy::too_many_arguments)]
fn recover(
    vm: &Vm,
    conn: &Conn,
    peaks: &Peaks,
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
        "{what} | {ready_in:.2?} | {graded_in:.1?} | {:.1?} | {}",
        since.elapsed(),
        peaks.read(conn)
    )
}

/// The agent's process as the guest sees it.
struct AgentMemory {
    pid: u32,
    restarts: u32,
    rss_kib: u64,
    hwm_kib: u64,
}

fn agent_memory(conn: &Conn) -> AgentMemory {
    let text = conn.run(
        "pid=$(systemctl show -p MainPID --value lab-agent.service); \
         echo \"$pid $(systemctl show -p NRestarts --value lab-agent.service)\"; \
         grep -E '^(VmRSS|VmHWM):' /proc/$pid/status",
    );
    let mut lines = text.lines();
    let mut ids = lines.next().unwrap_or_default().split_whitespace();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the agent's status: {text}"))
    };
    let (rss_kib, hwm_kib) = (field("VmRSS:"), field("VmHWM:"));
    AgentMemory {
        pid: ids.next().and_then(|p| p.parse().ok()).expect("MainPID"),
        restarts: ids.next().and_then(|n| n.parse().ok()).expect("NRestarts"),
        rss_kib,
        hwm_kib,
    }
}

/// A sampler of peaks, run by systemd as a transient unit beside the
/// agent's (so neither the agent's limits nor the leftover kill reach it,
/// and its own tasks are not counted): every 50 ms, the agent unit's
/// `pids.current` and `memory.current` and the agent's `VmRSS`. The loop
/// never forks — at a fork bomb's height there is no process to fork —
/// and sleeps by a `read -t` on a FIFO. A new generation number (written
/// by [`Peaks::reset`]) starts its maxima again.
struct Peaks {
    generation: std::cell::Cell<u32>,
}

const PEAKS_SCRIPT: &str = r#"unit=/sys/fs/cgroup/system.slice/lab-agent.service
pid=$1
rm -f /run/lab-peaks.fifo; mkfifo /run/lab-peaks.fifo; exec 3<>/run/lab-peaks.fifo
gen=none
while :; do
  read -r g </run/lab-peaks.gen || g=0
  if [[ $g != "$gen" ]]; then gen=$g; maxp=0; maxm=0; maxr=0; fi
  p=0; m=0; r=0
  read -r p <$unit/pids.current
  read -r m <$unit/memory.current
  while read -r k v _; do if [[ $k == VmRSS: ]]; then r=$v; break; fi; done </proc/$pid/status
  (( p > maxp )) && maxp=$p
  (( m > maxm )) && maxm=$m
  (( r > maxr )) && maxr=$r
  printf '%s %s %s %s\n' "$gen" "$maxp" "$maxm" "$maxr" >/run/lab-peaks.out
  read -r -t 0.05 -u 3 _
done
"#;

impl Peaks {
    fn start(conn: &Conn, agent_pid: u32) -> Peaks {
        conn.run(&format!(
            "echo 0 >/run/lab-peaks.gen; cat >/run/lab-peaks.sh <<'SCRIPT'\n{PEAKS_SCRIPT}SCRIPT\n\
             systemd-run --unit=lab-test-peaks --nice=-5 bash /run/lab-peaks.sh {agent_pid}"
        ));
        Peaks {
            generation: std::cell::Cell::new(0),
        }
    }

    fn reset(&self, conn: &Conn) {
        self.generation.set(self.generation.get() + 1);
        conn.run(&format!(
            "echo {} >/run/lab-peaks.gen",
            self.generation.get()
        ));
    }

    /// "peak tasks | peak memory | agent RSS" since the last reset.
    fn read(&self, conn: &Conn) -> String {
        let want = self.generation.get().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The sampler rewrites the file every 50 ms: it may be caught empty.
            let line = conn.run("cat /run/lab-peaks.out");
            let f: Vec<&str> = line.split_whitespace().collect();
            if let [generation, tasks, memory, rss] = f[..] {
                if generation == want {
                    let mib = memory.parse::<u64>().unwrap_or(0) >> 20;
                    return format!("{tasks} | {mib} MiB | {rss} KiB");
                }
            }
            assert!(
                Instant::now() < deadline,
                "the peak sampler is not sampling (want generation {want}): {line:?}; {}",
                conn.run("systemctl status --no-pager lab-test-peaks 2>&1 | tail -n 5; true")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn stop(&self, conn: &Conn) {
        conn.run("systemctl stop lab-test-peaks; rm -f /run/lab-peaks.*");
    }
}

/// What the per-command limits cost a normal check, on a guest whose
/// systemd delegates the controllers: the same VM's agent restarted with
/// `--cgroup off` (no exec cgroup at all: the session fallback), with
/// `--memory-max 0` (`pids.max` only — there is no `pids.max`-off agent:
/// a command never gets more than its share of the unit's tasks) and as
/// shipped (both), interleaved over [`COST_ROUNDS`]; each time
/// [`COST_EXECS`] execs of `true` from the host over one kept-alive
/// connection (the backend's path, through the port forward). With the
/// shipped agent also requests that override `max_pids` (alternating
/// values, so every exec rewrites its cgroup's `pids.max`). The test
/// asserts each configuration is what it says (the command reads its own
/// cgroup); the figures are printed.
fn limits_cost(conn: &Conn, guest: GuestOs) {
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Seen {
        NoCgroup,
        Limits { pids: bool, memory: bool },
    }
    let configs = [
        (
            "no exec cgroup (--cgroup off)",
            "--cgroup off",
            Seen::NoCgroup,
        ),
        (
            "pids.max only (--memory-max 0)",
            "--memory-max 0",
            Seen::Limits {
                pids: true,
                memory: false,
            },
        ),
        (
            "pids.max + memory.max (shipped)",
            "",
            Seen::Limits {
                pids: true,
                memory: true,
            },
        ),
    ];
    let token = std::fs::read_to_string(&conn.token_file).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let time_execs = |label: &str, override_pids: bool, into: &mut Vec<Duration>| {
        // A client of its own each time, made after the restart: a client
        // kept across `restart_agent_with` holds connections to the agent
        // that was, and an exec that meets one dies with it (the client
        // says so, `Error::AgentWentAway`, and does not send it again; an
        // exec here must run, and its first is not timed).
        let client = lab_agent_client::Client::new(&conn.url, token.trim()).expect("client");
        rt.block_on(async {
            let mut req = lab_agent_proto::exec::ExecRequest::new("true");
            // One to open the connection and warm the agent's pool.
            client.exec(&req).await.expect("exec");
            for i in 0..COST_EXECS {
                if override_pids {
                    req.options.max_pids = Some(100 + (i as u32 % 2));
                }
                let t = Instant::now();
                let r = client.exec(&req).await.expect("exec");
                into.push(t.elapsed());
                assert_eq!(r.exit_code, Some(0), "{label}: {r:?}");
            }
        })
    };
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); configs.len() + 1];
    let mut restart = 0;
    for _ in 0..COST_ROUNDS {
        for (i, (label, flags, want)) in configs.iter().enumerate() {
            restart += 1;
            restart_agent_with(conn, flags, restart);
            let text = conn.run(
                "c=$(cut -d: -f3 /proc/self/cgroup); echo $c; d=/sys/fs/cgroup$c; \
                 cat $d/pids.max $d/memory.max 2>/dev/null; true",
            );
            let mut lines = text.lines();
            let seen = if lines.next().unwrap_or_default().ends_with("/agent") {
                Seen::NoCgroup
            } else {
                Seen::Limits {
                    pids: lines.next().is_some_and(|l| l != "max"),
                    memory: lines.next().is_some_and(|l| l != "max"),
                }
            };
            assert_eq!(seen, *want, "{label}: a command sees {text:?}");
            time_execs(label, false, &mut samples[i]);
            if flags.is_empty() {
                time_execs(label, true, &mut samples[configs.len()]);
            }
        }
    }
    // Back to the shipped unit for the runaways.
    restart_agent_with(conn, "", restart + 1);
    let quantiles = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        (v[v.len() / 2], v[v.len() * 9 / 10])
    };
    let (base, _) = quantiles(&samples[0]);
    eprintln!(
        "figures[limits cost, {guest}] | agent | exec `true` median | p90 | × no exec cgroup ({} execs each, {COST_ROUNDS} rounds interleaved)",
        COST_EXECS * COST_ROUNDS
    );
    let labels = configs
        .iter()
        .map(|c| c.0)
        .chain(["shipped, each request overriding max_pids"]);
    for (label, v) in labels.zip(&samples) {
        let (p50, p90) = quantiles(v);
        eprintln!(
            "figures[limits cost, {guest}] | {label} | {p50:.1?} | {p90:.1?} | {:.3}",
            p50.as_secs_f64() / base.as_secs_f64()
        );
    }
}

/// Restarts the agent with `flags` after `serve` (a drop-in; none: the
/// shipped unit), from a transient unit (the exec asking for it runs in
/// the agent's cgroup, which the restart empties), and waits until the new
/// agent is ready.
fn restart_agent_with(conn: &Conn, flags: &str, n: u32) {
    let dir = "/run/systemd/system/lab-agent.service.d";
    let write = if flags.is_empty() {
        format!("rm -f {dir}/test-limits.conf")
    } else {
        format!(
            "mkdir -p {dir} && printf '[Service]\\nExecStart=\\nExecStart=/usr/local/bin/lab-agent serve {flags}\\n' >{dir}/test-limits.conf"
        )
    };
    let before = conn.run("systemctl show -p MainPID --value lab-agent.service");
    conn.run(&format!(
        "{write} && systemctl daemon-reload && \
         systemd-run --no-block --unit=lab-test-limits-{n} sh -c 'sleep 1; systemctl restart lab-agent.service'"
    ));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // The agent is away for a moment: a failed exec is "not yet".
        let out = conn.exec(None, "systemctl show -p MainPID --value lab-agent.service");
        let now = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && now != before && now.trim() != "0" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent was not restarted with `{flags}`"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let waited = conn.labctl("wait", &["--timeout", "60"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
}
