//! hello-lab's full payload as a lab author tries it, on every guest, and
//! the payload's boot cost beside a minimal user-data, as a benchmark.
//!
//! **Behaviour (in `cargo test`, so in CI):**
//! `full_payload_try_keep_reboot_stop::{debian_12,debian_13}`, one VM slot
//! each, beside the other scenarios: `labctl try --kernel --keep` on
//! hello-lab: qemu start → ready, 3/4; the student's step through the
//! commands `try` printed, 4/4; a reboot from inside, `reboot: Restarting
//! system` → ready (`labctl wait`), 4/4 again; then `stop.sh` (qemu gone,
//! the run dir removed). The guest's `/var/log/cloud-init.log` says how
//! many YAML loads cloud-init made on each boot: with the payload in a MIME
//! part of its own, no load may be larger than the small cloud-config.
//! Its figures (`--nocapture`) are that one VM's times, not a ratio.
//!
//! **Benchmark (`#[ignore]`d, not in CI):** `side_by_side`, every VM slot,
//! each selected guest in turn (BENCHMARKS.md's target: time to ready with
//! the full payload ≤ 1.10 × a minimal user-data's time to `result.json`,
//! on the first boot and after a reboot):
//!
//! 1. the guest with a minimal user-data: qemu start → `result.json`; then
//!    it reboots itself, and `reboot: Restarting system` → `result.json`;
//!    its smoke checks (no cloud-init errors, the NoCloud seed, no HTTP
//!    answer before the guest booted, a clean ACPI power-off);
//! 2. at the same moment, beside it, the same run as the behaviour test.
//!
//! It prints the figures of both, their ratios, cloud-init's stages and
//! YAML loads side by side; they are printed, not asserted: speed is for
//! benchmarks, behaviour for tests. CI does not produce them; run
//!
//! ```sh
//! cargo test -p lab-agent-tests --test vm_lifecycle boot_cost::side_by_side -- --ignored --nocapture
//! ```
//!
//! (`LAB_AGENT_VM_GUESTS=debian-13` for one guest; ~7 min per guest under
//! TCG, nothing else booting meanwhile; the filter names the benchmark
//! alone, since `--ignored` also runs the per-guest tests of a guest left
//! out, which fail saying so).
//!
//! Before/after: with `LAB_AGENT_BOOT_COST_BEFORE=PATH` (a `labctl` built
//! from an older commit), the benchmark also boots that build's payload of
//! hello-lab, with the same agent, first boot and reboot, and prints it as a
//! third row (`tests/vm/README.md` has the figures and the commands).

use crate::failing::{agent_line, process_is_qemu, qemu_pid};
use crate::support::*;
use lab_agent_tests::local::{describe, labctl_bin};
use lab_agent_tests::vm::{BootOptions, GuestOs, Vm, VmImage, VmLock};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The same guest with a minimal user-data. `bootcmd` runs on every boot:
/// it starts a transient unit that waits for this boot's `result.json`,
/// prints it on the console, reboots once (first boot only), and then
/// serves `/` over HTTP on the agent's port (the test reads cloud-init's
/// log through it). Needles are split (`"A-""B"`) so that only the guest's
/// output can match, never an echo of the config. It doubles as the
/// harness's smoke test (in the benchmark only, so not in CI).
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

per_guest!(full_payload_try_keep_reboot_stop);

/// The behaviour on one guest: one VM slot, like every scenario, so both
/// guests' runs go side by side with the others.
fn full_payload_try_keep_reboot_stop(guest: GuestOs) {
    let (image, hello) = image_and_hello_lab(guest);
    let _slot = VmLock::acquire(&format!("vm-try-keep-{guest}")).expect("a VM slot");
    let full = full_payload(&labctl_bin(), &hello, &image, true);
    full.assert_bulk_never_yaml();
    let mut figures = Figures::default();
    full.rows(&mut figures, "hello-lab payload");
    figures.print(&format!("try-keep, {guest}"));
}

/// The benchmark: the boot cost side by side (module docs). Not in CI: it
/// takes every VM slot for ~7 min per guest, and its figures are ratios,
/// not behaviour (the behaviour test above runs the same payload VM).
#[test]
#[ignore = "benchmark: every VM slot, ~7 min per guest; \
            cargo test -p lab-agent-tests --test vm_lifecycle boot_cost::side_by_side -- --ignored --nocapture"]
fn side_by_side() {
    // The selected guests of the default set, one after the other; none is
    // a mistake, not a pass (`debian-13-arm64` alone selects none).
    let guests: Vec<GuestOs> = GuestOs::ALL.into_iter().filter(|g| g.selected()).collect();
    assert!(
        !guests.is_empty(),
        "LAB_AGENT_VM_GUESTS names none of the guests the benchmark boots (debian-12, debian-13)"
    );
    for guest in guests {
        on_guest(guest, side_by_side_on);
    }
}

