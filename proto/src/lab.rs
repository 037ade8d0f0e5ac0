//! The `lab.toml` model: one folder describes a lab's guest side (setup
//! script, files copied to `/opt/lab/`) and its backend side (checks).
//!
//! Parsing ([`Lab::parse`]) is pure; [`Lab::load`] and [`Lab::collect_files`]
//! are the only functions here that touch the filesystem.
//!
//! Every error names the file, the field (a check by its name) and what to
//! do about it, because the person reading it is a lab author with
//! `lab.toml` open in an editor. The authors' reference of every key is
//! `docs/lab-toml.md`; keep the two in step.

use crate::exec::{DEFAULT_MAX_PIDS, MAX_PIDS, MIN_MEMORY_BYTES, Profile};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};

mod vms;
pub use vms::{
    LAB_PARAM_PREFIX, LAB_VM_ENV, LAB_VMS_ENV, MAX_PARAM_BYTES, MAX_VM_NAME_LEN, Vm, VmError,
    check_vm_name,
};

/// The file name of a lab's description inside its folder.
pub const LAB_TOML: &str = "lab.toml";
/// Default `[setup].timeout_secs`.
pub use crate::guest::DEFAULT_SETUP_TIMEOUT_SECS;
pub use crate::{GUEST_LAB_DIR, LAB_DIR_ENV};
/// Default `timeout_secs` of a check.
pub const DEFAULT_CHECK_TIMEOUT_SECS: u64 = 60;
/// Longest timeout a lab may ask for, for setup or a check (one hour).
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
    /// The top-level `profile`: what a check without its own uses.
    pub profile: Profile,
    /// The top-level `leave_running`, `max_pids` and `max_memory_bytes`:
    /// what a check without its own uses.
    pub leave_running: bool,
    pub max_pids: Option<u32>,
    pub max_memory_bytes: Option<u64>,
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
    /// The root filesystem's least size: a smaller one makes the setup
    /// `failed` with the sizes, before the script runs. `None`: any size.
    pub min_root_bytes: Option<u64>,
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness {
            timeout_secs: DEFAULT_READY_TIMEOUT_SECS,
            min_root_bytes: None,
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
    /// `None` means the agent's default (root).
    pub user: Option<String>,
    pub timeout_secs: u64,
    pub fail_message: Option<String>,
    /// What passing is worth in the score (default 1; 0 for a check that
    /// only informs).
    pub points: u32,
    /// Added to the check's clean environment (besides `LAB_DIR`, which the
    /// grader sets).
    pub env: BTreeMap<String, String>,
    /// Absolute working directory in the guest; `None` is the user's home.
    pub cwd: Option<String>,
    /// Fed to the command's standard input; `None` is `/dev/null`.
    pub stdin: Option<String>,
    /// Output kept per stream; the rest is dropped and reported as cut.
    pub max_output_bytes: u64,
    /// Which startup files the check's shell reads: the check's own
    /// `profile`, else the lab's, else `login`.
    pub profile: Profile,
    /// Keep what the check leaves running after it ends (default: killed
    /// with it); the check's own, else the lab's, else false.
    pub leave_running: bool,
    /// The check's process and memory limits; `None`: the agent's defaults.
    pub max_pids: Option<u32>,
    pub max_memory_bytes: Option<u64>,
    /// The VM it runs on: set in every check of a lab with `[[vms]]` (a lab
    /// of one `[[vms]]` fills it in), `None` in a lab of one VM.
    pub vm: Option<String>,
    /// What a student would do for this check, run as its `user` by
    /// `labctl test` after the lab's `[solve]` script.
    pub solve: Option<String>,
    /// What the check must report right after setup (`labctl test`).
    pub initially: Initially,
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

// The file format, exactly as written; converted into `Lab` after validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLab {
    name: String,
    #[serde(default)]
    setup: Option<RawSetup>,
    #[serde(default)]
    files: Option<RawFiles>,
    #[serde(default)]
    checks: Vec<RawCheck>,
    #[serde(default)]
    profile: Option<Profile>,
    #[serde(default)]
    leave_running: Option<bool>,
    #[serde(default)]
    max_pids: Option<i64>,
    #[serde(default)]
    max_memory_bytes: Option<i64>,
    #[serde(default)]
    readiness: Option<RawReadiness>,
    #[serde(default)]
    vms: Vec<vms::RawVm>,
    solve: Option<RawSolve>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSolve {
    script: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReadiness {
    #[serde(default)]
    timeout_secs: Option<i64>,
    #[serde(default)]
    min_root_bytes: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSetup {
    #[serde(default)]
    script: Option<String>,
    #[serde(default)]
    timeout_secs: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFiles {
    source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    name: String,
    run: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    timeout_secs: Option<i64>,
    #[serde(default)]
    fail_message: Option<String>,
    #[serde(default)]
    points: Option<i64>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    max_output_bytes: Option<i64>,
    profile: Option<Profile>,
    #[serde(default)]
    leave_running: Option<bool>,
    #[serde(default)]
    max_pids: Option<i64>,
    #[serde(default)]
    max_memory_bytes: Option<i64>,
    #[serde(default)]
    vm: Option<String>,
    solve: Option<String>,
    #[serde(default)]
    initially: Initially,
}

impl Lab {
    /// Reads and validates `DIR/lab.toml`, and checks that the setup script
    /// and the files folder it names exist. The first problem is the error;
    /// [`Lab::load_all`] has them all.
    pub fn load(dir: impl AsRef<Path>) -> Result<Lab, LabError> {
        Lab::load_all(dir).map_err(first)
    }

    /// [`Lab::load`], with every problem found (at least one on `Err`), for
    /// `labctl lint`: an author fixes them in one go.
    pub fn load_all(dir: impl AsRef<Path>) -> Result<Lab, Vec<LabError>> {
        let dir = dir.as_ref();
        let path = dir.join(LAB_TOML);
        let text = std::fs::read_to_string(&path).map_err(|source| {
            vec![LabError::Read {
                path: path.clone(),
                source,
            }]
        })?;
        let (lab, mut problems) = match Lab::parse_all(&text, dir) {
            Ok(lab) => (Some(lab), Vec::new()),
            Err(problems) => (None, problems),
        };
        // The named paths are checked even when other keys are wrong, as
        // long as the file parsed at all.
        if let Ok(raw) = toml::from_str::<RawLab>(&text) {
            let script = raw.setup.and_then(|s| s.script);
            if let Some(script) = script.filter(|s| relative_path(&path, "", s).is_ok()) {
                if !dir.join(&script).is_file() {
                    problems.push(invalid(
                        &path,
                        "setup.script",
                        format!(
                            "names `{script}`, which is not a file in `{}`: create it or remove `script` from [setup]",
                            dir.display()
                        ),
                    ));
                }
            }
            for vm in &raw.vms {
                let Some(script) = vm.script().filter(|s| relative_path(&path, "", s).is_ok())
                else {
                    continue;
                };
                if !dir.join(script).is_file() {
                    problems.push(invalid(
                        &path,
                        &format!("vm `{}`: setup", vm.name().trim()),
                        format!(
                            "names `{script}`, which is not a file in `{}`: create it or remove `setup` from the VM",
                            dir.display()
                        ),
                    ));
                }
            }
            if let Some(script) = raw
                .solve
                .map(|s| s.script)
                .filter(|s| relative_path(&path, "", s).is_ok())
            {
                if !dir.join(&script).is_file() {
                    problems.push(invalid(
                        &path,
                        "solve.script",
                        format!(
                            "names `{script}`, which is not a file in `{}`: create it or remove [solve]",
                            dir.display()
                        ),
                    ));
                }
            }
            if let Some(source) = raw
                .files
                .map(|f| f.source)
                .filter(|s| relative_path(&path, "", s).is_ok())
            {
                if !dir.join(&source).is_dir() {
                    problems.push(invalid(
                        &path,
                        "files.source",
                        format!(
                            "names `{source}`, which is not a folder in `{}`: create it or remove [files]",
                            dir.display()
                        ),
                    ));
                }
            }
        }
        match lab {
            Some(lab) if problems.is_empty() => Ok(lab),
            _ => Err(problems),
        }
    }

    /// Parses and validates lab.toml text. `dir` is only recorded and used in
    /// messages; nothing is read. The first problem is the error.
    pub fn parse(text: &str, dir: impl AsRef<Path>) -> Result<Lab, LabError> {
        Lab::parse_all(text, dir).map_err(first)
    }

    /// [`Lab::parse`], with every problem found (at least one on `Err`).
    pub fn parse_all(text: &str, dir: impl AsRef<Path>) -> Result<Lab, Vec<LabError>> {
        let dir = dir.as_ref().to_path_buf();
        let path = dir.join(LAB_TOML);
        let raw: RawLab = toml::from_str(text).map_err(|e| {
            vec![LabError::Syntax {
                path: path.clone(),
                message: plain_type_names(e.to_string().trim_end()),
            }]
        })?;
        let mut problems = Vec::new();
        let mut check = |r: Result<(), LabError>| {
            if let Err(e) = r {
                problems.push(e);
            }
        };

        let name = raw.name.trim().to_owned();
        check(lab_name(&path, &name));

        let setup = raw.setup.map(|s| {
            let script = s.script.and_then(|script| {
                relative_path(&path, "setup.script", &script)
                    .map_err(|e| check(Err(e)))
                    .ok()
            });
            let timeout_secs = timeout(
                &path,
                "setup.timeout_secs",
                s.timeout_secs,
                DEFAULT_SETUP_TIMEOUT_SECS,
            )
            .unwrap_or_else(|e| {
                check(Err(e));
                DEFAULT_SETUP_TIMEOUT_SECS
            });
            Setup {
                script,
                timeout_secs,
            }
        });

        let readiness = raw
            .readiness
            .map_or_else(Readiness::default, |r| Readiness {
                timeout_secs: ready_timeout(&path, r.timeout_secs).unwrap_or_else(|e| {
                    check(Err(e));
                    DEFAULT_READY_TIMEOUT_SECS
                }),
                min_root_bytes: min_root_bytes(&path, r.min_root_bytes).unwrap_or_else(|e| {
                    check(Err(e));
                    None
                }),
            });

        let solve = raw.solve.and_then(|s| {
            relative_path(&path, "solve.script", &s.script)
                .map(|script| Solve { script })
                .map_err(|e| check(Err(e)))
                .ok()
        });

        let files = raw.files.and_then(|f| {
            relative_path(&path, "files.source", &f.source)
                .map(|source| Files { source })
                .map_err(|e| check(Err(e)))
                .ok()
        });

        let lab_pids = limit_pids(&path, "max_pids", raw.max_pids).unwrap_or_else(|e| {
            check(Err(e));
            None
        });
        let lab_memory = limit_memory(&path, "max_memory_bytes", raw.max_memory_bytes)
            .unwrap_or_else(|e| {
                check(Err(e));
                None
            });
        let mut seen = HashSet::new();
        let mut checks = Vec::with_capacity(raw.checks.len());
        for (i, c) in raw.checks.into_iter().enumerate() {
            let check_name = c.name.trim().to_owned();
            // Errors name the check as the author knows it, by its name;
            // only a check without one is named by its position.
            let field = |key: &str| {
                if check_name.is_empty() {
                    format!("check #{} {key}", i + 1)
                } else {
                    format!("check `{check_name}`: {key}")
                }
            };
            let mut bad =
                |key: &str, problem: String| check(Err(invalid(&path, &field(key), problem)));
            if check_name.is_empty() {
                bad(
                    "name",
                    "is empty: every check needs a name the student will see".into(),
                );
            } else if !seen.insert(check_name.clone()) {
                bad(
                    "name",
                    "is used by an earlier check: check names must be unique".into(),
                );
            }
            if c.run.trim().is_empty() {
                bad("run", "is empty: give the command that verifies it".into());
            }
            if c.solve.as_deref().is_some_and(|s| s.trim().is_empty()) {
                bad(
                    "solve",
                    "is empty: give what a student would run, or remove the key".into(),
                );
            }
            if c.user.as_deref().is_some_and(|u| u.trim().is_empty()) {
                bad(
                    "user",
                    "is empty: name a user or remove the key (default root)".into(),
                );
            }
            let timeout_secs = timeout(
                &path,
                &field("timeout_secs"),
                c.timeout_secs,
                DEFAULT_CHECK_TIMEOUT_SECS,
            )
            .unwrap_or_else(|e| {
                check(Err(e));
                DEFAULT_CHECK_TIMEOUT_SECS
            });
            let points = match c.points {
                None => DEFAULT_POINTS,
                Some(p) if (0..=i64::from(MAX_POINTS)).contains(&p) => p as u32,
                Some(p) => {
                    check(Err(invalid(
                        &path,
                        &field("points"),
                        format!("is {p}: use a whole number from 0 to {MAX_POINTS}"),
                    )));
                    DEFAULT_POINTS
                }
            };
            let max_output_bytes = match c.max_output_bytes {
                None => DEFAULT_MAX_OUTPUT_BYTES,
                Some(b) if b >= 0 && b as u64 <= MAX_OUTPUT_BYTES_CAP => b as u64,
                Some(b) => {
                    check(Err(invalid(
                        &path,
                        &field("max_output_bytes"),
                        format!(
                            "is {b}: use a number of bytes from 0 to {MAX_OUTPUT_BYTES_CAP} (16 MiB)"
                        ),
                    )));
                    DEFAULT_MAX_OUTPUT_BYTES
                }
            };
            let max_pids = limit_pids(&path, &field("max_pids"), c.max_pids)
                .unwrap_or_else(|e| {
                    check(Err(e));
                    None
                })
                .or(lab_pids);
            let max_memory_bytes =
                limit_memory(&path, &field("max_memory_bytes"), c.max_memory_bytes)
                    .unwrap_or_else(|e| {
                        check(Err(e));
                        None
                    })
                    .or(lab_memory);
            if let Some(cwd) = &c.cwd {
                if !cwd.starts_with('/') {
                    check(Err(invalid(
                        &path,
                        &field("cwd"),
                        format!(
                            "`{cwd}` is not absolute: give a path in the guest starting with `/` (`$LAB_DIR` is not expanded here)"
                        ),
                    )));
                }
            }
            for key in c.env.keys() {
                if let Err(problem) = env_name(key) {
                    check(Err(invalid(&path, &field(&format!("env.{key}")), problem)));
                }
            }
            checks.push(Check {
                name: check_name,
                run: c.run,
                user: c.user,
                timeout_secs,
                fail_message: c.fail_message,
                points,
                env: c.env,
                cwd: c.cwd,
                stdin: c.stdin,
                max_output_bytes,
                profile: c.profile.or(raw.profile).unwrap_or_default(),
                leave_running: c.leave_running.or(raw.leave_running).unwrap_or(false),
                max_pids,
                max_memory_bytes,
                vm: c.vm,
                solve: c.solve,
                initially: c.initially,
            });
        }
        let vms = vms::resolve(&path, raw.vms, setup.as_ref(), &mut checks, &mut problems);

        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Lab {
            dir,
            name,
            setup,
            files,
            checks,
            profile: raw.profile.unwrap_or_default(),
            leave_running: raw.leave_running.unwrap_or(false),
            max_pids: lab_pids,
            max_memory_bytes: lab_memory,
            readiness,
            vms,
            vm_env: BTreeMap::new(),
            solve,
        })
    }

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

    /// Every regular file under `[files].source`, sorted by path, with its
    /// permission bits. Symlinks and special files are refused: what they
    /// point to would differ between the author's machine and the guest.
    pub fn collect_files(&self) -> Result<Vec<LabFile>, LabError> {
        let Some(files) = &self.files else {
            return Ok(Vec::new());
        };
        let root = self.dir.join(&files.source);
        let mut out = Vec::new();
        walk(&root, "", &mut out)?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<LabFile>) -> Result<(), LabError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LabError::Files { path, source }
    };
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            return Err(LabError::BadFile {
                path,
                problem: "file name is not UTF-8: rename it".into(),
            });
        };
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            walk(&path, &rel, out)?;
        } else if ft.is_file() {
            let contents = std::fs::read(&path).map_err(io(&path))?;
            out.push(LabFile {
                path: rel,
                mode: meta.permissions().mode() & 0o7777,
                contents,
            });
        } else if ft.is_symlink() {
            return Err(LabError::BadFile {
                path,
                problem: "is a symlink: lab files must be regular files; copy the target instead"
                    .into(),
            });
        } else {
            return Err(LabError::BadFile {
                path,
                problem: "is not a regular file: lab files must be regular files".into(),
            });
        }
    }
    Ok(())
}

