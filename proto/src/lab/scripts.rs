//! The shell a lab holds, for `labctl lint`'s `bash -n`: the setup script
//! (the lab's and each VM's), the solve script, and each check's `run` and
//! `solve`. From a parsed [`Lab`], or — when the model refused the file — from
//! its TOML as far as it parses, so a typo in a check is reported together
//! with the model's problems. The one place besides `parse` that reads
//! `lab.toml`, and it reads only these keys.

use super::{LAB_TOML, Lab};
use std::path::{Path, PathBuf};

/// What `bash -n` reads, each with how to name it in a problem.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scripts {
    /// ("the setup script `…`", its path): files that exist.
    pub files: Vec<(String, PathBuf)>,
    /// ("check `name`: `run`", the command).
    pub commands: Vec<(String, String)>,
    /// `[files].source`, the folder shipped to the guest (its scripts are
    /// checked for Windows line endings): a path on this machine.
    pub files_source: Option<PathBuf>,
}

impl Scripts {
    fn file(&mut self, what: &str, path: PathBuf) {
        if path.is_file() {
            self.files
                .push((format!("{what} `{}`", path.display()), path));
        }
    }

    fn check(&mut self, name: &str, run: &str, solve: Option<&str>) {
        self.commands
            .push((format!("check `{name}`: `run`"), run.to_owned()));
        if let Some(solve) = solve {
            self.commands
                .push((format!("check `{name}`: `solve`"), solve.to_owned()));
        }
    }
}

impl Lab {
    /// The shell this lab holds.
    pub fn scripts(&self) -> Scripts {
        let mut s = Scripts::default();
        if let Some(p) = self.setup_script_path() {
            s.file("the setup script", p);
        }
        for vm in &self.vms {
            if let Some(script) = vm.setup.as_ref().and_then(|x| x.script.as_ref()) {
                s.file(
                    &format!("vm `{}`: the setup script", vm.name),
                    self.dir.join(script),
                );
            }
        }
        if let Some(p) = self.solve_script_path() {
            s.file("the solve script", p);
        }
        for c in &self.checks {
            s.check(&c.name, &c.run, c.solve.as_deref());
        }
        s.files_source = self.files.as_ref().map(|f| self.dir.join(&f.source));
        s
    }
}

/// The shell in `dir`'s `lab.toml` as far as its TOML parses, whatever the
/// model says of it: every string where a script or command belongs, taken
/// as it is (a check without a name is `#N`).
pub fn scripts_of_toml(dir: &Path) -> Scripts {
    let mut s = Scripts::default();
    let Ok(Ok(doc)) = std::fs::read_to_string(dir.join(LAB_TOML)).map(|t| t.parse::<toml::Table>())
    else {
        return s;
    };
    let str_of = |v: Option<&toml::Value>, key: &str| {
        v.and_then(|t| t.get(key))
            .and_then(toml::Value::as_str)
            .map(str::to_owned)
    };
    if let Some(script) = str_of(doc.get("setup"), "script") {
        s.file("the setup script", dir.join(script));
    }
    let vms = doc.get("vms").and_then(toml::Value::as_array);
    for vm in vms.into_iter().flatten() {
        if let (Some(name), Some(script)) = (str_of(Some(vm), "name"), str_of(Some(vm), "setup")) {
            s.file(&format!("vm `{name}`: the setup script"), dir.join(script));
        }
    }
    if let Some(script) = str_of(doc.get("solve"), "script") {
        s.file("the solve script", dir.join(script));
    }
    s.files_source = str_of(doc.get("files"), "source").map(|f| dir.join(f));
    let checks = doc.get("checks").and_then(toml::Value::as_array);
    for (i, c) in checks.into_iter().flatten().enumerate() {
        let Some(run) = str_of(Some(c), "run") else {
            continue;
        };
        let name = str_of(Some(c), "name").unwrap_or_else(|| format!("#{}", i + 1));
        s.check(&name, &run, str_of(Some(c), "solve").as_deref());
    }
    s
}