/// Every VM slot, for two guests side by side: the minimal user-data's
/// and the full payload's, started at the same moment, so that whatever
/// else the machine does weighs on both alike, in half the time one after
/// the other took. Its figures are ratios between those two boots; nothing
/// else runs beside them.
fn side_by_side_on(guest: GuestOs) {
    let (image, hello) = image_and_hello_lab(guest);
    let lock = VmLock::acquire_all(&format!("vm-boot-cost-{guest}")).expect("every VM slot");

    // ── 1 ∥ 2. The minimal user-data and the full payload, side by side ──
    let (minimal, full) = std::thread::scope(|s| {
        let minimal = s.spawn(|| minimal_boots(&image, guest, lock));
        let full = full_payload(&labctl_bin(), &hello, &image, true);
        let (minimal, lock) = minimal.join().expect("the minimal boots");
        drop(lock);
        (minimal, full)
    });
    let before = std::env::var_os("LAB_AGENT_BOOT_COST_BEFORE").map(|labctl| {
        let lock =
            VmLock::acquire_all(&format!("vm-boot-cost-before-{guest}")).expect("every VM slot");
        let before = full_payload(Path::new(&labctl), &hello, &image, false);
        drop(lock);
        before
    });
    // The behaviour test's check holds here too; a benchmark of a payload
    // whose bulk is YAML-parsed again would measure the wrong thing.
    full.assert_bulk_never_yaml();

    // ── Figures ───────────────────────────────────────────────────────────
    let mut figures = Figures::default();
    figures.row(
        "minimal user-data, first boot (result.json on the console)",
        "qemu start",
        None,
        Some(minimal.first),
    );
    figures.row(
        "minimal user-data, after a reboot",
        RESTART,
        None,
        Some(minimal.again),
    );
    full.rows(&mut figures, "full hello-lab payload");
    if let Some(b) = &before {
        b.rows(&mut figures, "before: the older labctl's payload");
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
        full.budget.trim_start_matches("budget: ")
    );
    let mut payloads = vec![("boot cost", &full)];
    if let Some(b) = &before {
        eprintln!("before: {}", b.budget.trim_start_matches("budget: "));
        payloads.push(("before", b));
    }
    for (name, p) in &payloads {
        eprintln!(
            "{name}, first boot (ready vs result.json): {}",
            ratio(p.first, minimal.first)
        );
        eprintln!(
            "{name}, after a reboot (ready vs result.json): {}",
            ratio(p.again, minimal.again)
        );
    }
    for (name, min, full) in [
        ("first boot", &minimal.first_stages, &full.first_stages),
        ("after a reboot", &minimal.again_stages, &full.again_stages),
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
    let mut yaml = vec![("minimal", &minimal.yaml), ("full", &full.yaml)];
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

/// The guest's image and hello-lab, with the static agent and `labctl`
/// brought up to date before any VM slot is taken: a build during a boot
/// would hold the slot and slow the boot.
fn image_and_hello_lab(guest: GuestOs) -> (VmImage, PathBuf) {
    let image = image(guest);
    static_agent_for(image.os.arch());
    labctl_bin();
    (image, repo_root().join("examples/hello-lab"))
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

impl FullPayload {
    /// cloud-init never YAML-parses the payload's bulk: on both boots of
    /// the guest's log, every load is smaller than 16 KiB (the cloud-config
    /// part is ~2 KiB, the payload ~660 KiB).
    fn assert_bulk_never_yaml(&self) {
        let (yaml, budget) = (&self.yaml, &self.budget);
        assert_eq!(yaml.len(), 2, "two boots in the log: {yaml:?}");
        for (boot, loads) in yaml.iter().enumerate() {
            assert!(!loads.is_empty(), "boot {boot}: no YAML loads logged?");
            let largest = loads.iter().map(|l| l.bytes).max().unwrap_or(0);
            assert!(
                largest < 16 * 1024,
                "boot {boot}: cloud-init YAML-parsed {largest} bytes at once: the payload's \
                 bulk is in the YAML again ({budget})"
            );
        }
    }

    /// Its first boot (`labctl try`'s figures) and its reboot, as rows.
    fn rows(&self, figures: &mut Figures, what: &str) {
        figures.row(
            &format!("{what}, first boot (`labctl try --kernel`)"),
            "qemu start",
            Some(self.answer),
            Some(self.first),
        );
        figures.row(
            &format!("{what}, after a reboot (`labctl wait`)"),
            RESTART,
            None,
            Some(self.again),
        );
    }
}

/// hello-lab's full payload by `labctl try --kernel --keep` (`labctl` may be
/// an older build), then a reboot from inside and `labctl wait`, then
/// `stop.sh`. With `student_step`, the student's step and grading through
/// the commands `try` printed, before and after the reboot.
fn full_payload(labctl: &Path, hello: &Path, image: &VmImage, student_step: bool) -> FullPayload {
    let mut cmd = on_kernel_with(labctl, "try", hello, image);
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