/// A `max_pids` key: 1 to [`MAX_PIDS`], as the agent accepts it.
fn limit_pids(path: &Path, key: &str, v: Option<i64>) -> Result<Option<u32>, LabError> {
    match v {
        None => Ok(None),
        Some(n) if (1..=i64::from(MAX_PIDS)).contains(&n) => Ok(Some(n as u32)),
        Some(n) => Err(invalid(
            path,
            key,
            format!(
                "is {n}: use 1 to {MAX_PIDS} processes, or remove the key for the agent's default ({DEFAULT_MAX_PIDS})"
            ),
        )),
    }
}

/// A `max_memory_bytes` key: at least [`MIN_MEMORY_BYTES`], as the agent
/// accepts it.
fn limit_memory(path: &Path, key: &str, v: Option<i64>) -> Result<Option<u64>, LabError> {
    match v {
        None => Ok(None),
        Some(b) if b >= MIN_MEMORY_BYTES as i64 => Ok(Some(b as u64)),
        Some(b) => Err(invalid(
            path,
            key,
            format!(
                "is {b}: use at least {MIN_MEMORY_BYTES} bytes (16 MiB), or remove the key for the agent's default (the guest's memory less a reserve)"
            ),
        )),
    }
}

fn first(mut problems: Vec<LabError>) -> LabError {
    problems.remove(0)
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

fn lab_name(path: &Path, name: &str) -> Result<(), LabError> {
    check_lab_name(name).map_err(|problem| invalid(path, "name", problem.to_string()))
}

/// Longest lab name: it becomes a Kubernetes label value and part of file
/// names.
pub const MAX_LAB_NAME_LEN: usize = 63;

/// Why a lab name is refused; see [`check_lab_name`]. Its text reads after
/// the word "name" (`name is empty: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabNameProblem {
    Empty,
    /// A character outside `A-Z a-z 0-9 - _ .`.
    BadCharacter {
        name: String,
        bad: char,
    },
    /// Longer than [`MAX_LAB_NAME_LEN`] bytes.
    TooLong {
        len: usize,
    },
}

