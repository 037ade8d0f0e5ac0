//! The serial console, as qemu writes it to a file (`-serial file:`).

use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{QemuError, tail_lines};

/// How often the log is re-read while waiting.
const POLL: Duration = Duration::from_millis(50);

/// A position in the console log: waits from a mark only see what was
/// printed after it (e.g. the second boot's `final_message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ConsoleMark(pub usize);

/// The whole log so far, lossily decoded.
pub fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// The current end of the log.
pub fn mark(path: &Path) -> ConsoleMark {
    ConsoleMark(
        std::fs::metadata(path)
            .map(|m| m.len() as usize)
            .unwrap_or(0),
    )
}

/// Boot milestones as they appear on the console, in boot order, and what
/// to call them.
const MILESTONES: &[(&str, &str)] = &[
    ("Linux version", "the kernel is starting"),
    ("systemd[1]:", "systemd is starting services"),
    ("running 'init-local'", "cloud-init: init-local stage"),
    ("running 'init'", "cloud-init: init stage (write_files)"),
    ("running 'modules:config'", "cloud-init: config stage"),
    (
        "running 'modules:final'",
        "cloud-init: final stage (runcmd)",
    ),
    (" finished at ", "cloud-init has finished"),
    ("reboot: Restarting system", "rebooting"),
    ("reboot: Power down", "powered off"),
];

/// Where a boot stands by the console's last milestone (the kernel, systemd,
/// each cloud-init stage), for progress displays; `None` before any.
pub fn milestone(text: &str) -> Option<&'static str> {
    MILESTONES
        .iter()
        .filter_map(|(needle, name)| text.rfind(needle).map(|at| (at, *name)))
        .max_by_key(|(at, _)| *at)
        .map(|(_, name)| name)
}

/// Whether the guest's Linux kernel has printed anything: its banner
/// (`Linux version …`), a line with a printk timestamp (`[    0.000000] …`)
/// or a later milestone (systemd, cloud-init: a kernel started with `quiet`
/// prints little of its own).
///
/// What the firmware and a bootloader print does not count: SeaBIOS's
/// lines, GRUB's `Loading Linux …`, and even the kernel's own real-mode
/// setup (`Probing EDD …`, printed through the BIOS) all appear before the
/// guest leaves real mode, which is where a lying KVM stops.
pub fn kernel_started(text: &str) -> bool {
    milestone(text).is_some() || text.lines().any(has_printk_timestamp)
}

/// What the guest's system prints once it runs from its root file system:
/// systemd's first lines (`systemd[1]: Inserted module …`, 7–13 s after
/// the kernel's `Run /init as init process` under TCG, the initramfs's
/// time), or cloud-init's first stage. Before it, the root file system has
/// not been written and nothing of the payload has run.
pub const SYSTEM_STARTED: &str = "systemd[1]:";

/// Whether the guest's own system has started (see [`SYSTEM_STARTED`]).
pub fn system_started(text: &str) -> bool {
    text.contains(SYSTEM_STARTED) || text.contains("running 'init-local'")
}

/// The kernel's RCU stall report, if `text` has one: a kernel that has
/// made no progress for the stall timeout (21 s on Debian's kernels). Under
/// TCG on a loaded host with two vCPUs, a Debian 12 kernel once hung that
/// way bringing up its second CPU ("rcu_preempt kthread timer wakeup didn't
/// happen"), and a Debian 13 one in its initramfs, its first CPU halted and
/// never woken ("Possible timer handling issue on cpu=0"); both printed
/// only such reports for minutes.
pub fn kernel_stall(text: &str) -> Option<&str> {
    text.lines()
        .find(|l| l.contains("rcu: INFO: ") && l.contains("detected stall"))
        .map(str::trim)
}

/// `[  SECONDS.MICROS] …` at the start of a line (after any `\r`).
fn has_printk_timestamp(line: &str) -> bool {
    let Some(rest) = line.trim_start_matches('\r').strip_prefix('[') else {
        return false;
    };
    let Some((stamp, _)) = rest.split_once(']') else {
        return false;
    };
    let Some((secs, micros)) = stamp.trim_start().split_once('.') else {
        return false;
    };
    !secs.is_empty()
        && secs.bytes().all(|b| b.is_ascii_digit())
        && micros.len() == 6
        && micros.bytes().all(|b| b.is_ascii_digit())
}

