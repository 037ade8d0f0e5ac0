//! The payload's boot cost, side by side in one run (BENCHMARKS.md's target: time to ready
//! with the full payload ≤ 1.10 × a minimal user-data's time to
//! `result.json`, on the first boot and after a reboot):
//!
//! 1. the guest with a minimal user-data: qemu start → `result.json`; then
//!    it reboots itself, and `reboot: Restarting system` → `result.json`;
//! 2. at the same time, beside it, the same guest with the full hello-lab
//!    payload, by `labctl try --kernel --keep`: qemu start → ready; the
//!    student's step through the commands `try` printed, grading again; then
//!    a reboot from inside, and `reboot: Restarting system` → ready; then
//!    `stop.sh`.
//!
//! Both guests' `/var/log/cloud-init.log` say how many YAML loads cloud-init
//! made on each boot and how long they took: with the payload in a MIME
//! part of its own, no load may be larger than the small cloud-config.
//! The figures are printed (`--nocapture`), not asserted: speed is for
//! benchmarks, behaviour for tests.
//!
//! Before/after: with `LAB_AGENT_BOOT_COST_BEFORE=PATH` (a `labctl` built
//! from an older commit), the same run also boots that build's payload of
//! hello-lab, with the same agent, first boot and reboot, and prints it as a
//! third row (`tests/vm/README.md` has the figures and the commands).

use crate::failing::{agent_line, process_is_qemu, qemu_pid};
use crate::support::*;
use lab_agent_tests::local::{describe, labctl_bin};
use lab_agent_tests::vm::{BootOptions, GuestOs, Vm, VmImage, VmLock};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The same guest with a minimal user-data. `bootcmd` runs on every boot:
/// it starts a transient unit that waits for this boot's `result.json`,
/// prints it on the console, reboots once (first boot only), and then
/// serves `/` over HTTP on the agent's port (the test reads cloud-init's
/// log through it). Needles are split (`"A-""B"`) so that only the guest's
/// output can match, never an echo of the config. It doubles as the
/// harness's smoke test.
pub const MINIMAL: &str = r#"#cloud-config
bootcmd:
  - - systemd-run
    - --no-block
    - --unit=minimal-report
    - sh
    - -c
    - |
      while [ ! -e /run/cloud-init/result.json ]; do sleep 0.1; done
      {
        echo "MINIMAL-RESULT-""BEGIN"
        cat /run/cloud-init/result.json
        echo
        echo "MINIMAL-RESULT-""JSON"
      } > /dev/ttyS0 2>&1
      if [ ! -e /var/lib/minimal-rebooted ]; then
        touch /var/lib/minimal-rebooted && sync && exec systemctl reboot
      fi
      cd / && exec python3 -m http.server --bind 0.0.0.0 8899
"#;

const BOOT: Duration = Duration::from_secs(600);
const RESTART: &str = "reboot: Restarting system";

per_guest!(payload_boot_cost_first_boot_and_reboot);

