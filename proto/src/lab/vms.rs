//! `[[vms]]`: a lab of several VMs (a session), each with a name that is
//! its hostname, its own setup and its own payload, and checks that say on
//! which VM they run. A lab without `[[vms]]` is one VM, as before.
//!
//! What a VM's setup and checks see of the session is rendered into its
//! payload ([`Lab::for_vm`]): `LAB_VM` (its name), `LAB_VMS` (every name,
//! space-separated, in `lab.toml`'s order: a shell loops over it with `for
//! vm in $LAB_VMS`, and a hostname label has no space) and `LAB_PARAM_<KEY>`
//! for each parameter the backend gave at render time.

use super::{LabError, Setup, invalid};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// Longest VM name: a hostname label.
pub const MAX_VM_NAME_LEN: usize = 63;
/// Longest value of one `--param`: an environment string the kernel passes
/// to a command must stay under 128 KiB (`MAX_ARG_STRLEN`), and every
/// command of the VM gets it. All of them together are held to the
/// Secret's budget by the generator.
pub const MAX_PARAM_BYTES: usize = 64 * 1024;
/// The variable that names the VM a command runs on.
pub const LAB_VM_ENV: &str = "LAB_VM";
/// The variable that names every VM of the session, space-separated.
pub const LAB_VMS_ENV: &str = "LAB_VMS";
/// The prefix of a parameter's variable: `--param KEY=V` is `LAB_PARAM_KEY`.
pub const LAB_PARAM_PREFIX: &str = "LAB_PARAM_";

/// One VM of a lab of several (`[[vms]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// Its hostname label, unique in the lab.
    pub name: String,
    /// Its setup: its own `setup` script (with `setup_timeout_secs`, else
    /// `[setup].timeout_secs`), else the lab's `[setup]`, else none.
    pub setup: Option<Setup>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVm {
    name: String,
    #[serde(default)]
    setup: Option<String>,
    #[serde(default)]
    setup_timeout_secs: Option<i64>,
}

impl RawVm {
    /// The VM's own setup script as written, for `Lab::load`'s file check.
    pub(super) fn script(&self) -> Option<&str> {
        self.setup.as_deref()
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }
}

/// Validates `[[vms]]` and each check's `vm` (filling in the one VM of a
/// lab that has a single one), pushing every problem.
pub(super) fn resolve(
    path: &Path,
    raw: Vec<RawVm>,
    lab_setup: Option<&Setup>,
    checks: &mut [super::Check],
    problems: &mut Vec<LabError>,
) -> Vec<Vm> {
    let mut seen = HashSet::new();
    let mut vms = Vec::with_capacity(raw.len());
    for (i, v) in raw.into_iter().enumerate() {
        let name = v.name.trim().to_owned();
        let field = |key: &str| {
            if name.is_empty() {
                format!("vms[{i}].{key}")
            } else {
                format!("vm `{name}`: {key}")
            }
        };
        if let Err(problem) = check_vm_name(&name) {
            problems.push(invalid(path, &field("name"), problem));
        } else if !seen.insert(name.clone()) {
            problems.push(invalid(
                path,
                &field("name"),
                "is used by an earlier VM: VM names must be unique",
            ));
        }
        let timeout = super::setup_timeout(
            path,
            &field("setup_timeout_secs"),
            v.setup_timeout_secs,
            lab_setup.map_or(super::DEFAULT_SETUP_TIMEOUT_SECS, |s| s.timeout_secs),
        )
        .map_err(|e| problems.push(e))
        .ok();
        let setup = match v.setup {
            Some(script) => super::relative_path(path, &field("setup"), &script)
                .map_err(|e| problems.push(e))
                .ok()
                .map(|script| Setup {
                    script: Some(script),
                    timeout_secs: timeout.unwrap_or(super::DEFAULT_SETUP_TIMEOUT_SECS),
                }),
            None => lab_setup.cloned().map(|s| Setup {
                timeout_secs: timeout.unwrap_or(s.timeout_secs),
                ..s
            }),
        };
        vms.push(Vm { name, setup });
    }
    let names: Vec<&str> = vms.iter().map(|v| v.name.as_str()).collect();
    for c in checks.iter_mut() {
        let field = format!("check `{}`: vm", c.name);
        match (&c.vm, names.as_slice()) {
            (Some(vm), []) => problems.push(invalid(
                path,
                &field,
                format!("names `{vm}`, and the lab has no [[vms]]: remove `vm`, or declare the lab's VMs"),
            )),
            (Some(vm), names) if !names.contains(&vm.as_str()) => problems.push(invalid(
                path,
                &field,
                format!("names `{vm}`, which is not a VM of the lab: use one of {}", listed(names)),
            )),
            (None, [only]) => c.vm = Some((*only).to_owned()),
            (None, names) if names.len() > 1 => problems.push(invalid(
                path,
                &field,
                format!("is missing: a lab of several VMs says where each check runs, one of {}", listed(names)),
            )),
            _ => {}
        }
        for key in c.exec.env.keys() {
            if key == LAB_VM_ENV || key == LAB_VMS_ENV || key.starts_with(LAB_PARAM_PREFIX) {
                problems.push(invalid(
                    path,
                    &format!("check `{}`: env.{key}", c.name),
                    "is set for each VM by its payload: remove it from `env`",
                ));
            }
        }
    }
    vms
}

