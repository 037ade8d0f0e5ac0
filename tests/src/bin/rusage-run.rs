//! `rusage-run REPORT COMMAND [ARGS…]`: runs COMMAND (stdio inherited),
//! reaps it with `wait4`, writes `MAX_RSS_KIB CPU_MICROS` to REPORT and
//! exits with the command's status (128 + signal if killed).
//!
//! Why a process of its own: Linux folds the peak RSS of the memory a
//! process had before `execve` into its `ru_maxrss`, and a child spawned
//! by a test process (vfork) had the test process's, so `wait4` there
//! reports the larger of the test process's peak and the command's. This
//! small program is that parent instead, so what is reported is the
//! command's own peak (or this program's few MiB, whichever is larger).

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [report, command, rest @ ..] = args.as_slice() else {
        eprintln!("usage: rusage-run REPORT COMMAND [ARGS…]");
        return ExitCode::from(2);
    };
    let child = match Command::new(command).args(rest).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rusage-run: failed to run `{command}`: {e}");
            return ExitCode::from(2);
        }
    };
    let pid = child.id() as nix::libc::pid_t;
    let mut status = 0;
    // SAFETY: wait4 on our own child fills the two it is given.
    let ru = unsafe {
        let mut ru: nix::libc::rusage = std::mem::zeroed();
        while nix::libc::wait4(pid, &mut status, 0, &mut ru) < 0 {
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                eprintln!("rusage-run: wait4: {}", std::io::Error::last_os_error());
                return ExitCode::from(2);
            }
        }
        ru
    };
    let micros = |t: nix::libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    let line = format!(
        "{} {}\n",
        ru.ru_maxrss,
        micros(ru.ru_utime) + micros(ru.ru_stime)
    );
    if let Err(e) = std::fs::write(report, line) {
        eprintln!("rusage-run: failed to write `{report}`: {e}");
        return ExitCode::from(2);
    }
    let status = std::process::ExitStatus::from_raw(status);
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(s)) => ExitCode::from(128 + s as u8),
        _ => ExitCode::from(2),
    }
}
