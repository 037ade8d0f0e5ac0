//! The `lab.toml` model: one folder describes a lab's guest side (setup
//! script, files copied to `/opt/lab/`) and its backend side (checks).
//!
//! Parsing ([`Lab::parse`]) is pure; [`Lab::load`] and [`Lab::collect_files`]
//! are the only functions here that touch the filesystem.
//!
//! Layout: this file holds the model (what a parsed lab is) and its small
//! accessors; `raw` the serde layer as written, `parse` the validation from
//! it (every problem at once), `files` the walk of `[files].source`, `vms`
//! a session's VMs and one VM's view (`Lab::for_vm`), `scripts` the shell
//! a lab holds (for `bash -n`), `keys` every unknown key at once (with
//! the key it likely meant).
//!
//! Every error names the file, the field (a check by its name) and what to
//! do about it, because the person reading it is a lab author with
//! `lab.toml` open in an editor. The authors' reference of every key is
//! `docs/lab-toml.md`; keep the two in step.

use crate::exec::{self, ExecOptions, ExecRequest};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

mod files;
mod keys;
mod parse;
mod raw;
mod scripts;
#[cfg(test)]
mod tests;
mod vms;
pub use vms::{
    LAB_PARAM_PREFIX, LAB_VM_ENV, LAB_VMS_ENV, MAX_PARAM_BYTES, MAX_VM_NAME_LEN, Vm, VmError,
    check_vm_name,
};

/// The file name of a lab's description inside its folder.
pub const LAB_TOML: &str = "lab.toml";
/// Default and longest `[setup].timeout_secs`.
pub use crate::guest::{DEFAULT_SETUP_TIMEOUT_SECS, MAX_SETUP_TIMEOUT_SECS, OnSmallRoot};
pub use crate::{GUEST_LAB_DIR, LAB_DIR_ENV};
/// Default `timeout_secs` of a check: a command's.
pub const DEFAULT_CHECK_TIMEOUT_SECS: u64 = exec::DEFAULT_TIMEOUT_SECS;
/// Longest `timeout_secs` of a check: a command's (one hour).
pub use crate::exec::MAX_TIMEOUT_SECS;
/// Default and largest `max_output_bytes` of a check (per stream).
pub use crate::exec::{DEFAULT_MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES_CAP};
/// Default `points` of a check.
pub const DEFAULT_POINTS: u32 = 1;
/// Most `points` one check may be worth: a typo like `points = 10000000`
/// is caught rather than swamping the score.
pub const MAX_POINTS: u32 = 10_000;
/// Default `[readiness].timeout_secs`: the backend's deadline from the VM's
/// start to ready. The seeds' labs need 82 to 269 s; 150 covers most of
/// them without letting a stuck VM hold a student for long.
pub const DEFAULT_READY_TIMEOUT_SECS: u64 = 150;
/// Longest `[readiness].timeout_secs` (one hour).
pub const MAX_READY_TIMEOUT_SECS: u64 = 3600;
/// The Secret annotation that carries `[readiness].timeout_secs` to the
/// backend, which reads the Secret it applies rather than the lab folder.
pub const READY_TIMEOUT_ANNOTATION: &str = "lab-agent/ready-timeout-secs";

/// A parsed and validated lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lab {
    /// The lab's folder (where `lab.toml` is).
    pub dir: PathBuf,
    pub name: String,
    pub setup: Option<Setup>,
    pub files: Option<Files>,
    pub checks: Vec<Check>,
    /// The lab-wide defaults: the top-level `profile`, `leave_running`,
    /// `max_pids` and `max_memory_bytes` (the other options at their
    /// defaults), what a check without its own key gets.
    pub defaults: ExecOptions,
    /// `[readiness]`, its defaults when the table is absent.
    pub readiness: Readiness,
    /// `[[vms]]`: the VMs of a session; empty for a lab of one VM.
    pub vms: Vec<Vm>,
    /// What one VM's setup and checks get in their environment (`LAB_VM`,
    /// `LAB_VMS`, `LAB_PARAM_<KEY>`): set by [`Lab::for_vm`] for its payload,
    /// empty in a lab as parsed.
    pub vm_env: BTreeMap<String, String>,
    /// `[solve]`: what a student would do, for `labctl test`; never
    /// shipped to the guest.
    pub solve: Option<Solve>,
}

