//! Running the lab's setup script and recording its outcome: `lab-agent
//! setup` (from cloud-init's runcmd) and `lab-agent serve --run-setup`
//! (local use) both come here.
//!
//! The record goes `running` → `succeeded`/`failed` in `setup.json`; the
//! script's combined output goes to `setup.log` (0600: a setup may print
//! secrets) and, for `lab-agent setup`, to stdout as well, so it also lands
//! in cloud-init's output log.

pub mod record;

use crate::process::capture::{Sink, pump};
use crate::process::identity::Identity;
use crate::process::{self, Cwd, Jobs, Script, ShellCommand, Stdio};
use crate::readiness::current_boot_id;
use crate::readiness::instance::{CloudInitId, Traces};
use crate::readiness::root_disk::push_size;
use lab_agent_proto::SetupState;
use lab_agent_proto::guest::OnSmallRoot;
use lab_agent_proto::{INSTALL_ERROR_FILE, LAB_DIR_ENV};
use record::{RecordError, SETUP_LOG, SetupRecord};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Grace between SIGTERM and SIGKILL when the setup times out.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct SetupConfig {
    pub script: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub timeout: Duration,
    pub user: String,
    pub lab_dir: PathBuf,
    /// Copy the script's output to our stdout (`lab-agent setup`).
    pub echo: bool,
    /// The lab's `[readiness].min_root_bytes`: what a smaller root
    /// filesystem does is `on_small_root`'s.
    pub min_root_bytes: Option<u64>,
    /// `fail`: the setup fails before the script runs; `warn`: it runs,
    /// and `small_root_banner` tells the student's interactive shells.
    pub on_small_root: OnSmallRoot,
    /// Where the banner goes (`--small-root-banner`, default
    /// [`lab_agent_proto::guest::SMALL_ROOT_BANNER_PATH`]); removed when the root is large
    /// enough.
    pub small_root_banner: PathBuf,
    /// cloud-init's run dir, whose `.instance-id` binds the VM's life
    /// (`None`: not a VM of cloud-init's, `serve --no-cloud-init`).
    pub cloud_init_dir: Option<PathBuf>,
    /// The lab's variables (`--env-file`); `main` reads it before the run.
    pub env_file: PathBuf,
}