impl fmt::Display for LabNameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabNameProblem::Empty => f.write_str("is empty: give the lab a name"),
            LabNameProblem::BadCharacter { name, bad } => write!(
                f,
                "`{name}` contains {bad:?}: use letters, digits, `-`, `_` and `.` (it ends up in labels and file names)"
            ),
            LabNameProblem::TooLong { len } => {
                write!(f, "is {len} characters long: keep it to {MAX_LAB_NAME_LEN}")
            }
        }
    }
}

/// The one rule for a lab's name, for `lab.toml` and for the payload
/// generator alike: 1 to 63 of `A-Z a-z 0-9 - _ .`, so it is safe in a
/// label, a file name and a shell comment.
pub fn check_lab_name(name: &str) -> Result<(), LabNameProblem> {
    if name.is_empty() {
        return Err(LabNameProblem::Empty);
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(LabNameProblem::BadCharacter {
            name: name.to_owned(),
            bad,
        });
    }
    if name.len() > MAX_LAB_NAME_LEN {
        return Err(LabNameProblem::TooLong { len: name.len() });
    }
    Ok(())
}

/// An environment variable a check may set: a shell name, and not
/// `LAB_DIR`, which the grader sets to where the lab is.
fn env_name(key: &str) -> Result<(), String> {
    let shell_name = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !shell_name {
        return Err(
            "is not a variable name: use letters, digits and `_`, not starting with a digit".into(),
        );
    }
    if key == LAB_DIR_ENV {
        return Err(
            "is set by the grader to where the lab's files are: remove it from `env`".into(),
        );
    }
    Ok(())
}

