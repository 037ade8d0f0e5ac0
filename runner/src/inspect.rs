//! Everything about a lab that can be known without running it, every
//! problem in one run: what `labctl lint` prints, and what `labctl try`
//! checks before it runs a lab, so a lab that `labctl secret` would reject
//! never passes `try`.
//!
//! What is checked: the `lab.toml` model (every key, every check), that the
//! files and the setup script it names exist and can be shipped, the shell
//! syntax of the setup and solve scripts and of each check's `run` and
//! `solve` (`bash -n`), that the solve script is not among the files
//! shipped to students, and the payload's size against the Secret limit,
//! with the agent it would ship.

use crate::payload::{self, PayloadError, RenderOptions};
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::{Format, SecretMeta};
use lab_agent_proto::lab::Lab;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What linting a lab found.
#[derive(Debug, Default)]
pub struct Findings {
    /// The lab, when its `lab.toml` is valid.
    pub lab: Option<Lab>,
    /// What must be fixed, one message each.
    pub problems: Vec<String>,
    /// What was learned or could not be checked (the budget line, no bash).
    pub notes: Vec<String>,
}

/// Lints the lab in `dir`; `agent` is the static agent to count in the
/// payload (default: found as `labctl secret` finds it).
pub fn lint(dir: &Path, agent: Option<&Path>) -> Findings {
    let mut found = Findings::default();
    let lab = match Lab::load_all(dir) {
        Ok(lab) => lab,
        Err(errors) => {
            found.problems.extend(errors.iter().map(|e| match e.hint() {
                Some(h) => format!("{e}\nhint: {h}"),
                None => e.to_string(),
            }));
            // The shell syntax can still be checked, from what the file
            // says as far as it parses at all.
            syntax(&Scripts::from_toml(dir), &mut found);
            return found;
        }
    };
    syntax(&Scripts::from_lab(&lab), &mut found);
    if let (Some(solve), Some(files)) = (&lab.solve, &lab.files) {
        if lab
            .dir
            .join(&solve.script)
            .starts_with(lab.dir.join(&files.source))
        {
            found.problems.push(format!(
                "solve.script `{}` is inside [files].source `{}`: it would be copied into every \
                 student's VM; move it out of that folder",
                solve.script.display(),
                files.source.display()
            ));
        }
    }
    match lab.collect_files() {
        Ok(_) => budget(&lab, agent, &mut found),
        Err(e) => found.problems.push(e.to_string()),
    }
    found.lab = Some(lab);
    found
}

/// What `bash -n` reads: the setup and solve scripts, and each check's
/// name, `run` and `solve`.
#[derive(Debug, Default)]
struct Scripts {
    setup: Option<PathBuf>,
    solve: Option<PathBuf>,
    checks: Vec<(String, String, Option<String>)>,
}

impl Scripts {
    fn from_lab(lab: &Lab) -> Scripts {
        Scripts {
            setup: lab.setup_script_path(),
            solve: lab.solve_script_path(),
            checks: lab
                .checks
                .iter()
                .map(|c| (c.name.clone(), c.run.clone(), c.solve.clone()))
                .collect(),
        }
    }

    /// From a `lab.toml` the model refused: every string that looks like a
    /// setup script or a check, taken as it is.
    fn from_toml(dir: &Path) -> Scripts {
        let text = std::fs::read_to_string(dir.join(lab_agent_proto::lab::LAB_TOML));
        let Ok(Ok(doc)) = text.map(|t| t.parse::<toml::Table>()) else {
            return Scripts::default();
        };
        let script = |table: &str| {
            doc.get(table)
                .and_then(|s| s.get("script"))
                .and_then(toml::Value::as_str)
                .map(|s| dir.join(s))
                .filter(|p| p.is_file())
        };
        let (setup, solve) = (script("setup"), script("solve"));
        let checks = doc
            .get("checks")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, c)| {
                let run = c.get("run")?.as_str()?.to_owned();
                let name = c.get("name").and_then(toml::Value::as_str);
                let solve = c.get("solve").and_then(toml::Value::as_str);
                Some((
                    name.map_or(format!("#{}", i + 1), str::to_owned),
                    run,
                    solve.map(str::to_owned),
                ))
            })
            .collect();
        Scripts {
            setup,
            solve,
            checks,
        }
    }
}