/// What happened, for the caller's exit status.
#[derive(Debug, Clone)]
pub struct SetupOutcome {
    pub record: SetupRecord,
    /// The status `lab-agent setup` exits with: the script's own, 128+signal
    /// when killed, 124 on timeout (as timeout(1)), 127/126 when it could not
    /// be found/started, 1 when the payload's installer failed before it.
    pub exit_status: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("failed to create the state directory `{path}`: {source}")]
    StateDir { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// Runs the setup and records it. Errors are only for when the outcome could
/// not be *recorded*; a failing script is a successful run of this function
/// with a `failed` record.
pub async fn run(cfg: &SetupConfig, jobs: &Jobs) -> Result<SetupOutcome, SetupError> {
    prepare_state_dir(&cfg.state_dir)?;
    // On a first boot the setup may start before the agent does: the disk's
    // identity is made by whichever comes first.
    let ci = CloudInitId::read(cfg.cloud_init_dir.as_deref());
    if let Err(e) = crate::readiness::instance::observe_boot(&cfg.state_dir, &ci, &Traces::guest())
    {
        tracing::warn!(error = %e, "failed to record this disk's instance");
    }
    // The wall clock is for the record; the duration is measured on the
    // monotonic clock (a first boot's NTP step would corrupt it).
    let started = Instant::now();
    let mut record = SetupRecord {
        state: SetupState::Running,
        started_at: crate::timefmt::rfc3339(SystemTime::now()),
        finished_at: None,
        exit_code: None,
        signal: None,
        timed_out: false,
        duration_ms: None,
        error: None,
        script: cfg.script.as_ref().map(|p| p.display().to_string()),
        pid: Some(std::process::id()),
        boot_id: current_boot_id(),
        started_boot_ms: Some(crate::readiness::timeline::since_boot_ms()),
        finished_boot_ms: None,
        min_root_bytes: cfg.min_root_bytes,
    };
    record::write(&cfg.state_dir, &record)?;

    let mut log = Tee::open(&cfg.state_dir.join(SETUP_LOG), cfg.echo);
    let exit_status = execute(cfg, jobs, &mut log, &mut record).await;
    if let Some(e) = &log.error {
        let note = format!("writing setup.log failed: {e}");
        record.error = Some(match record.error.take() {
            Some(prev) => format!("{prev}; {note}"),
            None => note,
        });
    }
    record.finished_at = Some(crate::timefmt::rfc3339(SystemTime::now()));
    record.duration_ms = Some(started.elapsed().as_millis() as u64);
    record.finished_boot_ms = Some(crate::readiness::timeline::since_boot_ms());
    record.state = if exit_status == 0 {
        SetupState::Succeeded
    } else {
        SetupState::Failed
    };
    drop(log);
    if let Err(e) = record::write(&cfg.state_dir, &record) {
        // Most likely a full disk. The log is ours to sacrifice: cut it to
        // its tail and try once more, so the outcome is never lost to it.
        shrink_log(&cfg.state_dir.join(SETUP_LOG));
        record::write(&cfg.state_dir, &record).map_err(|_| e)?;
    }
    Ok(SetupOutcome {
        record,
        exit_status,
    })
}

/// Runs the script (if any) and fills the record's outcome fields; returns
/// the exit status to mirror.
async fn execute(cfg: &SetupConfig, jobs: &Jobs, log: &mut Tee, record: &mut SetupRecord) -> i32 {
    // The payload's installer could not put the lab in place: running the
    // setup against what is missing would only hide the real reason.
    if let Some(reason) = install_error(&cfg.state_dir) {
        return fail(
            record,
            log,
            1,
            format!("the payload's installer failed, so the setup did not run: {reason}"),
        );
    }
    // A disk too small for the lab: with `fail`, fails now, with both
    // sizes, instead of as a full disk somewhere in the script (or in the
    // student's work); with `warn`, the student is told.
    if let Some(min) = cfg.min_root_bytes {
        let size = root_size(Path::new("/"));
        match size.filter(|&size| size < min) {
            Some(size) if cfg.on_small_root == OnSmallRoot::Fail => {
                return fail(record, log, 1, root_too_small(size, min));
            }
            Some(size) => {
                let mut line = root_too_small(size, min);
                line.push_str(" (on_small_root = \"warn\": the setup runs, and interactive shells show a banner)");
                log.line(&line);
                if let Err(e) = write_banner(&cfg.small_root_banner, size, min) {
                    log.line(&format!(
                        "lab-agent: failed to write the small-root banner `{}`: {e}",
                        cfg.small_root_banner.display()
                    ));
                }
            }
            None => remove_banner(&cfg.small_root_banner),
        }
    }
    let Some(script) = &cfg.script else {
        log.line("lab-agent: no setup script; nothing to do");
        record.exit_code = Some(0);
        return 0;
    };
    if !script.is_file() {
        return fail(
            record,
            log,
            127,
            format!("setup script `{}` does not exist", script.display()),
        );
    }
    let identity = match Identity::lookup(&cfg.user) {
        Ok(id) => id,
        Err(e) => return fail(record, log, 126, e.to_string()),
    };
    // One pipe for both streams keeps their interleaving in the log.
    let (reader, writer) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return fail(record, log, 126, format!("failed to create a pipe: {e}")),
    };
    let writer_err = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return fail(record, log, 126, format!("failed to create a pipe: {e}")),
    };
    let mut env = BTreeMap::new();
    env.insert(LAB_DIR_ENV.to_owned(), cfg.lab_dir.display().to_string());
    let cwd = if cfg.lab_dir.is_dir() {
        Cwd::Dir(&cfg.lab_dir)
    } else {
        Cwd::Home
    };
    let spawned = process::spawn(
        ShellCommand {
            identity: &identity,
            script: Script::File(script),
            profile: lab_agent_proto::Profile::Login,
            cwd,
            env: &env,
            stdin: Stdio::null(),
            stdout: Stdio::from(writer),
            stderr: Stdio::from(writer_err),
            // Starting services is what a setup script is for: what it
            // leaves running stays, without per-command limits.
            leave_running: true,
            limits: None,
        },
        jobs,
    );
    let mut job = match spawned {
        Ok(job) => job,
        Err(e) => return fail(record, log, 126, e.to_string()),
    };
    let reader = match tokio::net::unix::pipe::Receiver::from_owned_fd(reader) {
        Ok(r) => r,
        Err(e) => {
            let _ = job.terminate(Duration::ZERO).await;
            return fail(
                record,
                log,
                126,
                format!("failed to read the script's output: {e}"),
            );
        }
    };

    let exit = {
        let output = pump(reader, log);
        let waited = job.wait(cfg.timeout, KILL_GRACE);
        tokio::pin!(output, waited);
        let mut output_done = false;
        let exit = loop {
            tokio::select! {
                e = &mut waited => break e,
                _ = &mut output, if !output_done => output_done = true,
            }
        };
        // Collect what the script printed last; background processes it left
        // holding the pipe must not hold up the record.
        if !output_done {
            let _ = tokio::time::timeout(Duration::from_millis(500), &mut output).await;
        }
        exit
    };
    let exit = match exit {
        Ok(e) => e,
        Err(e) => {
            return fail(
                record,
                log,
                1,
                format!("failed to wait for the script: {e}"),
            );
        }
    };
    record.exit_code = exit.code();
    record.signal = exit.signal();
    record.timed_out = exit.timed_out;
    if exit.timed_out {
        let msg = format!(
            "setup timed out after {} s and was killed",
            cfg.timeout.as_secs()
        );
        log.line(&format!("lab-agent: {msg}"));
        record.error = Some(msg);
        return 124;
    }
    match (exit.code(), exit.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

/// The size of the filesystem at `root` (`None`: it cannot be measured,
/// and is then not held against the lab).
fn root_size(root: &Path) -> Option<u64> {
    let fs = nix::sys::statvfs::statvfs(root).ok()?;
    Some((fs.blocks() as u64).saturating_mul(fs.fragment_size() as u64))
}

/// Why a root filesystem of `size` bytes is too small for a lab that needs
/// `min`.
fn root_too_small(size: u64, min: u64) -> String {
    let mut s = String::from("the root filesystem is ");
    push_size(&mut s, size);
    s.push_str("; this lab needs at least ");
    push_size(&mut s, min);
    s.push_str(": give the VM a larger disk");
    s
}

/// The small-root banner: a `profile.d` script that prints only in an
/// interactive shell (`$-` holds `i`). Checks run through login shells
/// too, which read `/etc/profile.d`, but never interactive ones, so no
/// check's output ever holds it.
fn banner_script(size: u64, min: u64) -> String {
    let short = |bytes| {
        let mut s = String::new();
        push_size(&mut s, bytes);
        s.split(" (").next().unwrap_or_default().to_owned()
    };
    let mut s = String::from(
        "# Written by `lab-agent setup`: this VM's root filesystem is smaller than\n\
         # the lab asks for ([readiness] on_small_root = \"warn\"). Interactive\n\
         # shells only: checks run through login shells too and never see it.\n\
         case $- in\n*i*)\n\tprintf '%s\\n' 'lab: this VM'\\''s root filesystem is ",
    );
    s.push_str(&short(size));
    s.push_str(", smaller than usual (this lab expects ");
    s.push_str(&short(min));
    s.push_str("): keep an eye on the free space' >&2\n\tdf -h / >&2\n\t;;\nesac\n");
    s
}

/// Writes the banner atomically (a link planted under its name is
/// replaced, never written through), readable by every user's shell.
fn write_banner(path: &Path, size: u64, min: u64) -> io::Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file path",
        ));
    };
    record::write_atomic(dir, name, banner_script(size, min).as_bytes())
}