/// Every VM slot, for two guests side by side: the minimal user-data's
/// and the full payload's, started at the same moment, so that whatever
/// else the machine does weighs on both alike, in half the time one after
/// the other took. Its figures are ratios between those two boots; nothing
/// else runs beside them.
fn payload_boot_cost_first_boot_and_reboot(guest: GuestOs) {
    let image = image(guest);
    let hello = repo_root().join("examples/hello-lab");
    // Both brought up to date now: a build during a boot would slow it.
    static_agent();
    labctl_bin();
    let lock = VmLock::acquire_all(&format!("vm-boot-cost-{guest}")).expect("every VM slot");

    // ── 1 ∥ 2. The minimal user-data and the full payload, side by side ──
    let (minimal, full) = std::thread::scope(|s| {
        let minimal = s.spawn(|| minimal_boots(&image, guest, lock));
        let full = full_payload(&labctl_bin(), &hello, &image, true);
        let (minimal, lock) = minimal.join().expect("the minimal boots");
        drop(lock);
        (minimal, full)
    });
    let Minimal {
        first: min_first,
        again: min_again,
        first_stages: min_first_stages,
        again_stages: min_again_stages,
        yaml: min_yaml,
    } = minimal;
    let before = std::env::var_os("LAB_AGENT_BOOT_COST_BEFORE").map(|labctl| {
        let lock =
            VmLock::acquire_all(&format!("vm-boot-cost-before-{guest}")).expect("every VM slot");
        let before = full_payload(Path::new(&labctl), &hello, &image, false);
        drop(lock);
        before
    });
    let (full_answer, full_first, full_again) = (full.answer, full.first, full.again);
    let (full_first_stages, full_again_stages) = (&full.first_stages, &full.again_stages);
    let full_yaml = &full.yaml;
    let budget = full.budget.as_str();

    // ── Behaviour: cloud-init never YAML-parses the bulk ─────────────────
    assert_eq!(full_yaml.len(), 2, "two boots in the log: {full_yaml:?}");
    for (boot, loads) in full_yaml.iter().enumerate() {
        assert!(!loads.is_empty(), "boot {boot}: no YAML loads logged?");
        let largest = loads.iter().map(|l| l.bytes).max().unwrap_or(0);
        assert!(
            largest < 16 * 1024,
            "boot {boot}: cloud-init YAML-parsed {largest} bytes at once: the payload's bulk \
             is in the YAML again ({budget})"
        );
    }

    // ── Figures ───────────────────────────────────────────────────────────
    let mut figures = Figures::default();
    figures.row(
        "minimal user-data, first boot (result.json on the console)",
        "qemu start",
        None,
        Some(min_first),
    );
    figures.row(
        "full hello-lab payload, first boot (`labctl try --kernel`)",
        "qemu start",
        Some(full_answer),
        Some(full_first),
    );
    figures.row(
        "minimal user-data, after a reboot",
        RESTART,
        None,
        Some(min_again),
    );
    figures.row(
        "full hello-lab payload, after a reboot (`labctl wait`)",
        RESTART,
        None,
        Some(full_again),
    );
    if let Some(b) = &before {
        figures.row(
            "before: the older labctl's payload, first boot",
            "qemu start",
            Some(b.answer),
            Some(b.first),
        );
        figures.row(
            "before: the older labctl's payload, after a reboot",
            RESTART,
            None,
            Some(b.again),
        );
    }
    figures.print(&format!("boot-cost, {guest}"));
    let ratio = |full: Duration, min: Duration| {
        format!(
            "{} vs {}: {:+.1} s (×{:.2}; target ≤ ×1.10)",
            secs(full),
            secs(min),
            full.as_secs_f64() - min.as_secs_f64(),
            full.as_secs_f64() / min.as_secs_f64()
        )
    };
    eprintln!(
        "boot cost: minimal user-data {} bytes; full payload {}",
        MINIMAL.len(),
        budget.trim_start_matches("budget: ")
    );
    eprintln!(
        "boot cost, first boot (ready vs result.json): {}",
        ratio(full_first, min_first)
    );
    eprintln!(
        "boot cost, after a reboot (ready vs result.json): {}",
        ratio(full_again, min_again)
    );
    if let Some(b) = &before {
        eprintln!("before: {}", b.budget.trim_start_matches("budget: "));
        eprintln!(
            "before, first boot (ready vs result.json): {}",
            ratio(b.first, min_first)
        );
        eprintln!(
            "before, after a reboot (ready vs result.json): {}",
            ratio(b.again, min_again)
        );
    }
    for (name, min, full) in [
        ("first boot", &min_first_stages, full_first_stages),
        ("after a reboot", &min_again_stages, full_again_stages),
    ] {
        eprintln!("cloud-init stages, {name} (guest uptime when each began, s):");
        eprintln!(
            "  {:<16} {:>8} {:>8} {:>8}",
            "stage", "minimal", "full", "+"
        );
        for (stage, f) in full {
            let m = min.iter().find(|(s, _)| s == stage).map(|(_, up)| *up);
            eprintln!(
                "  {stage:<16} {:>8} {f:>8.1} {:>8}",
                m.map_or("-".into(), |m| format!("{m:.1}")),
                m.map_or("-".into(), |m| format!("{:+.1}", f - m)),
            );
        }
    }
    let mut yaml = vec![("minimal", &min_yaml), ("full", full_yaml)];
    if let Some(b) = &before {
        yaml.push(("before", &b.yaml));
    }
    for (name, boots) in yaml {
        for (i, loads) in boots.iter().enumerate() {
            let total: f64 = loads.iter().map(|l| l.secs).sum();
            let sizes: Vec<String> = loads.iter().map(|l| l.bytes.to_string()).collect();
            eprintln!(
                "yaml loads, {name}, boot {}: {} loads, {:.2} s in all; bytes: {}",
                i + 1,
                loads.len(),
                total,
                sizes.join(" ")
            );
        }
    }
}

