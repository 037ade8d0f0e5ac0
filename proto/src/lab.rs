//! The `lab.toml` model: one folder describes a lab's guest side (setup
//! script, files copied to `/opt/lab/`) and its backend side (checks).
//!
//! Parsing ([`Lab::parse`]) is pure; [`Lab::load`] and [`Lab::collect_files`]
//! are the only functions here that touch the filesystem.
//!
//! Every error names the file, the field and what to do about it, because the
//! person reading it is a lab author with `lab.toml` open in an editor.

use crate::exec::Profile;
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The file name of a lab's description inside its folder.
pub const LAB_TOML: &str = "lab.toml";
pub use crate::{GUEST_LAB_DIR, LAB_DIR_ENV};
/// Default `[setup].timeout_secs`.
pub const DEFAULT_SETUP_TIMEOUT_SECS: u64 = 600;
/// Default `timeout_secs` of a check.
pub const DEFAULT_CHECK_TIMEOUT_SECS: u64 = 60;
/// Longest timeout a lab may ask for, for setup or a check (one hour).
pub const MAX_TIMEOUT_SECS: u64 = 3600;

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
    /// Which startup files the check's shell reads: the check's own
    /// `profile`, else the lab's, else `login`.
    pub profile: Profile,
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
    #[error("failed to read `{path}`: {source}\nhint: a lab is a folder with a `lab.toml` in it")]
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
    profile: Option<Profile>,
}

impl Lab {
    /// Reads and validates `DIR/lab.toml`, and checks that the setup script
    /// and the files folder it names exist.
    pub fn load(dir: impl AsRef<Path>) -> Result<Lab, LabError> {
        let dir = dir.as_ref();
        let path = dir.join(LAB_TOML);
        let text = std::fs::read_to_string(&path).map_err(|source| LabError::Read {
            path: path.clone(),
            source,
        })?;
        let lab = Lab::parse(&text, dir)?;
        if let Some(script) = lab.setup.as_ref().and_then(|s| s.script.as_ref()) {
            let full = dir.join(script);
            if !full.is_file() {
                return Err(invalid(
                    &path,
                    "setup.script",
                    format!(
                        "names `{}`, which is not a file in `{}`: create it or remove `script` from [setup]",
                        script.display(),
                        dir.display()
                    ),
                ));
            }
        }
        if let Some(files) = &lab.files {
            let full = dir.join(&files.source);
            if !full.is_dir() {
                return Err(invalid(
                    &path,
                    "files.source",
                    format!(
                        "names `{}`, which is not a folder in `{}`: create it or remove [files]",
                        files.source.display(),
                        dir.display()
                    ),
                ));
            }
        }
        Ok(lab)
    }

    /// Parses and validates lab.toml text. `dir` is only recorded and used in
    /// messages; nothing is read.
    pub fn parse(text: &str, dir: impl AsRef<Path>) -> Result<Lab, LabError> {
        let dir = dir.as_ref().to_path_buf();
        let path = dir.join(LAB_TOML);
        let raw: RawLab = toml::from_str(text).map_err(|e| LabError::Syntax {
            path: path.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;

        let name = raw.name.trim().to_owned();
        if name.is_empty() {
            return Err(invalid(&path, "name", "is empty: give the lab a name"));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Err(invalid(
                &path,
                "name",
                format!(
                    "`{name}` contains {bad:?}: use letters, digits, `-`, `_` and `.` (it ends up in labels and file names)"
                ),
            ));
        }
        if name.len() > 63 {
            return Err(invalid(
                &path,
                "name",
                format!("is {} characters long: keep it to 63", name.len()),
            ));
        }

        let setup = match raw.setup {
            None => None,
            Some(s) => {
                let script = match s.script {
                    None => None,
                    Some(script) => Some(relative_path(&path, "setup.script", &script)?),
                };
                let timeout_secs = timeout(
                    &path,
                    "setup.timeout_secs",
                    s.timeout_secs,
                    DEFAULT_SETUP_TIMEOUT_SECS,
                )?;
                Some(Setup {
                    script,
                    timeout_secs,
                })
            }
        };

        let files = match raw.files {
            None => None,
            Some(f) => Some(Files {
                source: relative_path(&path, "files.source", &f.source)?,
            }),
        };

        let mut seen = HashSet::new();
        let mut checks = Vec::with_capacity(raw.checks.len());
        for (i, c) in raw.checks.into_iter().enumerate() {
            let field = |name: &str| format!("checks[{i}].{name}");
            let check_name = c.name.trim().to_owned();
            if check_name.is_empty() {
                return Err(invalid(
                    &path,
                    &field("name"),
                    "is empty: every check needs a name the student will see",
                ));
            }
            if !seen.insert(check_name.clone()) {
                return Err(invalid(
                    &path,
                    &field("name"),
                    format!(
                        "`{check_name}` is used by an earlier check: check names must be unique"
                    ),
                ));
            }
            if c.run.trim().is_empty() {
                return Err(invalid(
                    &path,
                    &field("run"),
                    format!("of check `{check_name}` is empty: give the command that verifies it"),
                ));
            }
            let user = match c.user {
                Some(u) if u.trim().is_empty() => {
                    return Err(invalid(
                        &path,
                        &field("user"),
                        format!(
                            "of check `{check_name}` is empty: name a user or remove the key (default root)"
                        ),
                    ));
                }
                other => other,
            };
            let timeout_secs = timeout(
                &path,
                &field("timeout_secs"),
                c.timeout_secs,
                DEFAULT_CHECK_TIMEOUT_SECS,
            )?;
            checks.push(Check {
                name: check_name,
                run: c.run,
                user,
                timeout_secs,
                fail_message: c.fail_message,
                profile: c.profile.or(raw.profile).unwrap_or_default(),
            });
        }

        Ok(Lab {
            dir,
            name,
            setup,
            files,
            checks,
            profile: raw.profile.unwrap_or_default(),
        })
    }

    /// The setup script's path on this machine, if the lab has one.
    pub fn setup_script_path(&self) -> Option<PathBuf> {
        self.setup
            .as_ref()
            .and_then(|s| s.script.as_ref())
            .map(|s| self.dir.join(s))
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
                "invalid type",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"  \"",
                "checks[0].run of check `a` is empty",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"a\"\nrun = \"true\"",
                "checks[1].name `a` is used by an earlier check",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"\"\nrun = \"true\"",
                "checks[0].name is empty",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\ntimeout_secs = -1",
                "checks[0].timeout_secs is -1",
            ),
            (
                "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\nuser = \"\"",
                "checks[0].user of check `a` is empty",
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