/// `[solve]`: the lab's own solution, run as root by `labctl test` after
/// the first grade (never part of the payload: students must not find it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Solve {
    /// The script, relative to the lab's folder.
    pub script: PathBuf,
}

/// A check's `initially`: what it must report right after setup, before
/// anything is solved (`labctl test`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Initially {
    /// It must fail: a student who did nothing does not get its points.
    #[default]
    Fail,
    /// It holds after setup (it checks the setup, not the student).
    Pass,
}

/// `[readiness]`: how long the backend waits for the VM, and what the VM
/// must have for the lab to be set up at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// The backend's deadline from the VM's start to ready (1 to
    /// [`MAX_READY_TIMEOUT_SECS`], default [`DEFAULT_READY_TIMEOUT_SECS`]).
    pub timeout_secs: u64,
    /// The root filesystem's least size; what a smaller one does is
    /// `on_small_root`'s. `None`: any size.
    pub min_root_bytes: Option<u64>,
    /// A root under `min_root_bytes`: ready and flagged, with a banner in
    /// the student's interactive shells (`warn`, the default), or `failed`
    /// before setup runs (`fail`).
    pub on_small_root: OnSmallRoot,
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness {
            timeout_secs: DEFAULT_READY_TIMEOUT_SECS,
            min_root_bytes: None,
            on_small_root: OnSmallRoot::Warn,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The script, relative to the lab's folder, if the lab has one.
    pub script: Option<PathBuf>,
    pub timeout_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// Folder (relative to the lab's) whose contents go to `/opt/lab/`.
    pub source: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    /// Run through `bash --login -c` in the guest, with `LAB_DIR` set.
    pub run: String,
    pub fail_message: Option<String>,
    /// What passing is worth in the score (default 1; 0 for a check that
    /// only informs).
    pub points: u32,
    /// How it runs: the check's own `user`, `timeout_secs`, `env`, `cwd`,
    /// `stdin`, `max_output_bytes`, `profile`, `leave_running`, `max_pids`,
    /// `max_memory_bytes`, else the lab's [`Lab::defaults`]. Its `env` is
    /// the check's (besides `LAB_DIR`, which the grader sets).
    pub exec: ExecOptions,
    /// The VM it runs on: set in every check of a lab with `[[vms]]` (a lab
    /// of one `[[vms]]` fills it in), `None` in a lab of one VM.
    pub vm: Option<String>,
    /// What a student would do for this check, run as its `user` by
    /// `labctl test` after the lab's `[solve]` script.
    pub solve: Option<String>,
    /// What the check must report right after setup (`labctl test`).
    pub initially: Initially,
}

impl Check {
    /// The exec request that runs the check: its `run` as its options say,
    /// with `LAB_DIR` set to where the lab's files are in the guest.
    pub fn request(&self, guest_lab_dir: &str) -> ExecRequest {
        self.request_to_run(&self.run, guest_lab_dir)
    }

    /// A request that runs `command` as the check runs (its user, profile,
    /// environment, …): the check itself, or its `solve`.
    pub fn request_to_run(&self, command: &str, guest_lab_dir: &str) -> ExecRequest {
        // Set last, so no `env` of the lab's can move it (the model refuses
        // one anyway).
        ExecRequest::with_options(command, self.exec.clone()).env(LAB_DIR_ENV, guest_lab_dir)
    }
}

/// One file of `[files].source`, ready to be shipped to the guest.
#[derive(Clone, PartialEq, Eq)]
pub struct LabFile {
    /// Path relative to `/opt/lab/`, `/`-separated, never empty, never `..`.
    pub path: String,
    /// Permission bits (`0o644`, `0o755`, …).
    pub mode: u32,
    pub contents: Vec<u8>,
}

impl fmt::Debug for LabFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LabFile")
            .field("path", &self.path)
            .field("mode", &format_args!("{:o}", self.mode))
            .field("len", &self.contents.len())
            .finish()
    }
}