/// What the minimal user-data's guest showed.
struct Minimal {
    /// qemu start → `result.json`.
    first: Duration,
    /// `reboot: Restarting system` → `result.json`.
    again: Duration,
    first_stages: Vec<(String, f64)>,
    again_stages: Vec<(String, f64)>,
    yaml: Vec<Vec<YamlLoad>>,
}

/// The minimal user-data: first boot, its own reboot, cloud-init's log
/// through the port forward, ACPI power-off (the harness's smoke checks).
/// Gives `lock` back once the VM is gone.
fn minimal_boots(image: &VmImage, guest: GuestOs, lock: VmLock) -> (Minimal, VmLock) {
    let vm = Vm::boot_with(
        image,
        BootOptions::new(format!("vm-minimal-{guest}"), MINIMAL),
        lock,
    )
    .expect("qemu starts");
    // slirp accepts TCP at once; the harness must not take that for "up".
    assert!(
        vm.http_get("/", None).is_err(),
        "an HTTP answer before the guest even booted"
    );
    let min_first = vm
        .wait_for_console("MINIMAL-RESULT-JSON", BOOT)
        .unwrap_or_else(|e| panic!("the minimal boot did not finish: {e}"));
    let console = vm.console_text();
    let min_first_stages = cloud_init_stages(&console);
    // The harness's smoke checks: cloud-init ran the user-data to the end
    // without errors, from the NoCloud seed.
    let result = console_json(&between(
        &console,
        "MINIMAL-RESULT-BEGIN",
        "MINIMAL-RESULT-JSON",
    ));
    let result: Value = serde_json::from_str(result.trim())
        .unwrap_or_else(|e| panic!("result.json is not JSON ({e}): {result:?}"));
    assert_eq!(
        result["v1"]["errors"],
        serde_json::json!([]),
        "cloud-init reported errors: {result}"
    );
    let datasource = result["v1"]["datasource"].as_str().unwrap_or_default();
    assert!(datasource.contains("NoCloud"), "datasource {datasource:?}");
    let mark = vm.console_mark();
    let restart = vm
        .wait_for_console_since(mark, RESTART, BOOT)
        .unwrap_or_else(|e| panic!("the minimal guest did not reboot: {e}"));
    let mark = vm.console_mark();
    let min_again = vm
        .wait_for_console_since(mark, "MINIMAL-RESULT-JSON", BOOT)
        .unwrap_or_else(|e| panic!("the minimal reboot did not finish: {e}"))
        - restart;
    let min_again_stages = cloud_init_stages(&vm.console_text());
    let (_, log) = vm
        .wait_for_http("/var/log/cloud-init.log", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no HTTP through the port forward: {e}"));
    assert_eq!(log.status, 200, "{}", log.raw);
    let min_yaml = yaml_loads(log.body());
    let off = vm.powerdown(Duration::from_secs(30)).expect("power-off");
    assert!(
        matches!(off, lab_agent_tests::vm::PowerOff::Clean(_)),
        "ACPI power-off was ignored: {off:?}"
    );
    let lock = vm.release();
    (
        Minimal {
            first: min_first,
            again: min_again,
            first_stages: min_first_stages,
            again_stages: min_again_stages,
            yaml: min_yaml,
        },
        lock,
    )
}

/// What one full-payload VM showed.
struct FullPayload {
    /// qemu start → the agent's first answer, → ready (`labctl try`'s figures).
    answer: Duration,
    first: Duration,
    /// `reboot: Restarting system` → ready.
    again: Duration,
    first_stages: Vec<(String, f64)>,
    again_stages: Vec<(String, f64)>,
    yaml: Vec<Vec<YamlLoad>>,
    /// `labctl secret`'s budget line, as `try` printed it.
    budget: String,
}

/// hello-lab's full payload by `labctl try --kernel --keep` (`labctl` may be
/// an older build), then a reboot from inside and `labctl wait`, then
/// `stop.sh`. With `student_step`, the student's step and grading through
/// the commands `try` printed, before and after the reboot.
fn full_payload(labctl: &Path, hello: &Path, image: &VmImage, student_step: bool) -> FullPayload {
    let mut cmd = try_kernel_with(labctl, hello, image);
    cmd.args(["--keep", "--json"]);
    // An older labctl may not read the variable itself.
    if let Some(accel) = std::env::var_os("LAB_AGENT_VM_ACCEL") {
        cmd.arg("--accel").arg(accel);
    }
    let tried = Running::spawn(cmd, "try").finish();
    assert_eq!(
        tried.code,
        Some(1),
        "one check waits for the student: {tried}"
    );
    let report: Value =
        serde_json::from_str(&tried.stdout).unwrap_or_else(|e| panic!("{e}: {tried}"));
    assert_eq!(
        (report["passed"].as_u64(), report["total"].as_u64()),
        (Some(3), Some(4))
    );
    let err = &tried.stderr;
    // Progress while booting (elapsed, what the console says), then states.
    for needle in [
        "accelerator: ",
        "booting: cloud-init: init stage",
        "booting: cloud-init: final stage (runcmd)",
        "ready after",
        "grading `hello-lab` (4 checks)",
        "the VM keeps running (qemu pid ",
        "exec --url http://127.0.0.1:",
        "stop it and remove its files with:",
    ] {
        assert!(err.contains(needle), "{needle:?} not in:\n{err}");
    }
    let (answer, first) = figures_line(err);
    let pid = qemu_pid(err);
    let (url, token_file) = agent_line(
        err.lines()
            .find(|l| l.contains("agent at http://"))
            .unwrap(),
    );
    let console_path = between(err, "serial console log: `", "`");
    let console_path = Path::new(&console_path);
    let first_stages = cloud_init_stages(&std::fs::read_to_string(console_path).unwrap());
    let stop_script = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("sh "))
        .expect("a stop command")
        .to_owned();

    // The VM is still there: the student's step, then grade again.
    assert!(process_is_qemu(pid), "--keep left qemu {pid} running");
    let conn = Conn { url, token_file };
    if student_step {
        student_step_and_grade(&conn, hello);
    }
    // A reboot from inside; ready again, as the backend sees it.
    let from = std::fs::metadata(console_path).unwrap().len() as usize;
    conn.run("systemd-run --no-block --on-active=1 --unit=lab-test-reboot systemctl reboot");
    let restart = wait_in_file(console_path, from, RESTART, BOOT);
    let waited = conn.labctl("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]);
    let again = restart.elapsed();
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let again_stages = cloud_init_stages(&std::fs::read_to_string(console_path).unwrap());
    let yaml = yaml_loads(&conn.run("cat /var/log/cloud-init.log"));
    if student_step {
        // Still graded as before the reboot: the student's work is on disk.
        let graded = conn.labctl("grade", &[hello.to_str().unwrap()]);
        assert_eq!(graded.status.code(), Some(0), "{}", describe(&graded));
    }

    // `stop.sh` stops it and removes everything.
    let stopped = Command::new("sh").arg(&stop_script).output().unwrap();
    assert!(stopped.status.success(), "{}", describe(&stopped));
    assert!(!process_is_qemu(pid), "qemu {pid} still runs after stop.sh");
    let run_dir = Path::new(&stop_script).parent().unwrap();
    assert!(!run_dir.exists(), "`{}` is left", run_dir.display());
    FullPayload {
        answer,
        first,
        again,
        first_stages,
        again_stages,
        yaml,
        budget: err
            .lines()
            .find(|l| l.starts_with("budget"))
            .unwrap_or("budget: ?")
            .to_owned(),
    }
}

/// The student's step through `labctl exec`, then a 4/4 grade.
fn student_step_and_grade(conn: &Conn, hello: &Path) {
    let step = conn.exec(Some("student"), "chmod +x ~/hello.sh && ~/hello.sh");
    assert_eq!(
        String::from_utf8_lossy(&step.stdout),
        "Hello from student\n"
    );
    let graded = conn.labctl("grade", &[hello.to_str().unwrap()]);
    assert_eq!(graded.status.code(), Some(0), "{}", describe(&graded));
    assert!(
        String::from_utf8_lossy(&graded.stdout)
            .ends_with("hello-lab: all 4 checks passed, score 5/5\n"),
        "{}",
        describe(&graded)
    );
}

/// Polls `path` until `needle` appears after byte `from`; when it was seen.
fn wait_in_file(path: &Path, from: usize, needle: &str, timeout: Duration) -> Instant {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read(path).unwrap_or_default();
        if text.len() > from && String::from_utf8_lossy(&text[from..]).contains(needle) {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in `{}` within {timeout:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
