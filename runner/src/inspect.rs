//! Everything about a lab that can be known without running it, every
//! problem in one run: what `labctl lint` prints, and what `labctl try`
//! and `labctl test` check before they run a lab, so a lab that `labctl
//! secret` would reject never passes them.
//!
//! What is checked: the `lab.toml` model (every key, every check), that the
//! files and the setup script it names exist and can be shipped, the shell
//! syntax of the setup and solve scripts and of each check's `run` and
//! `solve` (`bash -n`), Windows line endings in any of them (and in the
//! scripts among the lab's files), that the solve script is not among the
//! files shipped to students, and each VM's payload (its own setup, the
//! files, its parameters) against the Secret limit, with the agent it
//! would ship, as `labctl secret --vm` renders it.

use crate::payload::{self, PayloadError, RenderOptions};
use crate::trial::Params;
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::{Format, SecretMeta};
use lab_agent_proto::RootDisk;
use lab_agent_proto::lab::{Lab, OnSmallRoot, Scripts, scripts_of_toml};
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
/// payload (default: found as `labctl secret` finds it), `params` what each
/// VM's payload is rendered with (`try`'s and `test`'s `--param`).
pub fn lint(dir: &Path, agent: Option<&Path>, params: &Params) -> Findings {
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
        Ok(_) => budget(&lab, agent, params, &mut found),
        Err(e) => found.problems.push(e.to_string()),
    }
    found.notes.extend(small_root_choice(&lab));
    found.lab = Some(lab);
    found
}

/// What `[readiness] on_small_root` does with the lab's `min_root_bytes`,
/// said where the author chose it: the seeds' golden-disk rule is that a
/// golden lab must also run on the containerDisk fallback (~2.4 GiB root).
fn small_root_choice(lab: &Lab) -> Option<String> {
    let min = gib(lab.readiness.min_root_bytes?);
    Some(match lab.readiness.on_small_root {
        OnSmallRoot::Warn => format!(
            "readiness: a root filesystem under {min} (min_root_bytes) is ready, flagged \
             (`root.below_min`, the reason) and the student's interactive shells show a banner \
             (on_small_root = \"warn\", the default); `on_small_root = \"fail\"` fails such a VM \
             before setup instead"
        ),
        OnSmallRoot::Fail => format!(
            "readiness: a root filesystem under {min} (min_root_bytes) fails the VM before setup \
             (on_small_root = \"fail\"): on a containerDisk (~2.4 GiB root, the golden disk's \
             fallback) every session would fail; `on_small_root = \"warn\"` runs it, flagged, with \
             a banner for the student"
        ),
    })
}

/// Where the lab's `min_root_bytes` was checked in a `labctl try`, for its
/// author: `root` is the VM's answer (`None`: a sandbox or the machine,
/// where it is not checked at all); `None` when the lab sets none.
pub fn root_note(lab: &Lab, root: Option<&RootDisk>) -> Option<String> {
    let min = gib(lab.readiness.min_root_bytes?);
    let Some(root) = root else {
        return Some(format!(
            "note: [readiness] min_root_bytes ({min}) is checked in VMs only (`--vm IMAGE`): \
             not here"
        ));
    };
    let size = gib(root.size_bytes);
    Some(if root.below_min {
        format!(
            "vm: the root filesystem is {size}, under the lab's min_root_bytes ({min}): ready \
             anyway (on_small_root = \"warn\"), flagged, and the student's interactive shells show \
             a banner"
        )
    } else {
        format!("vm: the root filesystem is {size}: the lab's min_root_bytes ({min}) is met")
    })
}

/// `10.0 GiB`, cut to a tenth (never rounded up to the need).
fn gib(bytes: u64) -> String {
    let tenths = u128::from(bytes) * 10 / (1 << 30);
    format!("{}.{} GiB", tenths / 10, tenths % 10)
}

