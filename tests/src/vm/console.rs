//! The serial console, as qemu writes it to a file (`-serial file:`).

use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{VmError, tail_lines};

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
) -> Result<Instant, VmError> {
    let started = Instant::now();
    loop {
        let bytes = std::fs::read(watch.path).unwrap_or_default();
        let new = String::from_utf8_lossy(bytes.get(from.0..).unwrap_or_default());
        if new.contains(needle) {
            return Ok(Instant::now());
        }
        let console_tail = || tail_lines(&new, 30);
        if new.contains("Kernel panic - not syncing") {
            return Err(VmError::KernelPanic {
                console_log: watch.path.to_owned(),
                console_tail: console_tail(),
            });
        }
        if let Some(status) = (watch.exited)() {
            return Err(VmError::QemuExited {
                status,
                waiting_for: format!("{needle:?} on the console"),
                stderr: (watch.stderr)(),
                console_log: watch.path.to_owned(),
                console_tail: console_tail(),
            });
        }
        if started.elapsed() >= timeout {
            return Err(VmError::ConsoleTimeout {
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
    ) -> Result<Instant, VmError> {
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
    fn finds_the_needle_only_after_the_mark() {
        let text = "boot 1: FINAL\nboot 2: ...\n";
        assert!(wait(text, ConsoleMark(0), "FINAL", None).is_ok());
        let err = wait(text, ConsoleMark(10), "FINAL", None).unwrap_err();
        assert!(matches!(err, VmError::ConsoleTimeout { .. }), "{err}");
        assert!(err.to_string().contains("boot 2"), "{err}");
    }

    #[test]
    fn a_kernel_panic_fails_at_once() {
        let text = "[ 1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n";
        let err = wait(text, ConsoleMark(0), "FINAL", None).unwrap_err();
        assert!(matches!(err, VmError::KernelPanic { .. }), "{err}");
    }

    #[test]
    fn qemu_exiting_fails_at_once_with_its_stderr() {
        let err = wait("booting\n", ConsoleMark(0), "FINAL", Some("exit status: 1")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, VmError::QemuExited { .. }), "{msg}");
        assert!(
            msg.contains("qemu said something") && msg.contains("booting"),
            "{msg}"
        );
    }
}
