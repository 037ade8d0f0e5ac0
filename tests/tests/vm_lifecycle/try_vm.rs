//! `labctl try` in a VM:
//! - `--kernel/--initrd/--rootfs --keep` on hello-lab, right after a boot
//!   of the same guest with a minimal user-data: the payload's boot cost,
//!   back to back; then the student's step through the commands `try`
//!   printed, and its `stop.sh`;
//! - `--vm IMAGE` on a disk image whose "bootloader" is a boot sector that
//!   prints a line (no cloud image can be downloaded here): the BIOS boots
//!   the overlay, the image is untouched, a VM that never answers times
//!   out with its console shown and kept, and qemu is stopped;
//! - argument errors, before anything starts.

use crate::failing::{agent_line, kept_console, process_is_qemu, qemu_pid};
use crate::support::*;
use lab_agent_tests::local::{TempDir, describe, labctl};
use lab_agent_tests::vm::{BootOptions, Vm, VmLock};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// The same guest with a minimal user-data. It doubles as the harness's smoke
/// test: runcmd leaves a marker, and a transient unit waits for
/// `result.json`, prints it on the console, then serves HTTP on the agent's
/// port. Needles are split (`"A-""B"`) so that only the guest's output can
/// match, never an echo of the config.
const MINIMAL: &str = r#"#cloud-config
runcmd:
  - [ sh, -c, 'echo smoke > /root/smoke-marker' ]
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
        if [ -f /root/smoke-marker ]; then echo "SMOKE-MARKER-""OK"; fi
      } > /dev/ttyS0 2>&1
      cd /root && exec python3 -m http.server --bind 0.0.0.0 8899
"#;

const BOOT: Duration = Duration::from_secs(600);

