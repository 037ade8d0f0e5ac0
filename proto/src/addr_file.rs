//! The address file of `lab-agent serve --addr-file FILE`: with `--listen`
//! on port 0, the agent writes the address it bound there ([`fn@write`]:
//! atomically, one line `IP:PORT`) before it serves. Whoever starts an agent on
//! loopback (`labctl try`, the tests, the bench) starts it with
//! [`serve_args`] and learns its port with [`wait`] (or [`read`]).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How often [`wait`] looks at the file.
const POLL: Duration = Duration::from_millis(5);

/// `serve --listen LISTEN --addr-file ADDR_FILE --token-file TOKEN_FILE
/// --state-dir STATE_DIR`: the command line every starter of an agent on
/// loopback begins with (`LISTEN` is `127.0.0.1:0` but where a test holds
/// a port); each adds its own flags after it.
pub fn serve_args(
    listen: &str,
    addr_file: &Path,
    token_file: &Path,
    state_dir: &Path,
) -> Vec<OsString> {
    vec![
        "serve".into(),
        "--listen".into(),
        listen.into(),
        "--addr-file".into(),
        addr_file.into(),
        "--token-file".into(),
        token_file.into(),
        "--state-dir".into(),
        state_dir.into(),
    ]
}

/// A free port on loopback, for [`serve_args`]'s `listen`.
pub const LOOPBACK_ANY_PORT: &str = "127.0.0.1:0";

/// What `lab-agent serve` does with the address it bound: `IP:PORT` and a
/// newline, written to a temporary file beside `path` and renamed over it,
/// so [`read`] sees the whole line or nothing.
pub fn write(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, format!("{addr}\n"))?;
    std::fs::rename(&tmp, path)
}

/// The address in `path`, once the agent has written it; `None` before.
/// (The agent renames a whole file into place, so a partial line is never
/// seen.)
pub fn read(path: &Path) -> Option<SocketAddr> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Why [`wait`] returned no address.
#[derive(Debug)]
pub enum WaitError {
    /// The agent exited before it wrote its address.
    Exited(ExitStatus),
    /// The agent could not be watched (`try_wait` failed).
    Watch(std::io::Error),
    /// Nothing came within the time given.
    TimedOut { path: PathBuf, within: Duration },
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::Exited(status) => write!(f, "lab-agent exited at start ({status})"),
            WaitError::Watch(e) => write!(f, "failed to watch lab-agent: {e}"),
            WaitError::TimedOut { path, within } => write!(
                f,
                "lab-agent wrote no address to `{}` within {within:?}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for WaitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WaitError::Watch(e) => Some(e),
            _ => None,
        }
    }
}

/// The address the agent `child` bound, as soon as it has written it to
/// `path`; an error when `child` exits first or nothing comes `within`.
/// Blocking: for threads, not for an async runtime (`labctl try` polls
/// [`read`] on its own timer).
pub fn wait(path: &Path, child: &mut Child, within: Duration) -> Result<SocketAddr, WaitError> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(addr) = read(path) {
            return Ok(addr);
        }
        match child.try_wait() {
            Ok(Some(status)) => return Err(WaitError::Exited(status)),
            Err(e) => return Err(WaitError::Watch(e)),
            Ok(None) => {}
        }
        if Instant::now() > deadline {
            return Err(WaitError::TimedOut {
                path: path.to_owned(),
                within,
            });
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn temp_file(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("addr-file-{tag}-{}", std::process::id()))
    }

    #[test]
    fn an_address_is_read_once_written_and_not_before() {
        let path = temp_file("read");
        let _ = std::fs::remove_file(&path);
        assert_eq!(read(&path), None);
        let addr: SocketAddr = "127.0.0.1:8899".parse().unwrap();
        write(&path, addr).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "127.0.0.1:8899\n");
        assert_eq!(read(&path), Some(addr));
        std::fs::write(&path, "not an address\n").unwrap();
        assert_eq!(read(&path), None);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_agent_that_exits_or_stays_silent_is_an_error_not_a_hang() {
        let path = temp_file("wait");
        let _ = std::fs::remove_file(&path);
        let mut gone = Command::new("true").spawn().unwrap();
        let e = wait(&path, &mut gone, Duration::from_secs(20)).unwrap_err();
        assert!(matches!(e, WaitError::Exited(s) if s.success()), "{e}");
        let mut silent = Command::new("sleep").arg("30").spawn().unwrap();
        let e = wait(&path, &mut silent, Duration::from_millis(50)).unwrap_err();
        let _ = silent.kill();
        let _ = silent.wait();
        assert!(matches!(e, WaitError::TimedOut { .. }), "{e}");
        assert!(e.to_string().contains("wrote no address"), "{e}");
    }
}
