//! From `lab.toml`'s text to a validated [`Lab`](super::Lab): every problem
//! at once, each naming the file, the field and the fix.

use super::keys;
use super::raw::*;
use super::*;
use crate::exec::RawExecOptions;
use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path, PathBuf};

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
        if let Ok((raw, _)) = raw_lab(&text, &path) {
            let script = raw.keys.setup.and_then(|s| s.script);
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
            for vm in &raw.keys.vms {
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
                .keys
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
                .keys
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
        let (raw, mut problems) = raw_lab(text, &path)?;
        let mut check = |r: Result<(), LabError>| {
            if let Err(e) = r {
                problems.push(e);
            }
        };

        let name = raw.keys.name.trim().to_owned();
        check(lab_name(&path, &name));

        let setup = raw.keys.setup.map(|s| {
            let script = s.script.and_then(|script| {
                relative_path(&path, "setup.script", &script)
                    .map_err(|e| check(Err(e)))
                    .ok()
            });
            let timeout_secs = setup_timeout(
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
            .keys
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
                on_small_root: match (r.on_small_root, r.min_root_bytes) {
                    (Some(choice), None) => {
                        check(Err(invalid(
                            &path,
                            "readiness.on_small_root",
                            format!(
                                "is \"{}\" but there is no min_root_bytes for it to act on: set readiness.min_root_bytes, or remove on_small_root",
                                choice.as_str()
                            ),
                        )));
                        choice
                    }
                    (choice, _) => choice.unwrap_or_default(),
                },
            });

        let solve = raw.keys.solve.and_then(|s| {
            relative_path(&path, "solve.script", &s.script)
                .map(|script| Solve { script })
                .map_err(|e| check(Err(e)))
                .ok()
        });

        let files = raw.keys.files.and_then(|f| {
            relative_path(&path, "files.source", &f.source)
                .map(|source| Files { source })
                .map_err(|e| check(Err(e)))
                .ok()
        });

        // The lab-wide defaults: what a check without its own key gets.
        options_as_written(&path, "", &raw.options)
            .into_iter()
            .for_each(|e| check(Err(e)));
        let (defaults, option_problems) = raw.options.over(&ExecOptions::default());
        for problem in option_problems {
            check(Err(invalid(
                &path,
                &problem.key(),
                problem.detail().to_string(),
            )));
        }
        let mut seen = HashSet::new();
        let mut checks = Vec::with_capacity(raw.keys.checks.len());
        for (i, c) in raw.keys.checks.into_iter().enumerate() {
            let check_name = c.keys.name.trim().to_owned();
            // Errors name the check as the author knows it, by its name;
            // only a check without one is named by its position.
            let prefix = if check_name.is_empty() {
                format!("check #{} ", i + 1)
            } else {
                format!("check `{check_name}`: ")
            };
            let field = |key: &str| format!("{prefix}{key}");
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
            if c.keys.run.trim().is_empty() {
                bad("run", "is empty: give the command that verifies it".into());
            }
            if c.keys.solve.as_deref().is_some_and(|s| s.trim().is_empty()) {
                bad(
                    "solve",
                    "is empty: give what a student would run, or remove the key".into(),
                );
            }
            let points = match c.keys.points {
                None => DEFAULT_POINTS,
                Some(p) if (0..=i64::from(MAX_POINTS)).contains(&p) => p as u32,
                Some(p) => {
                    bad(
                        "points",
                        format!("is {p}: use a whole number from 0 to {MAX_POINTS}"),
                    );
                    DEFAULT_POINTS
                }
            };
            // The check's own keys over the lab's defaults: the numbers by
            // the options' own ranges, then the options' other rules.
            for e in options_as_written(&path, &prefix, &c.options) {
                check(Err(e));
            }
            let (exec, option_problems) = c.options.over(&defaults);
            for problem in option_problems {
                check(Err(invalid(
                    &path,
                    &field(&problem.key()),
                    problem.detail().to_string(),
                )));
            }
            checks.push(Check {
                name: check_name,
                run: c.keys.run,
                fail_message: c.keys.fail_message,
                points,
                exec,
                vm: c.keys.vm,
                solve: c.keys.solve,
                initially: c.keys.initially,
            });
        }
        let vms = vms::resolve(
            &path,
            raw.keys.vms,
            setup.as_ref(),
            &mut checks,
            &mut problems,
        );

        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Lab {
            dir,
            name,
            setup,
            files,
            checks,
            defaults,
            readiness,
            vms,
            vm_env: BTreeMap::new(),
            solve,
        })
    }
}