#[test]
fn try_kernel_keep_and_the_payload_boot_cost() {
    let image = image();
    let hello = repo_root().join("examples/hello-lab");
    static_agent();
    let lock = VmLock::acquire("vm-boot-cost").expect("the VM lock");

    // The minimal boot.
    let vm =
        Vm::boot_with(&image, BootOptions::new("vm-minimal", MINIMAL), lock).expect("qemu starts");
    // slirp accepts TCP at once; the harness must not take that for "up".
    assert!(
        vm.http_get("/", None).is_err(),
        "an HTTP answer before the guest even booted"
    );
    let t_minimal = vm
        .wait_for_console("MINIMAL-RESULT-JSON", BOOT)
        .unwrap_or_else(|e| panic!("the minimal boot did not finish: {e}"));
    let console = vm.console_text();
    let minimal_stages = cloud_init_stages(&console);
    // The harness's smoke checks: cloud-init ran the user-data to the end
    // without errors, from the NoCloud seed, and the forward carries HTTP.
    let result = between(&console, "MINIMAL-RESULT-BEGIN", "MINIMAL-RESULT-JSON");
    let result: Value = serde_json::from_str(result.trim())
        .unwrap_or_else(|e| panic!("result.json is not JSON ({e}): {result:?}"));
    assert_eq!(
        result["v1"]["errors"],
        serde_json::json!([]),
        "cloud-init reported errors: {result}"
    );
    let datasource = result["v1"]["datasource"].as_str().unwrap_or_default();
    assert!(datasource.contains("NoCloud"), "datasource {datasource:?}");
    assert!(
        console.contains("SMOKE-MARKER-OK"),
        "runcmd's marker file is missing"
    );
    let (_, answer) = vm
        .wait_for_http("/", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no HTTP through the port forward: {e}"));
    assert_eq!(answer.status, 200, "{}", answer.raw);
    let off = vm.powerdown(Duration::from_secs(30)).expect("power-off");
    assert!(
        matches!(off, lab_agent_tests::vm::PowerOff::Clean(_)),
        "ACPI power-off was ignored: {off:?}"
    );
    let lock = vm.release();

    // The full payload, at once, by `labctl try --keep`.
    let mut cmd = try_kernel(&hello, &image);
    cmd.args(["--keep", "--json"]);
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
    let (t_answer, t_ready) = figures_line(err);
    let pid = qemu_pid(err);
    let (url, token_file) = agent_line(
        err.lines()
            .find(|l| l.contains("agent at http://"))
            .unwrap(),
    );
    let console_path = between(err, "serial console log: `", "`");
    let full_stages = cloud_init_stages(&std::fs::read_to_string(&console_path).unwrap());
    let stop_script = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("sh "))
        .expect("a stop command")
        .to_owned();

    // The VM is still there: the student's step, then grade again.
    assert!(process_is_qemu(pid), "--keep left qemu {pid} running");
    let conn = Conn { url, token_file };
    let step = conn.exec(Some("student"), "chmod +x ~/hello.sh && ~/hello.sh");
    assert_eq!(
        String::from_utf8_lossy(&step.stdout),
        "Hello from student\n"
    );
    let graded = conn.labctl("grade", &[hello.to_str().unwrap()]);
    assert_eq!(graded.status.code(), Some(0), "{}", describe(&graded));
    assert!(
        String::from_utf8_lossy(&graded.stdout).ends_with("hello-lab: all 4 checks passed\n"),
        "{}",
        describe(&graded)
    );

    // `stop.sh` stops it and removes everything.
    let stopped = Command::new("sh").arg(&stop_script).output().unwrap();
    assert!(stopped.status.success(), "{}", describe(&stopped));
    drop(lock);
    assert!(!process_is_qemu(pid), "qemu {pid} still runs after stop.sh");
    let run_dir = std::path::Path::new(&stop_script).parent().unwrap();
    assert!(!run_dir.exists(), "`{}` is left", run_dir.display());

    // Figures.
    let budget = err
        .lines()
        .find(|l| l.starts_with("budget:"))
        .unwrap_or("budget: ?");
    let mut figures = Figures::default();
    figures.row(
        "minimal user-data (result.json on the console)",
        "qemu start",
        None,
        Some(t_minimal),
    );
    figures.row(
        "full hello-lab payload, `labctl try --kernel`",
        "qemu start",
        Some(t_answer),
        Some(t_ready),
    );
    figures.print("try-vm");
    eprintln!(
        "boot cost: minimal user-data ({} bytes) → result.json {}; full payload ({}) → ready {}: \
         +{:.1} s (×{:.2})",
        MINIMAL.len(),
        secs(t_minimal),
        budget.trim_start_matches("budget: "),
        secs(t_ready),
        t_ready.as_secs_f64() - t_minimal.as_secs_f64(),
        t_ready.as_secs_f64() / t_minimal.as_secs_f64()
    );
    eprintln!("boot cost by cloud-init stage (guest uptime when each stage began, s):");
    eprintln!(
        "  {:<16} {:>8} {:>8} {:>8}",
        "stage", "minimal", "full", "+"
    );
    for (stage, full) in &full_stages {
        let min = minimal_stages
            .iter()
            .find(|(s, _)| s == stage)
            .map(|(_, up)| *up);
        eprintln!(
            "  {stage:<16} {:>8} {full:>8.1} {:>8}",
            min.map_or("-".into(), |m| format!("{m:.1}")),
            min.map_or("-".into(), |m| format!("{:+.1}", full - m)),
        );
    }
    assert!(
        full_stages.iter().any(|(s, _)| s == "finished"),
        "cloud-init's final message is on the console: {full_stages:?}"
    );
}

