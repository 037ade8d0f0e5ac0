//! `--param` for `labctl try` and `labctl test`: what the backend gives a
//! VM at render time (`labctl secret --param KEY=VALUE`, the VM's
//! `LAB_PARAM_KEY`), given to a tried lab. `KEY=VALUE` is for every VM;
//! `VM.KEY=VALUE` for one VM of a session (a key has no `.`, so the first
//! `.` before the `=` names the VM), over a `KEY=VALUE` of the same key.
//! The keys and values themselves are the model's to check
//! ([`Lab::for_vm`]), as for `labctl secret`.

use crate::Error;
use lab_agent_proto::lab::Lab;
use lab_agent_proto::text::escape;
use std::collections::BTreeMap;

/// The parameters of a tried lab, by VM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    /// `KEY=VALUE`: every VM's.
    all: BTreeMap<String, String>,
    /// `VM.KEY=VALUE`: one VM's, by its name.
    per_vm: BTreeMap<String, BTreeMap<String, String>>,
}

impl Params {
    /// `--param` values as given: `KEY=VALUE` or `VM.KEY=VALUE`, each key
    /// (of a VM) once.
    pub fn parse(args: &[String]) -> Result<Params, Error> {
        let mut params = Params::default();
        for arg in args {
            let Some((name, value)) = arg.split_once('=') else {
                return Err(Error::usage(format!(
                    "`--param {}` has no `=`: write `--param KEY=VALUE` (every VM) or \
                     `--param VM.KEY=VALUE` (one VM of a session)",
                    escape(arg)
                )));
            };
            let (map, key) = match name.split_once('.') {
                Some((vm, key)) => (params.per_vm.entry(vm.to_owned()).or_default(), key),
                None => (&mut params.all, name),
            };
            if map.insert(key.to_owned(), value.to_owned()).is_some() {
                return Err(Error::usage(format!(
                    "parameter `{}` is given twice: give each key once",
                    escape(name)
                )));
            }
        }
        Ok(params)
    }

    /// What VM `vm` (`None`: a lab of one VM) gets: its own over every VM's.
    pub fn for_vm(&self, vm: Option<&str>) -> BTreeMap<String, String> {
        let mut out = self.all.clone();
        if let Some(own) = vm.and_then(|vm| self.per_vm.get(vm)) {
            out.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        out
    }

    /// Every `VM.` names a VM of `lab` (and `lab` has VMs at all).
    pub fn check(&self, lab: &Lab) -> Result<(), Error> {
        let names = lab.vm_names();
        for vm in self.per_vm.keys() {
            if names.is_empty() {
                return Err(Error::usage(format!(
                    "`--param {}.…`: lab `{}` is one VM (it has no [[vms]]): write `--param KEY=VALUE`",
                    escape(vm),
                    lab.name
                )));
            }
            if !names.contains(&vm.as_str()) {
                return Err(Error::usage(format!(
                    "`--param {}.…`: lab `{}` has no VM named `{}`: its VMs are {}",
                    escape(vm),
                    lab.name,
                    escape(vm),
                    names.join(", ")
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_vm_then_its_own() {
        let p = Params::parse(&args(&["TOKEN=a=b", "cp.ROLE=control", "ROLE=worker"])).unwrap();
        let cp = p.for_vm(Some("cp"));
        assert_eq!(cp["TOKEN"], "a=b", "a value may hold `=`");
        assert_eq!(cp["ROLE"], "control", "its own wins");
        assert_eq!(p.for_vm(Some("w1"))["ROLE"], "worker");
        assert_eq!(p.for_vm(None).len(), 2);
        for (bad, says) in [
            (&["X"][..], "has no `=`"),
            (&["X=1", "X=2"][..], "given twice"),
            (&["cp.X=1", "cp.X=2"][..], "`cp.X` is given twice"),
        ] {
            let e = Params::parse(&args(bad)).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_vm_must_be_the_labs() {
        let one = Lab::parse("name = \"one\"\n", "/l").unwrap();
        let two = Lab::parse(
            "name = \"two\"\n[[vms]]\nname = \"a\"\n[[vms]]\nname = \"b\"\n",
            "/l",
        )
        .unwrap();
        let p = Params::parse(&args(&["a.X=1"])).unwrap();
        assert!(p.check(&two).is_ok());
        let e = p.check(&one).unwrap_err().to_string();
        assert!(e.contains("is one VM"), "{e}");
        let e = Params::parse(&args(&["c.X=1"]))
            .unwrap()
            .check(&two)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no VM named `c`: its VMs are a, b"), "{e}");
    }
}
