//! How a VM ends ([`Stop`]): powered off or killed, its run dir removed or
//! its console log kept; or, with `--keep`, left running with a `stop.sh`
//! that stops it later.

use super::target::VmTarget;
use crate::qemu::{self, PowerOff, console};
use lab_agent_cloudinit::shell;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the guest gets to power off after ACPI before qemu is killed.
const POWEROFF_GRACE: Duration = Duration::from_secs(10);
/// Console lines shown when the VM failed.
const CONSOLE_TAIL_LINES: usize = 25;

/// How the VM stops, and what happens to the run dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// All went as asked: power off, remove everything.
    Discard,
    /// Ctrl-C or SIGTERM: kill qemu at once (the overlay is thrown away
    /// anyway), remove everything.
    Interrupted,
    /// The setup failed (its log was shown): keep the console log.
    KeepConsole,
    /// The VM failed: show the console's last lines and keep it.
    ShowConsole,
}

impl VmTarget {
    /// Stops qemu (ACPI power-off, else kill; at once when interrupted) and
    /// cleans the run dir as `how` says.
    pub fn stop(mut self, how: Stop) {
        if let Some(machine) = self.machine.take() {
            // A guest whose agent never answered is at best still booting,
            // and ignores ACPI that early: waiting for it is time lost.
            let never_answered = how == Stop::ShowConsole && self.first_answer.get().is_none();
            let off = if how == Stop::Interrupted || never_answered {
                machine.kill();
                PowerOff::Killed
            } else {
                machine.powerdown(POWEROFF_GRACE)
            };
            let p = self.prefix();
            match off {
                PowerOff::Killed if how == Stop::Interrupted => eprintln!("{p}stopped the VM"),
                PowerOff::Killed if never_answered => {
                    eprintln!("{p}stopped the VM (killed qemu: its agent never answered)")
                }
                PowerOff::Clean(took) => {
                    eprintln!("{p}stopped the VM (powered off in {took:.1?})")
                }
                PowerOff::Killed => eprintln!(
                    "{p}stopped the VM (killed qemu: no power-off within {POWEROFF_GRACE:?})"
                ),
            }
        }
        let console = self.dir.join("console.log");
        match how {
            Stop::Discard | Stop::Interrupted => remove_dir(&self.dir),
            Stop::KeepConsole | Stop::ShowConsole => {
                if how == Stop::ShowConsole {
                    let text = console::read(&console);
                    eprintln!("{}console (last lines):", self.prefix());
                    for line in qemu::tail_lines(&text, CONSOLE_TAIL_LINES).lines() {
                        eprintln!("  │ {line}");
                    }
                }
                keep_only(
                    &self.dir,
                    &["console.log", "qemu-stderr.log", "qemu-cmdline.txt"],
                );
                eprintln!("{}console log kept: `{}`", self.prefix(), console.display());
            }
        }
        // Nothing left for Drop.
        self.dir = PathBuf::new();
    }

    /// `--keep`: leaves qemu running and writes `stop.sh` into the run
    /// dir, which stays; returns what the caller prints to reach and stop it.
    pub fn leave_running(mut self) -> LeftRunning {
        let machine = self.machine.take().expect("running");
        let url = machine.agent_url();
        let vsock_url = machine.vsock_url();
        let console = machine.console_log_path().to_owned();
        let vsock_pid = machine.vsock_pid();
        let pid = machine.leave_running();
        let stop = self.dir.join("stop.sh");
        let stop_written = fs::write(&stop, stop_script(pid, vsock_pid, &self.dir));
        // The run dir stays.
        let dir = std::mem::take(&mut self.dir);
        LeftRunning {
            pid,
            url,
            vsock_url,
            token_file: self.token_file.clone(),
            console,
            stop,
            stop_written,
            dir,
        }
    }
}

/// A VM left running ([`VmTarget::leave_running`]).
#[derive(Debug)]
pub struct LeftRunning {
    /// qemu's PID.
    pub pid: u32,
    /// The agent's URL (a loopback port forward).
    pub url: String,
    /// The agent over the guest's vsock (`vsock+unix://`), if it has one.
    pub vsock_url: Option<String>,
    pub token_file: PathBuf,
    /// The serial console's log.
    pub console: PathBuf,
    /// `stop.sh`: stops the VM and removes the run dir.
    pub stop: PathBuf,
    /// Whether `stop.sh` was written.
    pub stop_written: std::io::Result<()>,
    /// The run dir.
    pub dir: PathBuf,
}

fn remove_dir(dir: &Path) {
    if let Err(e) = fs::remove_dir_all(dir) {
        eprintln!("warning: failed to remove `{}`: {e}", dir.display());
    }
}

/// Removes everything in `dir` but `keep` (the seed and the token go: the
/// user-data holds the token).
fn keep_only(dir: &Path, keep: &[&str]) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if keep.iter().any(|k| e.file_name() == *k) {
            continue;
        }
        let path = e.path();
        let _ = if e.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
    }
}

/// `stop.sh` for `--keep`: kills qemu (and its vsock backend,
/// `vsock_pid`) if `pid` is still the qemu of `dir`
/// (not a reused PID), waits for it, removes `dir`.
fn stop_script(pid: u32, vsock_pid: Option<u32>, dir: &Path) -> String {
    let dir = shell::word(&dir.display().to_string());
    let pids = match vsock_pid {
        Some(v) => format!("{pid} {v}"),
        None => pid.to_string(),
    };
    format!(
        "#!/bin/sh\n\
         # Written by `labctl try --keep`: stops the VM it left running and removes its files.\n\
         pid={pid}\n\
         dir={dir}\n\
         for p in {pids}; do\n\
         \x20   if tr '\\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -qF \"$dir/\"; then\n\
         \x20       kill \"$p\"\n\
         \x20       while kill -0 \"$p\" 2>/dev/null; do sleep 0.2; done\n\
         \x20   fi\n\
         done\n\
         rm -rf -- \"$dir\"\n\
         echo \"stopped the VM (qemu pid $pid) and removed $dir\"\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_script_checks_the_pid_is_still_this_qemu() {
        let s = stop_script(4242, Some(4243), Path::new("/tmp/labctl-try-vm-x'y"));
        assert!(s.contains("for p in 4242 4243; do"), "{s}");
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        assert!(s.contains("pid=4242\n"), "{s}");
        assert!(s.contains(r"dir='/tmp/labctl-try-vm-x'\''y'"), "{s}");
        assert!(s.contains("grep -qF \"$dir/\""), "{s}");
        assert!(s.contains("rm -rf -- \"$dir\""), "{s}");
    }

    #[test]
    fn only_the_console_logs_are_kept() {
        let dir = std::env::temp_dir().join(format!("labctl-keep-only-{}", std::process::id()));
        fs::create_dir_all(dir.join("seed")).unwrap();
        for f in [
            "console.log",
            "token",
            "user-data",
            "overlay.qcow2",
            "seed/user-data",
        ] {
            fs::write(dir.join(f), "x").unwrap();
        }
        keep_only(&dir, &["console.log", "qemu-stderr.log"]);
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["console.log"]);
        fs::remove_dir_all(dir).unwrap();
    }
}
