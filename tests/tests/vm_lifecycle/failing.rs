//! A lab whose setup fails (scenario 2), booted by `labctl try --vm DISK`
//! from the guest's bootable disk image, the way a lab author boots a cloud
//! image (BIOS, GRUB, the kernel from the disk; `try`'s failure path: exit
//! 4, the setup log, the VM stopped, the console log kept) while a
//! backend's `labctl wait` runs beside it: that wait ends at once with the
//! exit code and the log tail, long before its timeout. On each guest, so
//! `try --vm` with a bootloader is proven on both (and, by the arm64
//! command, on arm64's UEFI: `try --vm DISK --arch arm64`).

use crate::support::*;
use lab_agent_tests::local::TempDir;
use lab_agent_tests::vm::{Arch, GuestOs, VmLock};
use std::path::PathBuf;
use std::time::Duration;

/// How long the failing setup runs before it fails.
const SETUP_SECS: u64 = 10;

const SETUP: &str = "#!/bin/sh\n\
    echo \"preparing the lab from $LAB_DIR\"\n\
    sleep 10\n\
    echo 'fatal: cannot reach the package mirror' >&2\n\
    exit 7\n";

per_guest!(a_failing_setup_fails_fast_with_exit_code_and_log_tail; arm64);

fn a_failing_setup_fails_fast_with_exit_code_and_log_tail(guest: GuestOs) {
    let image = image(guest);
    let lab = TempDir::new("vm-failing-lab");
    lab.write(
        "lab.toml",
        "name = \"broken-lab\"\n[setup]\nscript = \"setup.sh\"\n\
         [[checks]]\nname = \"never graded\"\nrun = \"true\"\n",
        0o644,
    );
    lab.write("setup.sh", SETUP, 0o755);
    static_agent_for(guest.arch());

    let lock = VmLock::acquire(&format!("vm-failing-{guest}")).expect("a VM slot");
    let mut tried = Running::spawn(on_disk("try", &lab.path, &image), "try");
    let line = tried.wait_for_line("agent at http://", Duration::from_secs(60));
    let (url, token_file) = agent_line(&line);
    let qemu_pid = qemu_pid(&tried.wait_for_line("qemu pid ", Duration::from_secs(5)));
    let conn = Conn { url, token_file };

    let token = std::fs::read_to_string(&conn.token_file).unwrap();
    let probe = Probe::start(
        conn.url.trim_start_matches("http://").parse().unwrap(),
        token.trim(),
        tried.started,
    );
    let wait = Running::spawn(
        conn.command("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]),
        "wait",
    );
    let waited = wait.finish();
    // The probe polls on its own; give it a moment to see `failed` too
    // (`labctl try` powers the VM off right after the failure).
    probe.wait_for_state("failed", Duration::from_secs(3));
    let t_setting_up = probe.seen_state("setting_up").map(|(first, _)| first);
    let t_failed = probe.seen_state("failed").map(|(first, _)| first);
    let t_answer = probe.first_answer();
    let seq = probe.state_sequence();
    probe.stop();

    // `labctl wait`: exit 4 at once, with the exit code and the log tail.
    assert_eq!(waited.code, Some(4), "labctl wait: {waited}");
    assert!(waited.stderr.contains("exit code 7"), "{waited}");
    assert!(
        waited
            .stderr
            .contains("fatal: cannot reach the package mirror"),
        "{waited}"
    );
    assert!(
        waited.stderr.contains("preparing the lab from /opt/lab"),
        "{waited}"
    );
    assert!(
        waited.took < Duration::from_secs(WAIT_TIMEOUT_SECS / 2),
        "{waited}"
    );
    // Within seconds of the failure: the setup fails SETUP_SECS after it
    // starts (the probe saw it running; `labctl try` stops the VM right
    // after the failure, so the probe may or may not catch `failed`).
    let t_returned = waited.exited - tried.started;
    let t_setting_up =
        t_setting_up.unwrap_or_else(|| panic!("the probe never saw `setting_up`: {seq:?}"));
    assert!(
        t_returned < t_setting_up + Duration::from_secs(SETUP_SECS + 10),
        "labctl wait returned {:.1} s after setup was seen running",
        (t_returned - t_setting_up).as_secs_f64()
    );
    if let Some(t_failed) = t_failed {
        assert!(
            t_returned < t_failed + Duration::from_secs(3),
            "labctl wait returned {:.1} s after the agent reported `failed`",
            (t_returned - t_failed).as_secs_f64()
        );
    }

    // `labctl try`: exit 4 too, the setup log, the VM stopped, the console kept.
    let tried = tried.finish();
    drop(lock);
    assert_eq!(tried.code, Some(4), "labctl try: {tried}");
    assert!(
        tried
            .stderr
            .contains("fatal: cannot reach the package mirror"),
        "{tried}"
    );
    assert!(tried.stderr.contains("stopped the VM"), "{tried}");
    assert_eq!(tried.stdout, "", "no report without --keep-going");
    assert!(!process_is_qemu(qemu_pid), "qemu {qemu_pid} still runs");
    let console = kept_console(&tried.stderr);
    let text = std::fs::read_to_string(&console).unwrap();
    assert!(text.contains("Linux version"), "{}", console.display());
    // GRUB from the disk booted it, with its own command line (the kernel
    // path passes `root=/dev/vda`): the root file system is partition 1
    // on amd64, 2 on arm64 (after the EFI system partition).
    let root = match guest.arch() {
        Arch::Amd64 => "root=/dev/vda1",
        Arch::Arm64 => "root=/dev/vda2",
    };
    assert!(
        text.contains(root),
        "not booted by the disk's GRUB: {}",
        console.display()
    );
    let run_dir = console.parent().unwrap().to_owned();
    let left: Vec<String> = std::fs::read_dir(&run_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !left
            .iter()
            .any(|f| f == "token" || f == "user-data" || f == "seed"),
        "only logs are kept: {left:?}"
    );
    std::fs::remove_dir_all(&run_dir).unwrap();

    let mut figures = Figures::default();
    figures.row(
        &format!("2. failing setup, exit 7 after {SETUP_SECS} s (\"ready\": wait exits 4)"),
        "qemu start",
        t_answer,
        Some(t_returned),
    );
    figures.print(&format!("failing, {guest}, try --vm"));
    eprintln!(
        "failing: setup seen running {} after qemu start, `failed` seen {}; `labctl wait` \
         exited 4 {} after qemu start ({} after it started, timeout {WAIT_TIMEOUT_SECS} s)",
        secs(t_setting_up),
        t_failed.map_or("-".to_owned(), secs),
        secs(t_returned),
        secs(waited.took)
    );
}

/// URL and token file from `labctl try`'s "agent at URL (token in `F`)".
pub fn agent_line(line: &str) -> (String, PathBuf) {
    let url_at = line.find("agent at ").expect("agent at") + "agent at ".len();
    let url = line[url_at..].split_whitespace().next().unwrap().to_owned();
    let tok_at = line.find("(token in `").expect("token in") + "(token in `".len();
    let token = &line[tok_at..];
    (url, PathBuf::from(&token[..token.find('`').unwrap()]))
}

/// qemu's PID from "qemu pid N".
pub fn qemu_pid(line: &str) -> u32 {
    let at = line.find("qemu pid ").unwrap() + "qemu pid ".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Whether `pid` is (still) a qemu.
pub fn process_is_qemu(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("qemu-system"))
}

/// The path in "console log kept: `PATH`".
pub fn kept_console(stderr: &str) -> PathBuf {
    let line = stderr
        .lines()
        .find(|l| l.contains("console log kept: `"))
        .unwrap_or_else(|| panic!("no kept console log in:\n{stderr}"));
    let at = line.find('`').unwrap() + 1;
    PathBuf::from(&line[at..at + line[at..].find('`').unwrap()])
}