/// What `lab.toml` asks of the options as written, beyond their own rules
/// ([`RawExecOptions::over`]): `prefix` names the check (empty at the top
/// level), so each problem is told where it was written, once.
fn options_as_written(path: &Path, prefix: &str, raw: &RawExecOptions) -> Vec<LabError> {
    let mut out = Vec::new();
    let mut bad = |key: &str, problem: String| {
        out.push(invalid(path, &format!("{prefix}{key}"), problem));
    };
    if raw.user.as_deref().is_some_and(|u| u.trim().is_empty()) {
        bad(
            "user",
            "is empty: name a user or remove the key (default root)".into(),
        );
    }
    if let Some(cwd) = raw.cwd.as_deref().filter(|c| !c.starts_with('/')) {
        bad(
            "cwd",
            format!(
                "`{cwd}` is not absolute: give a path in the guest starting with `/` (`$LAB_DIR` is not expanded here)"
            ),
        );
    }
    for (key, _) in &raw.env {
        if let Err(problem) = env_name(key) {
            bad(&format!("env.{key}"), problem);
        }
    }
    out
}

/// `lab.toml`'s text as written (the serde layer), with every unknown key
/// reported in the file's order and left out, so that the rest is parsed
/// and its problems reported in the same run; `Err` when the rest does not
/// parse either (its syntax or a type).
fn raw_lab(text: &str, path: &Path) -> Result<(RawLab, Vec<LabError>), Vec<LabError>> {
    let syntax = |e: toml::de::Error| LabError::Syntax {
        path: path.to_path_buf(),
        message: plain_type_names(e.to_string().trim_end()),
    };
    let unknown = keys::unknown_keys(text, path);
    if unknown.is_empty() {
        return toml::from_str::<RawLab>(text)
            .map(|raw| (raw, Vec::new()))
            .map_err(|e| vec![syntax(e)]);
    }
    let mut doc: toml::Table = toml::from_str(text).map_err(|e| vec![syntax(e)])?;
    for u in &unknown {
        keys::remove(&mut doc, &u.at);
    }
    let mut problems: Vec<LabError> = unknown.into_iter().map(|u| u.error).collect();
    match RawLab::deserialize(toml::Value::Table(doc)) {
        Ok(raw) => Ok((raw, problems)),
        Err(e) => {
            problems.push(syntax(e));
            Err(problems)
        }
    }
}

fn first(mut problems: Vec<LabError>) -> LabError {
    problems.remove(0)
}

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

pub(super) fn invalid(path: &Path, field: &str, problem: impl Into<String>) -> LabError {
    LabError::Invalid {
        path: path.to_path_buf(),
        field: field.to_owned(),
        problem: problem.into(),
    }
}

/// A setup's timeout (`[setup].timeout_secs`, a VM's `setup_timeout_secs`):
/// 1 to [`MAX_SETUP_TIMEOUT_SECS`].
pub(super) fn setup_timeout(
    path: &Path,
    field: &str,
    value: Option<i64>,
    default: u64,
) -> Result<u64, LabError> {
    match value {
        None => Ok(default),
        Some(v) if v >= 1 && v as u64 <= MAX_SETUP_TIMEOUT_SECS => Ok(v as u64),
        Some(v) => Err(invalid(
            path,
            field,
            format!("is {v}: use a number of seconds from 1 to {MAX_SETUP_TIMEOUT_SECS}"),
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
pub(super) fn relative_path(path: &Path, field: &str, value: &str) -> Result<PathBuf, LabError> {
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