/// serde names Rust types in its type errors (`expected i64`); an author
/// wrote TOML, so say it in TOML's words.
fn plain_type_names(message: &str) -> String {
    [
        ("expected i64", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected u32", "expected a whole number"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected a table"),
        ("expected a string", "expected a string in quotes"),
        ("invalid type: map", "invalid type: table"),
        ("invalid type: sequence", "invalid type: array"),
    ]
    .iter()
    .fold(message.to_owned(), |m, (from, to)| m.replace(from, to))
}

fn invalid(path: &Path, field: &str, problem: impl Into<String>) -> LabError {
    LabError::Invalid {
        path: path.to_path_buf(),
        field: field.to_owned(),
        problem: problem.into(),
    }
}

fn timeout(path: &Path, field: &str, value: Option<i64>, default: u64) -> Result<u64, LabError> {
    match value {
        None => Ok(default),
        Some(v) if v >= 1 && v as u64 <= MAX_TIMEOUT_SECS => Ok(v as u64),
        Some(v) => Err(invalid(
            path,
            field,
            format!("is {v}: use a number of seconds from 1 to {MAX_TIMEOUT_SECS}"),
        )),
    }
}

/// `[readiness].timeout_secs`: 1 to [`MAX_READY_TIMEOUT_SECS`].
fn ready_timeout(path: &Path, value: Option<i64>) -> Result<u64, LabError> {
    match value {
        None => Ok(DEFAULT_READY_TIMEOUT_SECS),
        Some(v) if v >= 1 && v as u64 <= MAX_READY_TIMEOUT_SECS => Ok(v as u64),
        Some(v) => Err(invalid(
            path,
            "readiness.timeout_secs",
            format!(
                "is {v}: use a number of seconds from 1 to {MAX_READY_TIMEOUT_SECS}, the time from the VM's start to ready (default {DEFAULT_READY_TIMEOUT_SECS})"
            ),
        )),
    }
}