/// `bash -n` on the setup and solve scripts and on every check's `run`
/// and `solve`: a typo in a check would otherwise read as every student
/// failing it.
fn syntax(scripts: &Scripts, found: &mut Findings) {
    let scripts_ = [("setup", &scripts.setup), ("solve", &scripts.solve)];
    let files = scripts_.iter().filter_map(|(what, p)| {
        let p = p.as_ref()?;
        Some((
            vec![p.as_os_str()],
            format!("the {what} script `{}`", p.display()),
        ))
    });
    let commands = scripts.checks.iter().flat_map(|(name, run, solve)| {
        [("run", Some(run)), ("solve", solve.as_ref())]
            .into_iter()
            .filter_map(move |(key, text)| {
                Some((
                    vec!["-c".as_ref(), text?.as_ref()],
                    format!("check `{name}`: `{key}`"),
                ))
            })
    });
    for (args, what) in files.chain(commands) {
        match bash_n(&args) {
            Ok(None) => {}
            Ok(Some(err)) => found
                .problems
                .push(format!("{what} is not valid bash:\n{}", indent(&err))),
            Err(note) => return found.notes.push(note),
        }
    }
}

/// `Ok(None)` when bash parses it, `Ok(Some(message))` when not, `Err`
/// when bash cannot be run here.
fn bash_n(args: &[&std::ffi::OsStr]) -> Result<Option<String>, String> {
    let out = Command::new("bash")
        .arg("-n")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("note: shell syntax not checked: failed to run `bash -n`: {e}"))?;
    if out.status.success() {
        return Ok(None);
    }
    Ok(Some(
        String::from_utf8_lossy(&out.stderr).trim_end().to_owned(),
    ))
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  │ {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The payload's size with the agent it would ship, as `labctl secret`
/// renders it (with a fresh token: the same length as the real one).
fn budget(lab: &Lab, agent: Option<&Path>, found: &mut Findings) {
    // amd64 unless the agent given is another's: the amd64 agent is the
    // larger one (BENCHMARKS.md), so a lab within budget there fits both.
    let arch = lab_agent_cloudinit::lab_payload::payload_arch(None, agent).unwrap_or_default();
    let agent = match agent_bin::load(agent, Linkage::Static(arch)) {
        Ok(agent) => agent,
        Err(e) => {
            let hint = e.hint().map_or(String::new(), |h| format!("\nhint: {h}"));
            return found.notes.push(format!(
                "note: the payload's size was not checked: {e}{hint}"
            ));
        }
    };
    let token = match lab_agent_cloudinit::token::generate() {
        Ok(token) => token,
        Err(e) => {
            return found
                .notes
                .push(format!("note: the payload's size was not checked: {e}"));
        }
    };
    let opts = RenderOptions {
        arch,
        meta: SecretMeta {
            name: "lab-lint".into(),
            namespace: None,
            labels: Default::default(),
            annotations: Default::default(),
        },
        format: Format::Yaml,
        serial_autologin: true,
    };
    match payload::render(lab, &agent, &token, &opts) {
        Ok(rendered) => found.notes.push(format!(
            "payload with `{}`: {}",
            agent.path.display(),
            rendered.user_data.budget()
        )),
        Err(PayloadError::Render(lab_agent_cloudinit::Error::TooLarge(t))) => {
            found.notes.push(t.budget.to_string());
            let e = PayloadError::Render(lab_agent_cloudinit::Error::TooLarge(t));
            let hint = e.hint().map_or(String::new(), |h| format!("\nhint: {h}"));
            found.problems.push(format!("{e}{hint}"));
        }
        Err(e) => found.problems.push(e.to_string()),
    }
}