/// The rule for a VM's name: a hostname label (RFC 1123): 1 to 63 of
/// `a-z 0-9 -`, not starting or ending with `-`. It becomes the VM's
/// hostname, so the VMs of a session find each other by it.
pub fn check_vm_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty: give the VM a name (its hostname)".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!(
            "`{name}` contains {bad:?}: a VM's name is its hostname: use `a-z`, `0-9` and `-`"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(format!(
            "`{name}` starts or ends with `-`: a hostname cannot"
        ));
    }
    if name.len() > MAX_VM_NAME_LEN {
        return Err(format!(
            "is {} characters long: a hostname label has at most {MAX_VM_NAME_LEN}",
            name.len()
        ));
    }
    Ok(())
}

fn listed(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(", ")
}

/// Why a lab cannot be rendered for the VM (and parameters) asked for; see
/// `Lab::for_vm`. Each says what to pass instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmError {
    #[error("lab `{lab}` has several VMs ({}): say which one this payload is for with `--vm NAME`", .vms.join(", "))]
    VmRequired { lab: String, vms: Vec<String> },
    #[error("lab `{lab}` has no VM named `{vm}`: its VMs are {}", .vms.join(", "))]
    UnknownVm {
        lab: String,
        vm: String,
        vms: Vec<String>,
    },
    #[error("lab `{lab}` is one VM (it has no [[vms]]): leave out `--vm {vm}`")]
    NoVms { lab: String, vm: String },
    #[error("parameter `{key}` {problem}")]
    BadParam { key: String, problem: String },
}

impl super::Lab {
    /// The names of the lab's VMs, in `lab.toml`'s order; empty for a lab
    /// of one VM without `[[vms]]`.
    pub fn vm_names(&self) -> Vec<&str> {
        self.vms.iter().map(|v| v.name.as_str()).collect()
    }

    /// The lab as VM `vm` gets it in its payload: that VM's setup, and in
    /// [`Lab::vm_env`](super::Lab::vm_env) its variables (`LAB_VM`,
    /// `LAB_VMS`, and `LAB_PARAM_<KEY>` for each of `params`). `vm` is
    /// required in a lab with `[[vms]]` and refused in one without (whose
    /// payload is as it always was, plus the parameters, if any). Parameter
    /// keys are letters, digits and `_`; values any text without NUL, at
    /// most [`MAX_PARAM_BYTES`].
    pub fn for_vm(
        &self,
        vm: Option<&str>,
        params: &BTreeMap<String, String>,
    ) -> Result<super::Lab, VmError> {
        let names = || self.vms.iter().map(|v| v.name.clone()).collect();
        let mut lab = self.clone();
        match (vm, self.vms.is_empty()) {
            (Some(vm), true) => {
                return Err(VmError::NoVms {
                    lab: self.name.clone(),
                    vm: vm.to_owned(),
                });
            }
            (None, false) => {
                return Err(VmError::VmRequired {
                    lab: self.name.clone(),
                    vms: names(),
                });
            }
            (Some(vm), false) => {
                let Some(found) = self.vms.iter().find(|v| v.name == vm) else {
                    return Err(VmError::UnknownVm {
                        lab: self.name.clone(),
                        vm: vm.to_owned(),
                        vms: names(),
                    });
                };
                lab.setup = found.setup.clone();
                lab.vm_env.insert(LAB_VM_ENV.into(), vm.to_owned());
                lab.vm_env
                    .insert(LAB_VMS_ENV.into(), self.vm_names().join(" "));
            }
            (None, true) => {}
        }
        for (key, value) in params {
            let bad = |problem: String| VmError::BadParam {
                key: key.escape_debug().to_string(),
                problem,
            };
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(bad(
                    "is not a valid key: use letters, digits and `_` (it becomes the variable LAB_PARAM_<KEY>)".into(),
                ));
            }
            if value.contains('\0') {
                return Err(bad(
                    "has a NUL byte in its value, which no environment variable can hold".into(),
                ));
            }
            if value.len() > MAX_PARAM_BYTES {
                return Err(bad(format!(
                    "is {} bytes: keep a value to {MAX_PARAM_BYTES} (every command on the VM gets it in its environment); put large data in the lab's files",
                    value.len()
                )));
            }
            lab.vm_env
                .insert(format!("{LAB_PARAM_PREFIX}{key}"), value.clone());
        }
        Ok(lab)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Lab;
    use super::*;