/// A disk image that "boots" only a boot sector printing a line on the
/// serial port and halting: enough to show that `--vm IMAGE` boots the
/// image's own bootloader from an overlay, and what `try` does with a VM
/// whose agent never answers.
#[test]
fn try_vm_image_boots_its_bootloader_and_a_silent_vm_times_out() {
    // Not booted, but it installs qemu, or fails saying why it cannot.
    image();
    let dir = TempDir::new("vm-disk-image");
    let raw = dir.join("disk.raw");
    std::fs::write(&raw, printing_boot_sector("LABCTL-DISK-BOOTED")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&raw)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    // Cloud images come as qcow2: the overlay must name that format.
    let image = dir.join("disk.qcow2");
    let out = Command::new("qemu-img")
        .args(["convert", "-q", "-O", "qcow2"])
        .arg(&raw)
        .arg(&image)
        .output()
        .expect("qemu-img");
    assert!(out.status.success(), "{}", describe(&out));
    let before = std::fs::read(&image).unwrap();
    static_agent();

    let lock = VmLock::acquire("vm-disk-image").expect("the VM lock");
    let out = labctl([
        "try",
        repo_root().join("examples/hello-lab").to_str().unwrap(),
        "--agent",
        static_agent().to_str().unwrap(),
        "--vm",
        image.to_str().unwrap(),
        "--accel",
        "tcg",
        "--memory",
        "256",
        "--timeout",
        "10",
    ]);
    drop(lock);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    for needle in [
        "accelerator: TCG (as asked)",
        "was not ready after",
        "console (last lines):",
        "LABCTL-DISK-BOOTED",
        "stopped the VM",
    ] {
        assert!(err.contains(needle), "{needle:?} not in:\n{err}");
    }
    let pid = qemu_pid(&err);
    assert!(!process_is_qemu(pid), "qemu {pid} still runs");
    let console = kept_console(&err);
    assert!(
        std::fs::read_to_string(&console)
            .unwrap()
            .contains("LABCTL-DISK-BOOTED"),
        "the BIOS booted the image's boot sector"
    );
    std::fs::remove_dir_all(console.parent().unwrap()).unwrap();
    assert_eq!(
        std::fs::read(&image).unwrap(),
        before,
        "the image was written"
    );
}

#[test]
fn vm_arguments_are_checked_before_anything_starts() {
    let hello = repo_root().join("examples/hello-lab");
    let hello = hello.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["--vm", "/nonexistent/cloud.qcow2"],
            "`--vm /nonexistent/cloud.qcow2` is not a file",
        ),
        (vec!["--kernel", "/k"], "--initrd"),
        (vec!["--rootfs", "/r"], "--kernel"),
        (vec!["--memory", "512"], "`--memory` only applies to a VM"),
        (vec!["--accel", "kvm"], "`--accel` only applies to a VM"),
        (vec!["--vm", "/a", "--kernel", "/k"], "cannot be used with"),
    ] {
        let mut argv = vec!["try", hello];
        argv.extend(&args);
        let out = labctl(&argv);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            describe(&out)
        );
    }
}

/// "vm: qemu start → agent answered A s → ready R s".
fn figures_line(stderr: &str) -> (Duration, Duration) {
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

fn between(text: &str, start: &str, end: &str) -> String {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in:\n{text}"))
        + start.len();
    text[at..at + text[at..].find(end).unwrap()].to_owned()
}

/// A BIOS boot sector: `xor ax,ax; mov ds,ax; mov si,msg; mov dx,0x3f8;
/// next: lodsb; test al,al; jz done; out dx,al; jmp next; done: cli; hlt;
/// jmp $-1`, then `msg` (CR LF NUL), padded, signed `55 AA`.
fn printing_boot_sector(msg: &str) -> Vec<u8> {
    #[rustfmt::skip]
    let mut s = vec![
        0x31, 0xc0, 0x8e, 0xd8, // xor ax,ax; mov ds,ax
        0xbe, 0x16, 0x7c,       // mov si, 0x7c16 (msg)
        0xba, 0xf8, 0x03,       // mov dx, 0x3f8 (COM1)
        0xac,                   // next: lodsb
        0x84, 0xc0, 0x74, 0x03, // test al,al; jz done
        0xee, 0xeb, 0xf8,       // out dx,al; jmp next
        0xfa, 0xf4, 0xeb, 0xfd, // done: cli; hlt; jmp back to hlt
    ];
    assert_eq!(s.len(), 0x16);
    s.extend_from_slice(msg.as_bytes());
    s.extend_from_slice(b"\r\n\0");
    s.resize(510, 0);
    s.extend_from_slice(&[0x55, 0xaa]);
    s
}