/// What a wait needs from the VM while it polls.
pub(crate) struct Watch<'a> {
    pub path: &'a Path,
    /// `Some(status)` once qemu has exited.
    pub exited: &'a dyn Fn() -> Option<String>,
    pub stderr: &'a dyn Fn() -> String,
}

/// Waits until `needle` shows up after `from`. Returns the instant it was
/// seen; fails early if qemu exits or the kernel panics.
pub(crate) fn wait_for(
    watch: &Watch<'_>,
    from: ConsoleMark,
    needle: &str,
    timeout: Duration,
) -> Result<Instant, QemuError> {
    let started = Instant::now();
    loop {
        let bytes = std::fs::read(watch.path).unwrap_or_default();
        let new = String::from_utf8_lossy(bytes.get(from.0..).unwrap_or_default());
        if new.contains(needle) {
            return Ok(Instant::now());
        }
        let console_tail = || tail_lines(&new, 30);
        if new.contains("Kernel panic - not syncing") {
            return Err(QemuError::KernelPanic {
                console_log: watch.path.to_owned(),
                console_tail: console_tail(),
            });
        }
        if let Some(status) = (watch.exited)() {
            return Err(QemuError::QemuExited {
                status,
                waiting_for: format!("{needle:?} on the console"),
                stderr: (watch.stderr)(),
                console_log: watch.path.to_owned(),
                console_tail: console_tail(),
            });
        }
        if started.elapsed() >= timeout {
            return Err(QemuError::ConsoleTimeout {
                needle: needle.to_owned(),
                waited: started.elapsed(),
                console_log: watch.path.to_owned(),
                console_tail: console_tail(),
            });
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch_file(text: &str) -> (PathBuf, impl Drop) {
        struct Rm(PathBuf);
        impl Drop for Rm {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let path = std::env::temp_dir().join(format!(
            "lab-agent-console-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, text).unwrap();
        (path.clone(), Rm(path))
    }

    fn wait(
        text: &str,
        from: ConsoleMark,
        needle: &str,
        exited: Option<&str>,
    ) -> Result<Instant, QemuError> {
        let (path, _rm) = watch_file(text);
        let exited = || exited.map(str::to_owned);
        let stderr = || "qemu said something".to_owned();
        let watch = Watch {
            path: &path,
            exited: &exited,
            stderr: &stderr,
        };
        wait_for(&watch, from, needle, Duration::from_millis(200))
    }

    #[test]
    fn milestones_follow_the_boot() {
        assert_eq!(milestone(""), None);
        let mut text = String::from("[    0.000000] Linux version 6.1.0-56-cloud-amd64\n");
        assert_eq!(milestone(&text), Some("the kernel is starting"));
        text.push_str("[   23.2] systemd[1]: Reached target swap.target\n");
        assert_eq!(milestone(&text), Some("systemd is starting services"));
        text.push_str("cloud-init[244]: Cloud-init v. 22.4.2 running 'init-local' at …\n");
        assert_eq!(milestone(&text), Some("cloud-init: init-local stage"));
        text.push_str("cloud-init[266]: Cloud-init v. 22.4.2 running 'init' at …\n");
        assert_eq!(
            milestone(&text),
            Some("cloud-init: init stage (write_files)")
        );
        text.push_str("cloud-init[345]: Cloud-init v. 22.4.2 running 'modules:final' at …\n");
        assert_eq!(milestone(&text), Some("cloud-init: final stage (runcmd)"));
        text.push_str("cloud-init[345]: Cloud-init v. 22.4.2 finished at Sun, 29 Nov 2026\n");
        assert_eq!(milestone(&text), Some("cloud-init has finished"));
        text.push_str("[  118.3] reboot: Restarting system\n[    0.000000] Linux version 6.1\n");
        assert_eq!(milestone(&text), Some("the kernel is starting"));
    }

    #[test]
    fn only_the_kernel_itself_proves_it_runs() {
        // What a lying KVM printed here (a `-kernel` boot through SeaBIOS's
        // linuxboot ROM), and a bootloader's lines: none of it is Linux
        // running.
        let firmware = "SeaBIOS (version 1.16.3-debian-1.16.3-2)\r\n\
                        iPXE (https://ipxe.org) 00:03.0 CA00 PCI2.10 PnP PMM+3EFCAE60+3EF0AE60 CA00\r\n\
                        Booting from ROM..\r\n\
                        Probing EDD (edd=off to disable)... ok\r\n";
        assert!(!kernel_started(firmware));
        let grub = "Booting `Debian GNU/Linux'\r\n\r\nLoading Linux 6.1.0-28-cloud-amd64 ...\r\n\
                    Loading initial ramdisk ...\r\n[1.0] not a printk stamp\r\n[   x.000000] nor this\r\n";
        assert!(!kernel_started(grub));
        assert!(!kernel_started(""));
        // The banner, any printk line, or (for a `quiet` kernel) a later
        // milestone.
        assert!(kernel_started(&format!(
            "{firmware}[    0.000000] Linux version 6.1.0-28-cloud-amd64\n"
        )));
        assert!(kernel_started(&format!(
            "{grub}\r[    0.412345] x86/fpu: Supporting XSAVE feature 0x001\r\n"
        )));
        assert!(kernel_started(
            "[12345.678901] printk: console [ttyS0] enabled\n"
        ));
        assert!(kernel_started(
            "cloud-init[266]: Cloud-init v. 22.4.2 running 'init' at …\n"
        ));
    }

    #[test]
    fn a_stall_before_the_system_starts_is_told_from_a_boot() {
        let hung = "[    0.000000] Linux version 6.1.0-40-amd64\n\
                    [   21.120431] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n\
                    [   21.120900] rcu: \t1-...!: (0 ticks this GP) idle=ec28/0/0x0\n";
        assert_eq!(
            kernel_stall(hung),
            Some("[   21.120431] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:")
        );
        assert!(!system_started(hung));
        let self_detected = "[ 30.1] rcu: INFO: rcu_sched self-detected stall on CPU\n";
        assert!(kernel_stall(self_detected).is_some());
        let fine = "[    0.749302] rcu: Hierarchical SRCU implementation.\n\
                    [    3.210000] Run /init as init process\n";
        assert_eq!(kernel_stall(fine), None);
        // The initramfs runs before the system: a stall there still counts.
        assert!(!system_started(fine));
        assert!(system_started(
            "[   16.182081] systemd[1]: Inserted module 'autofs4'\n"
        ));
        assert!(system_started(
            "[   40.1] cloud-init[312]: Cloud-init v. 25.1.4 running 'init-local' at …\n"
        ));
    }

    #[test]
    fn finds_the_needle_only_after_the_mark() {
        let text = "boot 1: FINAL\nboot 2: ...\n";
        assert!(wait(text, ConsoleMark(0), "FINAL", None).is_ok());
        let err = wait(text, ConsoleMark(10), "FINAL", None).unwrap_err();
        assert!(matches!(err, QemuError::ConsoleTimeout { .. }), "{err}");
        assert!(err.to_string().contains("boot 2"), "{err}");
    }

    #[test]
    fn a_kernel_panic_fails_at_once() {
        let text = "[ 1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n";
        let err = wait(text, ConsoleMark(0), "FINAL", None).unwrap_err();
        assert!(matches!(err, QemuError::KernelPanic { .. }), "{err}");
    }

    #[test]
    fn qemu_exiting_fails_at_once_with_its_stderr() {
        let err = wait("booting\n", ConsoleMark(0), "FINAL", Some("exit status: 1")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, QemuError::QemuExited { .. }), "{msg}");
        assert!(
            msg.contains("qemu said something") && msg.contains("booting"),
            "{msg}"
        );
    }
}