/// A root that is large enough has no banner (one an earlier setup on a
/// smaller disk left is removed: the name, never what it points to).
fn remove_banner(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// What the payload's installer recorded in `STATE_DIR/install-error`, if
/// it failed (the file is absent otherwise), cut to a sentence's length.
fn install_error(state_dir: &Path) -> Option<String> {
    let path = state_dir.join(INSTALL_ERROR_FILE);
    match record::read_state_file(&path, 64 * 1024) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let text = text.trim();
            let cut: String = text.chars().take(500).collect();
            Some(if cut.is_empty() {
                "it left no reason".to_owned()
            } else {
                cut
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(format!(
            "its record `{}` is unreadable: {e}",
            path.display()
        )),
    }
}

/// The setup could not run (or its end was not seen): says why in the log
/// and the record; returns the status to exit with.
fn fail(record: &mut SetupRecord, log: &mut Tee, status: i32, msg: String) -> i32 {
    log.line(&format!("lab-agent: {msg}"));
    record.error = Some(msg);
    status
}

fn prepare_state_dir(dir: &Path) -> Result<(), SetupError> {
    record::prepare_dir(dir).map_err(|source| SetupError::StateDir {
        path: dir.to_path_buf(),
        source,
    })
}

fn shrink_log(path: &Path) {
    if let Ok(f) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
    {
        let _ = f.set_len(0);
    }
}

/// The setup's output sink: the log file, and stdout when echoing. A failing
/// log (full disk) stops logging but never the setup.
struct Tee {
    file: Option<File>,
    echo: bool,
    error: Option<io::Error>,
}

impl Tee {
    fn open(path: &Path, echo: bool) -> Tee {
        // A new file each run, never the one that is there: whatever sits
        // under the name (a symlink to /etc/… or to the token, a hard link,
        // a fifo) is unlinked — the name, not its target — and the log is
        // created with O_EXCL|O_NOFOLLOW, 0600 (a setup may print secrets).
        let _ = std::fs::remove_file(path);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .mode(0o600)
            .open(path)
        {
            Ok(file) => Tee {
                file: Some(file),
                echo,
                error: None,
            },
            Err(e) => Tee {
                file: None,
                echo,
                error: Some(e),
            },
        }
    }

    fn line(&mut self, msg: &str) {
        self.put(format!("{msg}\n").as_bytes());
    }
}

impl Sink for Tee {
    fn put(&mut self, data: &[u8]) {
        if let Some(f) = &mut self.file
            && let Err(e) = f.write_all(data)
        {
            self.error = Some(e);
            self.file = None;
        }
        if self.echo {
            let mut out = io::stdout().lock();
            let _ = out.write_all(data);
            let _ = out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_check_says_both_sizes() {
        assert!(root_size(Path::new("/")).is_some_and(|s| s > 0));
        assert_eq!(
            root_too_small(3 << 30, u64::MAX),
            "the root filesystem is 3.0 GiB (3221225472 bytes); this lab needs at least 15.9 EiB (18446744073709551615 bytes): give the VM a larger disk"
        );
    }

    /// The banner prints in an interactive shell and nowhere else: bash
    /// and dash, as `/etc/profile` sources it in each.
    #[test]
    fn the_banner_shows_in_interactive_shells_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("banner.sh");
        write_banner(&path, 2_576_980_378, 10 << 30).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let run = |shell: &str, interactive: bool| {
            let mut cmd = std::process::Command::new(shell);
            if interactive {
                cmd.arg("-i");
            }
            let out = cmd
                .arg("-c")
                .arg(format!(". {}; echo done", path.display()))
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let want = "lab: this VM's root filesystem is 2.4 GiB, smaller than usual (this lab expects 10.0 GiB): keep an eye on the free space";
        for shell in ["bash", "sh"] {
            let (out, err) = run(shell, true);
            assert_eq!(out, "done\n", "{shell}: {text}");
            assert!(err.contains(want), "{shell}: {err:?}\n{text}");
            assert!(err.contains("Filesystem"), "df -h /: {err:?}");
            assert_eq!(
                run(shell, false),
                ("done\n".into(), String::new()),
                "{shell}"
            );
        }
        remove_banner(&path);
        assert!(!path.exists());
    }
}
