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
use lab_agent_proto::lab::{Lab, Scripts, scripts_of_toml};
use std::path::Path;
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
            syntax(&scripts_of_toml(dir), &mut found);
            return found;
        }
    };
    syntax(&lab.scripts(), &mut found);
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

/// `bash -n` on every script and command of the lab
/// ([`Scripts`](lab_agent_proto::lab::Scripts): the setup scripts, the
/// solve script, each check's `run` and `solve`): a typo in a check would
/// otherwise read as every student failing it.
fn syntax(scripts: &Scripts, found: &mut Findings) {
    let files = scripts
        .files
        .iter()
        .map(|(what, p)| (vec![p.as_os_str()], what));
    let commands = scripts
        .commands
        .iter()
        .map(|(what, text)| (vec!["-c".as_ref(), text.as_ref()], what));
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
        // The larger payload: a lab that fits with the agent fits without.
        agent_from: Default::default(),
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