/// `bash -n` on every script and command of the lab
/// ([`Scripts`](lab_agent_proto::lab::Scripts): the setup scripts, the
/// solve script, each check's `run` and `solve`): a typo in a check would
/// otherwise read as every student failing it.
fn syntax(scripts: &Scripts, found: &mut Findings) {
    // A Windows line ending is part of each command to bash: `bash -n`
    // says "unexpected end of file" or nothing, and the script fails with
    // "cannot execute: required file not found". Named instead.
    let files = scripts.files.iter().filter_map(|(what, p)| {
        if has_crlf(&std::fs::read(p).unwrap_or_default()) {
            found.problems.push(crlf_problem(what, p));
            return None;
        }
        Some((vec![p.as_os_str()], what))
    });
    let files: Vec<_> = files.collect();
    let commands = scripts.commands.iter().filter_map(|(what, text)| {
        if text.contains('\r') {
            found.problems.push(format!(
                "{what} has a carriage return (`\\r`, a Windows line ending): bash reads it as \
                 part of the command\nhint: save lab.toml with Unix line endings (LF)"
            ));
            return None;
        }
        Some((vec!["-c".as_ref(), text.as_ref()], what))
    });
    let commands: Vec<_> = commands.collect();
    // The scripts among the lab's files (`#!`): the setup or a student
    // runs them.
    if let Some(source) = &scripts.files_source {
        for (shown, path) in scripts_under(source, Path::new("")) {
            if has_crlf(&std::fs::read(&path).unwrap_or_default()) {
                let what = format!("the lab's file `{}`", shown.display());
                found.problems.push(crlf_problem(&what, &path));
            }
        }
    }
    for (args, what) in files.into_iter().chain(commands) {
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

/// The files under `dir` that start with `#!` (each with its path under
/// the lab's files folder), in name order; links and the unreadable are
/// `Lab::collect_files`'s to report.
fn scripts_under(dir: &Path, shown: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    let mut out = Vec::new();
    for e in entries {
        let (path, shown) = (e.path(), shown.join(e.file_name()));
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(scripts_under(&path, &shown)),
            Ok(t) if t.is_file() => {
                let mut head = [0u8; 2];
                let read = std::fs::File::open(&path)
                    .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
                if read.is_ok() && head == *b"#!" {
                    out.push((shown, path));
                }
            }
            _ => {}
        }
    }
    out
}

fn has_crlf(bytes: &[u8]) -> bool {
    bytes.windows(2).any(|w| w == b"\r\n")
}

/// A script with Windows line endings, and the command that fixes it.
fn crlf_problem(what: &str, path: &Path) -> String {
    format!(
        "{what} has Windows line endings (CRLF): bash reads each `\\r` as part of a command \
         (\"$'\\r': command not found\", or \"cannot execute: required file not found\" for its \
         `#!` line)\nhint: convert it to Unix line endings: `sed -i 's/\\r$//' {}` (or `dos2unix`)",
        path.display()
    )
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  │ {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each VM's payload size with the agent it would ship, as `labctl secret`
/// (`--vm NAME` in a lab with `[[vms]]`) renders it: the VM's own setup,
/// the files and its parameters, with a fresh token (the same length as
/// the real one). A budget line per VM, named in a session.
fn budget(lab: &Lab, agent: Option<&Path>, params: &Params, found: &mut Findings) {
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
        channel: Default::default(),
    };
    let vms: Vec<Option<&str>> = match lab.vms.is_empty() {
        true => vec![None],
        false => lab.vm_names().into_iter().map(Some).collect(),
    };
    for vm in vms {
        let on = vm.map_or(String::new(), |vm| format!("VM `{vm}`: "));
        let own = match lab.for_vm(vm, &params.for_vm(vm)) {
            Ok(own) => own,
            Err(e) => {
                found.problems.push(format!("{on}{e}"));
                continue;
            }
        };
        match payload::render(&own, &agent, &token, &opts) {
            Ok(rendered) => found.notes.push(format!(
                "{on}payload with `{}`: {}",
                agent.path.display(),
                rendered.user_data.budget()
            )),
            Err(PayloadError::Render(lab_agent_cloudinit::Error::TooLarge(t))) => {
                found.notes.push(format!("{on}{}", t.budget));
                let e = PayloadError::Render(lab_agent_cloudinit::Error::TooLarge(t));
                let hint = e.hint().map_or(String::new(), |h| format!("\nhint: {h}"));
                found.problems.push(format!("{on}{e}{hint}"));
            }
            Err(e) => found.problems.push(format!("{on}{e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab(readiness: &str) -> Lab {
        Lab::parse(&format!("name = \"x\"\n[readiness]\n{readiness}"), "/l").unwrap()
    }

    fn root(size_bytes: u64, below_min: bool) -> RootDisk {
        RootDisk {
            size_bytes,
            free_bytes: 0,
            written_bytes: None,
            written_bytes_total: None,
            min_bytes: Some(10 << 30),
            below_min,
        }
    }

    /// Where `min_root_bytes` was checked, as `labctl try` says it.
    #[test]
    fn the_root_is_checked_in_vms_only() {
        assert_eq!(root_note(&lab(""), None), None, "no need, nothing to say");
        let l = lab("min_root_bytes = 10737418240\n");
        assert_eq!(
            root_note(&l, None).unwrap(),
            "note: [readiness] min_root_bytes (10.0 GiB) is checked in VMs only (`--vm IMAGE`): not here"
        );
        assert_eq!(
            root_note(&l, Some(&root(3 << 30, true))).unwrap(),
            "vm: the root filesystem is 3.0 GiB, under the lab's min_root_bytes (10.0 GiB): ready \
             anyway (on_small_root = \"warn\"), flagged, and the student's interactive shells show \
             a banner"
        );
        assert_eq!(
            root_note(&l, Some(&root((11 << 30) - 1, false))).unwrap(),
            "vm: the root filesystem is 10.9 GiB: the lab's min_root_bytes (10.0 GiB) is met"
        );
    }
}