    const TWO: &str = r#"
name = "two"
[setup]
script = "common.sh"
timeout_secs = 100
[[vms]]
name = "server"
setup = "server.sh"
[[vms]]
name = "client"
setup_timeout_secs = 50
[[checks]]
name = "served"
vm = "server"
run = "true"
[[checks]]
name = "reached"
vm = "client"
run = "true"
"#;

    #[test]
    fn vms_their_setups_and_checks() {
        let lab = Lab::parse(TWO, "/l").unwrap();
        assert_eq!(lab.vm_names(), ["server", "client"]);
        // Its own script, the lab's timeout; the lab's script, its own timeout.
        assert_eq!(
            lab.vms[0].setup,
            Some(Setup {
                script: Some("server.sh".into()),
                timeout_secs: 100
            })
        );
        assert_eq!(
            lab.vms[1].setup,
            Some(Setup {
                script: Some("common.sh".into()),
                timeout_secs: 50
            })
        );
        assert_eq!(lab.checks[0].vm.as_deref(), Some("server"));
        assert_eq!(lab.checks[1].vm.as_deref(), Some("client"));
        assert!(lab.vm_env.is_empty());
        // One [[vms]]: a check without `vm` runs on it.
        let one = Lab::parse(
            "name = \"o\"\n[[vms]]\nname = \"box\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
            "/l",
        )
        .unwrap();
        assert_eq!(one.checks[0].vm.as_deref(), Some("box"));
        assert_eq!(one.vms[0].setup, None);
        // No [[vms]]: as before.
        let plain = Lab::parse(
            "name = \"p\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
            "/l",
        )
        .unwrap();
        assert!(plain.vms.is_empty() && plain.checks[0].vm.is_none());
    }

    #[test]
    fn lint_names_every_check_without_a_vm_or_with_an_unknown_one() {
        let text = r#"
name = "bad"
[[vms]]
name = "cp"
[[vms]]
name = "cp"
[[vms]]
name = "Worker_1"
[[vms]]
name = "-w"
setup = "../x.sh"
setup_timeout_secs = 0
[[checks]]
name = "nowhere"
run = "true"
[[checks]]
name = "elsewhere"
vm = "db"
run = "true"
[[checks]]
name = "sneaky"
vm = "cp"
run = "true"
env = { LAB_VM = "x", LAB_PARAM_A = "y" }
"#;
        let all: Vec<String> = Lab::parse_all(text, "/l")
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        let wants = [
            "vm `cp`: name is used by an earlier VM",
            "vm `Worker_1`: name `Worker_1` contains 'W'",
            "vm `-w`: name `-w` starts or ends with `-`",
            "vm `-w`: setup_timeout_secs is 0",
            "vm `-w`: setup `../x.sh` leaves the lab folder",
            "check `nowhere`: vm is missing: a lab of several VMs says where each check runs, one of `cp`, `cp`, `Worker_1`, `-w`",
            "check `elsewhere`: vm names `db`, which is not a VM of the lab",
            "check `sneaky`: env.LAB_PARAM_A is set for each VM by its payload",
            "check `sneaky`: env.LAB_VM is set for each VM by its payload",
        ];
        assert_eq!(all.len(), wants.len(), "{all:#?}");
        for (got, want) in all.iter().zip(wants) {
            assert!(got.contains(want), "{got}\n lacks {want}");
        }
        let err = Lab::parse(
            "name = \"x\"\n[[checks]]\nname = \"a\"\nvm = \"cp\"\nrun = \"true\"\n",
            "/l",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("check `a`: vm names `cp`, and the lab has no [[vms]]"),
            "{err}"
        );
        let err = Lab::parse("name = \"x\"\n[[vms]]\nname = \"a\"\nsetpu = 1\n", "/l")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `setpu`"), "{err}");
        for (name, ok) in [
            ("a", true),
            ("a-1", true),
            (&*"a".repeat(63), true),
            (&*"a".repeat(64), false),
            ("", false),
            ("a.b", false),
        ] {
            assert_eq!(check_vm_name(name).is_ok(), ok, "{name}");
        }
    }