/// `[readiness].min_root_bytes`: a positive number of bytes.
fn min_root_bytes(path: &Path, value: Option<i64>) -> Result<Option<u64>, LabError> {
    match value {
        None => Ok(None),
        Some(b) if b > 0 => Ok(Some(b as u64)),
        Some(b) => Err(invalid(
            path,
            "readiness.min_root_bytes",
            format!(
                "is {b}: use the root filesystem's least size in bytes (e.g. 10737418240 for 10 GiB), or remove the key for any size"
            ),
        )),
    }
}

/// A path inside the lab folder: relative, and never climbing out of it.
fn relative_path(path: &Path, field: &str, value: &str) -> Result<PathBuf, LabError> {
    if value.trim().is_empty() {
        return Err(invalid(
            path,
            field,
            "is empty: name a path inside the lab folder",
        ));
    }
    let p = PathBuf::from(value);
    for c in p.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(invalid(
                    path,
                    field,
                    format!("`{value}` is absolute: give a path relative to the lab folder"),
                ));
            }
            Component::ParentDir => {
                return Err(invalid(
                    path,
                    field,
                    format!("`{value}` leaves the lab folder: keep it inside"),
                ));
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
name = "hello-lab"
[setup]
script = "setup.sh"
timeout_secs = 600
[files]
source = "files"
[[checks]]
name = "greeting file exists"
run = "test -f $LAB_DIR/greeting"
user = "root"
timeout_secs = 30
fail_message = "Create the greeting file first."
[[checks]]
name = "second"
run = "true"
"#;

    #[test]
    fn parses_the_spec_example() {
        let lab = Lab::parse(FULL, "/labs/hello").unwrap();
        assert_eq!(lab.name, "hello-lab");
        assert_eq!(
            lab.setup,
            Some(Setup {
                script: Some("setup.sh".into()),
                timeout_secs: 600
            })
        );
        assert_eq!(lab.setup_script_path(), Some("/labs/hello/setup.sh".into()));
        assert_eq!(lab.files.unwrap().source, PathBuf::from("files"));
        assert_eq!(lab.checks.len(), 2);
        assert_eq!(lab.checks[0].timeout_secs, 30);
        assert_eq!(lab.checks[1].timeout_secs, DEFAULT_CHECK_TIMEOUT_SECS);
        assert_eq!(lab.checks[1].user, None);
    }

    #[test]
    fn minimal_lab() {
        let lab = Lab::parse("name = \"x\"", "/l").unwrap();
        assert!(lab.setup.is_none() && lab.files.is_none() && lab.checks.is_empty());
        assert_eq!(lab.setup_timeout_secs(), DEFAULT_SETUP_TIMEOUT_SECS);
        assert_eq!(
            lab.readiness,
            Readiness {
                timeout_secs: 150,
                min_root_bytes: None
            }
        );
    }

    #[test]
    fn readiness_keys_and_their_defaults() {
        let lab = Lab::parse(
            "name = \"x\"\n[readiness]\ntimeout_secs = 269\nmin_root_bytes = 10737418240\n",
            "/l",
        )
        .unwrap();
        assert_eq!(
            lab.readiness,
            Readiness {
                timeout_secs: 269,
                min_root_bytes: Some(10 << 30)
            }
        );
        // An empty table is the defaults; each key alone keeps the other's.
        let lab = Lab::parse("name = \"x\"\n[readiness]\n", "/l").unwrap();
        assert_eq!(lab.readiness, Readiness::default());
        let lab = Lab::parse("name = \"x\"\n[readiness]\nmin_root_bytes = 1\n", "/l").unwrap();
        assert_eq!(
            (lab.readiness.timeout_secs, lab.readiness.min_root_bytes),
            (DEFAULT_READY_TIMEOUT_SECS, Some(1))
        );
        // The range's ends are in it.
        for t in [1, 3600] {
            let text = format!("name = \"x\"\n[readiness]\ntimeout_secs = {t}\n");
            assert_eq!(Lab::parse(&text, "/l").unwrap().readiness.timeout_secs, t);
        }
    }

    #[test]
    fn readiness_errors_say_what_to_fix() {
        let cases: &[(&str, &str)] = &[
            (
                "timeout_secs = 0",
                "readiness.timeout_secs is 0: use a number of seconds from 1 to 3600",
            ),
            ("timeout_secs = 3601", "readiness.timeout_secs is 3601"),
            ("timeout_secs = -5", "readiness.timeout_secs is -5"),
            (
                "timeout_secs = 1.5",
                "invalid type: floating point `1.5`, expected a whole number",
            ),
            (
                "min_root_bytes = 0",
                "readiness.min_root_bytes is 0: use the root filesystem's least size in bytes",
            ),
            ("min_root_bytes = -1", "readiness.min_root_bytes is -1"),
            (
                "min_root_bytes = \"10G\"",
                "invalid type: string \"10G\", expected a whole number",
            ),
            ("timeout = 100", "unknown field `timeout`"),
        ];
        for (body, want) in cases {
            let text = format!("name = \"x\"\n[readiness]\n{body}\n");
            let err = Lab::parse(&text, "/labs/x").unwrap_err().to_string();
            assert!(err.contains(want), "for {body:?}: {err:?} lacks {want:?}");
            assert!(err.contains("/labs/x/lab.toml"), "{err}");
        }
        // Both wrong: both reported, for lint.
        let all = Lab::parse_all(
            "name = \"x\"\n[readiness]\ntimeout_secs = 0\nmin_root_bytes = 0\n",
            "/l",
        )
        .unwrap_err();
        assert_eq!(all.len(), 2, "{all:?}");
    }

    /// Each bad input and a fragment its message must contain.
    #[test]
    fn bad_labs_say_what_to_fix() {
        let cases: &[(&str, &str)] = &[
            ("", "missing field `name`"),
            ("name = \"x\"\nsetpu = 1", "unknown field `setpu`"),
            ("name = \"\"", "name is empty"),
            ("name = \"a b\"", "contains ' '"),
            (
                "name = \"x\"\n[setup]\nscript = \"/etc/passwd\"",
                "is absolute",
            ),
            (
                "name = \"x\"\n[setup]\nscript = \"../x.sh\"",
                "leaves the lab folder",
            ),
            (
                "name = \"x\"\n[setup]\ntimeout_secs = 0",
                "setup.timeout_secs is 0",
            ),
            (
                "name = \"x\"\n[setup]\ntimeout_secs = 99999",
                "from 1 to 3600",
            ),
            (
                "name = \"x\"\n[setup]\ntimeout_secs = \"5\"",
                "invalid type: string \"5\", expected a whole number",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\npoints = -1",
                "check `a`: points is -1: use a whole number from 0 to 10000",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\npoints = 1.5",
                "expected a whole number",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nmax_output_bytes = 99999999",
                "check `a`: max_output_bytes is 99999999",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\ncwd = \"work\"",
                "check `a`: cwd `work` is not absolute",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nenv = { LAB_DIR = \"/x\" }",
                "check `a`: env.LAB_DIR is set by the grader",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nenv = { \"1X\" = \"y\" }",
                "check `a`: env.1X is not a variable name",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nenv = { X = 1 }",
                "expected a string",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"  \"",
                "check `a`: run is empty",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"a\"\nrun = \"true\"",
                "check `a`: name is used by an earlier check",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"\"\nrun = \"true\"",
                "check #1 name is empty",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\ntimeout_secs = -1",
                "check `a`: timeout_secs is -1",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nuser = \"\"",
                "check `a`: user is empty",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nfail = \"x\"",
                "unknown field `fail`",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"",
                "missing field `run`",
            ),
            (
                "name = \"x\"\n[files]\nsource = \"..\"",
                "leaves the lab folder",
            ),
            ("name = [", "not valid lab.toml"),
        ];
        for (text, want) in cases {
            let err = Lab::parse(text, "/labs/x").unwrap_err().to_string();
            assert!(err.contains(want), "for {text:?}: {err:?} lacks {want:?}");
            assert!(
                err.contains("/labs/x/lab.toml"),
                "{err} does not name the file"
            );
        }
    }

    #[test]
    fn check_keys_and_their_defaults() {
        let lab = Lab::parse(
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"cat\"\npoints = 3\n\
             env = { GREETING = \"hi\" }\ncwd = \"/tmp\"\nstdin = \"in\"\nmax_output_bytes = 10\n\
             [[checks]]\nname = \"b\"\nrun = \"true\"\npoints = 0\n\
             [[checks]]\nname = \"c\"\nrun = \"true\"\n",
            "/l",
        )
        .unwrap();
        let a = &lab.checks[0];
        assert_eq!(a.points, 3);
        assert_eq!(a.env.get("GREETING").map(String::as_str), Some("hi"));
        assert_eq!(
            (a.cwd.as_deref(), a.stdin.as_deref(), a.max_output_bytes),
            (Some("/tmp"), Some("in"), 10)
        );
        let c = &lab.checks[2];
        assert_eq!(
            (c.points, c.max_output_bytes),
            (1, DEFAULT_MAX_OUTPUT_BYTES)
        );
        assert!(c.env.is_empty() && c.cwd.is_none() && c.stdin.is_none());
        assert_eq!(lab.max_score(), 4);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = "name = \"a b\"\n[setup]\ntimeout_secs = 0\n\
                    [[checks]]\nname = \"one\"\nrun = \" \"\npoints = -2\n\
                    [[checks]]\nname = \"one\"\nrun = \"true\"\n";
        let all: Vec<String> = Lab::parse_all(text, "/l")
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        let wants = [
            "name `a b` contains",
            "setup.timeout_secs is 0",
            "check `one`: run is empty",
            "check `one`: points is -2",
            "check `one`: name is used by an earlier check",
        ];
        assert_eq!(all.len(), wants.len(), "{all:#?}");
        for (got, want) in all.iter().zip(wants) {
            assert!(got.contains(want), "{got} lacks {want}");
        }
        // `parse` keeps the first.
        assert_eq!(Lab::parse(text, "/l").unwrap_err().to_string(), all[0]);
    }

    #[test]
    fn load_checks_that_named_paths_exist() {
        let dir = std::env::temp_dir().join(format!("lab-proto-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(LAB_TOML), FULL).unwrap();
        let err = Lab::load(&dir).unwrap_err().to_string();
        assert!(err.contains("setup.script names `setup.sh`"), "{err}");
        std::fs::write(dir.join("setup.sh"), "true").unwrap();
        let err = Lab::load(&dir).unwrap_err().to_string();
        assert!(err.contains("files.source names `files`"), "{err}");
        std::fs::create_dir_all(dir.join("files/sub")).unwrap();
        std::fs::write(dir.join("files/b.txt"), "b").unwrap();
        std::fs::write(dir.join("files/sub/a.sh"), "a").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("files/sub/a.sh"),
            std::fs::Permissions::from_mode(0o750),
        )
        .unwrap();
        let lab = Lab::load(&dir).unwrap();
        let files = lab.collect_files().unwrap();
        let got: Vec<_> = files.iter().map(|f| (f.path.as_str(), f.mode)).collect();
        assert_eq!(got, vec![("b.txt", 0o644), ("sub/a.sh", 0o750)]);
        std::os::unix::fs::symlink("b.txt", dir.join("files/link")).unwrap();
        let err = lab.collect_files().unwrap_err().to_string();
        assert!(err.contains("is a symlink"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
        let err = Lab::load(&dir).unwrap_err().to_string();
        assert!(err.starts_with("failed to read"), "{err}");
    }

    #[test]
    fn runaway_keys_per_check_override_the_lab_defaults() {
        let text = "name = \"p\"\nleave_running = true\nmax_pids = 100\nmax_memory_bytes = 268435456\n\
            [[checks]]\nname = \"a\"\nrun = \"true\"\n\
            [[checks]]\nname = \"b\"\nrun = \"true\"\nleave_running = false\nmax_pids = 7\nmax_memory_bytes = 16777216\n";
        let lab = Lab::parse(text, "/labs/p").unwrap();
        assert!(lab.leave_running);
        assert_eq!(
            (lab.max_pids, lab.max_memory_bytes),
            (Some(100), Some(256 << 20))
        );
        let (a, b) = (&lab.checks[0], &lab.checks[1]);
        assert!(a.leave_running);
        assert_eq!(
            (a.max_pids, a.max_memory_bytes),
            (Some(100), Some(256 << 20))
        );
        assert!(!b.leave_running);
        assert_eq!((b.max_pids, b.max_memory_bytes), (Some(7), Some(16 << 20)));
        // Nothing said: killed with the check, the agent's limits.
        let lab = Lab::parse(
            "name = \"p\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
            "/x",
        )
        .unwrap();
        let a = &lab.checks[0];
        assert!(!a.leave_running);
        assert_eq!((a.max_pids, a.max_memory_bytes), (None, None));
        // Out of range: every problem named, with its check and the range.
        let errs = Lab::parse_all(
            "name = \"p\"\nmax_pids = 0\n[[checks]]\nname = \"a\"\nrun = \"true\"\nmax_pids = 20000\nmax_memory_bytes = 1024\n",
            "/x",
        )
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(
            text[0].contains("max_pids") && text[0].contains("is 0: use 1 to 16384"),
            "{text:?}"
        );
        assert!(
            text[1].contains("check `a`: max_pids") && text[1].contains("is 20000"),
            "{text:?}"
        );
        assert!(
            text[2].contains("check `a`: max_memory_bytes") && text[2].contains("16 MiB"),
            "{text:?}"
        );
        let err = Lab::parse("name = \"p\"\nleave_running = \"yes\"\n", "/x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid type"), "{err}");
    }

    #[test]
    fn solve_and_initially_for_labctl_test() {
        let lab = Lab::parse(
            "name = \"s\"\n[solve]\nscript = \"solve.sh\"\n\
             [[checks]]\nname = \"a\"\nrun = \"true\"\nsolve = \"touch ~/x\"\n\
             [[checks]]\nname = \"b\"\nrun = \"true\"\ninitially = \"pass\"\n",
            "/labs/s",
        )
        .unwrap();
        assert_eq!(lab.solve_script_path(), Some("/labs/s/solve.sh".into()));
        let (a, b) = (&lab.checks[0], &lab.checks[1]);
        assert_eq!(
            (a.solve.as_deref(), a.initially),
            (Some("touch ~/x"), Initially::Fail)
        );
        assert_eq!((b.solve.as_deref(), b.initially), (None, Initially::Pass));
        // Nothing said: no solve, and every check must fail after setup.
        let lab = Lab::parse("name = \"s\"\n", "/l").unwrap();
        assert_eq!(lab.solve, None);
        let cases: &[(&str, &str)] = &[
            ("[solve]\nscript = \"/root/s.sh\"", "solve.script"),
            ("[solve]\nscript = \"../s.sh\"", "leaves the lab folder"),
            ("[solve]\n", "missing field `script`"),
            (
                "[[checks]]\nname = \"a\"\nrun = \"true\"\ninitially = \"passes\"",
                "unknown variant `passes`, expected `fail` or `pass`",
            ),
            (
                "[[checks]]\nname = \"a\"\nrun = \"true\"\nsolve = \" \"",
                "check `a`: solve is empty",
            ),
        ];
        for (body, want) in cases {
            let text = format!("name = \"s\"\n{body}\n");
            let err = Lab::parse(&text, "/labs/s").unwrap_err().to_string();
            assert!(err.contains(want), "for {body:?}: {err:?} lacks {want:?}");
        }
    }

    #[test]
    fn load_checks_that_the_solve_script_exists() {
        let dir = std::env::temp_dir().join(format!("lab-proto-solve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(LAB_TOML),
            "name = \"s\"\n[solve]\nscript = \"solve.sh\"\n",
        )
        .unwrap();
        let err = Lab::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("solve.script names `solve.sh`, which is not a file"),
            "{err}"
        );
        std::fs::write(dir.join("solve.sh"), "true").unwrap();
        assert!(Lab::load(&dir).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn profile_per_check_overrides_the_lab_default() {
        let text = "name = \"p\"\nprofile = \"system\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"b\"\nrun = \"true\"\nprofile = \"none\"\n";
        let lab = Lab::parse(text, "/labs/p").unwrap();
        assert_eq!(lab.profile, Profile::System);
        assert_eq!(lab.checks[0].profile, Profile::System);
        assert_eq!(lab.checks[1].profile, Profile::None);
        let lab = Lab::parse(
            "name = \"p\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
            "/x",
        )
        .unwrap();
        assert_eq!(lab.checks[0].profile, Profile::Login);
        let err = Lab::parse("name = \"p\"\nprofile = \"user\"\n", "/x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `user`"), "{err}");
    }
}