/// Why a lab could not be loaded. Every message names the file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("failed to read `{path}`: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{path}` is not valid lab.toml: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("`{path}`: {field} {problem}")]
    Invalid {
        path: PathBuf,
        /// The offending key, e.g. `checks[2].run`.
        field: String,
        /// What is wrong and how to fix it.
        problem: String,
    },
    #[error("failed to read lab files from `{path}`: {source}")]
    Files {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{path}`: {problem}")]
    BadFile { path: PathBuf, problem: String },
    /// A key the model does not have (every one is reported, in the
    /// file's order).
    #[error("`{path}` line {line}: unknown field `{key}` in {table}{}", did_you_mean(.suggestion, .known))]
    UnknownKey {
        path: PathBuf,
        line: usize,
        key: String,
        /// Where it is, as an author calls it (`a [[checks]] table`).
        table: &'static str,
        /// The known key it most likely meant.
        suggestion: Option<String>,
        /// The keys that table takes.
        known: Vec<String>,
    },
}

/// `: did you mean `x`?`, or the keys there are.
fn did_you_mean(suggestion: &Option<String>, known: &[String]) -> String {
    match suggestion {
        Some(s) => format!(": did you mean `{s}`?"),
        None => {
            let keys: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
            format!(": the keys there are {}", keys.join(", "))
        }
    }
}

impl LabError {
    /// What to try, for a person reading the error (printed as `hint: …`
    /// after it; not part of the message).
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            LabError::Read { .. } => Some("a lab is a folder with a `lab.toml` in it"),
            _ => None,
        }
    }
}

pub use parse::{LabNameProblem, MAX_LAB_NAME_LEN, check_lab_name};
use parse::{invalid, relative_path, setup_timeout};
pub use scripts::{Scripts, scripts_of_toml};

impl Lab {
    /// The sum of every check's points: the best score.
    pub fn max_score(&self) -> u64 {
        self.checks.iter().map(|c| u64::from(c.points)).sum()
    }

    /// The setup script's path on this machine, if the lab has one.
    pub fn setup_script_path(&self) -> Option<PathBuf> {
        self.setup
            .as_ref()
            .and_then(|s| s.script.as_ref())
            .map(|s| self.dir.join(s))
    }

    /// The solve script's path on this machine, if the lab has one.
    pub fn solve_script_path(&self) -> Option<PathBuf> {
        self.solve.as_ref().map(|s| self.dir.join(&s.script))
    }

    /// The setup timeout (the default when there is no `[setup]`).
    pub fn setup_timeout_secs(&self) -> u64 {
        self.setup
            .as_ref()
            .map_or(DEFAULT_SETUP_TIMEOUT_SECS, |s| s.timeout_secs)
    }
}

impl Lab {
    /// Keeps only the checks named in `names` (all of them when it is
    /// empty), in the lab's order. `labctl grade --check`, `labctl try
    /// --check` and the Python package's `checks=` all select through this.
    pub fn select_checks(&mut self, names: &[String]) -> Result<(), UnknownCheck> {
        if names.is_empty() {
            return Ok(());
        }
        if let Some(unknown) = names
            .iter()
            .find(|n| !self.checks.iter().any(|c| &c.name == *n))
        {
            return Err(UnknownCheck {
                lab: self.name.clone(),
                name: unknown.clone(),
                known: self.checks.iter().map(|c| c.name.clone()).collect(),
            });
        }
        self.checks.retain(|c| names.contains(&c.name));
        Ok(())
    }
}

/// A check asked for by a name the lab does not have; see
/// [`Lab::select_checks`]. Its text lists the names the lab has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCheck {
    pub lab: String,
    pub name: String,
    pub known: Vec<String>,
}

impl fmt::Display for UnknownCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<String> = self.known.iter().map(|n| format!("`{n}`")).collect();
        let known = if known.is_empty() {
            "it has none".to_owned()
        } else {
            format!("its checks are {}", known.join(", "))
        };
        write!(
            f,
            "lab `{}` has no check named `{}`: {known}",
            self.lab, self.name
        )
    }
}

impl std::error::Error for UnknownCheck {}