    #[test]
    fn load_names_a_vm_setup_that_is_not_a_file() {
        let dir = std::env::temp_dir().join(format!("lab-proto-vms-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("lab.toml"),
            "name = \"v\"\n[[vms]]\nname = \"a\"\nsetup = \"a.sh\"\n[[vms]]\nname = \"b\"\nsetup = \"b.sh\"\n",
        )
        .unwrap();
        std::fs::write(dir.join("a.sh"), "true\n").unwrap();
        let all: Vec<String> = Lab::load_all(&dir)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(
            all[0].contains("vm `b`: setup names `b.sh`, which is not a file"),
            "{all:?}"
        );
        std::fs::write(dir.join("b.sh"), "true\n").unwrap();
        assert_eq!(Lab::load(&dir).unwrap().vm_names(), ["a", "b"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn for_vm_picks_the_setup_and_the_variables() {
        let lab = Lab::parse(TWO, "/l").unwrap();
        let params: BTreeMap<String, String> = [
            ("TOKEN".to_owned(), "a'b\"c\n$HOME `id`".to_owned()),
            ("n_2".to_owned(), String::new()),
        ]
        .into();
        let server = lab.for_vm(Some("server"), &params).unwrap();
        assert_eq!(server.setup, lab.vms[0].setup);
        let env: Vec<(&str, &str)> = server
            .vm_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("LAB_PARAM_TOKEN", "a'b\"c\n$HOME `id`"),
                ("LAB_PARAM_n_2", ""),
                ("LAB_VM", "server"),
                ("LAB_VMS", "server client"),
            ]
        );
        assert_eq!(
            lab.for_vm(Some("client"), &params).unwrap().setup,
            lab.vms[1].setup
        );
        let none = BTreeMap::new();
        let e = lab.for_vm(None, &none).unwrap_err();
        assert_eq!(
            e.to_string(),
            "lab `two` has several VMs (server, client): say which one this payload is for with `--vm NAME`"
        );
        let e = lab.for_vm(Some("db"), &none).unwrap_err().to_string();
        assert!(
            e.contains("no VM named `db`: its VMs are server, client"),
            "{e}"
        );
        let plain = Lab::parse("name = \"p\"", "/l").unwrap();
        let e = plain.for_vm(Some("x"), &none).unwrap_err().to_string();
        assert!(
            e.contains("is one VM (it has no [[vms]]): leave out `--vm x`"),
            "{e}"
        );
        // A lab of one VM takes parameters, and is otherwise untouched.
        assert_eq!(plain.for_vm(None, &none).unwrap(), plain);
        let p = plain.for_vm(None, &params).unwrap();
        assert_eq!(p.vm_env.len(), 2);
        for (key, value, want) in [
            ("A-B", "x", "is not a valid key"),
            ("", "x", "is not a valid key"),
            ("A", "x\0y", "NUL"),
            ("A", &*"x".repeat(MAX_PARAM_BYTES + 1), "is 65537 bytes"),
        ] {
            let params = [(key.to_owned(), value.to_owned())].into();
            let e = plain.for_vm(None, &params).unwrap_err().to_string();
            assert!(e.contains(want), "{key:?}: {e}");
        }
    }
}
