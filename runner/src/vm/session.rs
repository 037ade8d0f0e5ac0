//! A lab of several VMs (`[[vms]]`) under qemu ([`VmSession`]): one guest
//! per VM, each booted as [`VmTarget`] boots one (the same code), with that
//! VM's payload (its own token, its setup, `LAB_VM`/`LAB_VMS` in its env
//! file: [`Lab::for_vm`], what `labctl secret --vm` renders), and all on
//! one private network where each VM's name resolves to its address
//! ([`crate::qemu::lan`]), the addresses the sandbox's session gives.
//!
//! ```text
//! /tmp/labctl-try-vms-LAB-XXXXXX/ 0700
//!   server/   a VM's run dir, as for one VM (token, user-data, seed, …)
//!   client/
//!   stop.sh   with `--keep`: stops every VM, removes this dir
//! ```
//!
//! Each guest keeps its user NIC (`restrict=on`, its agent forwarded to a
//! loopback port: how the host reaches each agent). Everything dies with
//! the process unless kept; an interrupted or failed start stops every
//! guest it started.

use super::VmConfig;
use super::stop::{LeftRunning, Stop};
use super::target::{Member, Silence, VmTarget, WATCH_POLL};
use crate::Error;
use crate::qemu::lan::{self, Lan, LanNic};
use crate::qemu::machine::make_run_dir;
use crate::switch;
use crate::trial::Params;
use lab_agent_client::{Client, Progress, Session};
use lab_agent_proto::lab::Lab;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The VMs of a session, each a qemu guest, on one private network.
/// Dropping it kills every guest and removes the run dir;
/// [`VmSession::stop`] stops them as asked.
#[derive(Debug)]
pub struct VmSession {
    /// In `[[vms]]`' order.
    vms: Vec<(String, VmTarget)>,
    /// The session's run dir; emptied once stopped or left running.
    dir: PathBuf,
}

impl VmSession {
    /// Boots a guest for every VM of `lab` (a lab with `[[vms]]`) with
    /// `agent` (the static build), each as `vm` says (`--memory` is each
    /// guest's); `keep`: the guests may outlive this process
    /// ([`VmSession::leave_running`]). Returns once every guest is booting
    /// (their setups then run at the same time), or, unproven, once
    /// `cancelled()`. A start that fails or is cancelled stops every guest
    /// it started.
    pub fn start(
        lab: &Lab,
        agent: &Path,
        vm: &VmConfig,
        params: &Params,
        keep: bool,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<VmSession, Error> {
        if lab.vms.is_empty() {
            return Err(Error::usage(format!(
                "lab `{}` has no [[vms]]: it is one VM, started on its own",
                lab.name
            )));
        }
        let lan = Lan::new().map_err(|e| {
            Error::usage("failed to pick the session's network (a multicast group)").with_source(e)
        })?;
        let dir = make_run_dir("labctl-try-vms", &lab.name)?;
        // From here on, dropping it stops what was started and removes
        // the dir.
        let mut session = VmSession {
            vms: Vec::with_capacity(lab.vms.len()),
            dir,
        };
        let hosts = hosts(lab);
        for (i, v) in lab.vms.iter().enumerate() {
            if cancelled() {
                break;
            }
            let own = lab
                .for_vm(Some(&v.name), &params.for_vm(Some(&v.name)))
                .map_err(|e| Error::usage(e.to_string()))?;
            let member = member(&session.dir, i, &v.name, lan, &hosts)?;
            let target = VmTarget::boot(&own, agent, keep, vm, cancelled, Some(member))
                .map_err(|e| e.on_vm(&v.name))?;
            session.vms.push((v.name.clone(), target));
        }
        Ok(session)
    }

    /// Each VM by its name, in the lab's order.
    pub fn vms(&self) -> impl Iterator<Item = (&str, &VmTarget)> {
        self.vms.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// The VM named `name`.
    pub fn vm(&self, name: &str) -> Option<&VmTarget> {
        self.vms.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The session's run dir (each VM's is a folder in it, by its name).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The session's clients, for waiting and grading it as one.
    pub fn session(&self) -> Result<Session, lab_agent_client::Error> {
        let mut clients: Vec<(String, Client)> = Vec::with_capacity(self.vms.len());
        for (name, target) in &self.vms {
            clients.push((name.clone(), target.client()?));
        }
        Ok(Session::new(clients).expect("a lab's VM names are unique"))
    }

    /// [`VmTarget::on_progress`] of the VM `vm` (for
    /// `Session::wait_ready_with`): the first answer of each VM is timed,
    /// and ends its silence watch.
    pub fn on_progress(&self, vm: &str, progress: &Progress) -> Option<String> {
        self.vm(vm).and_then(|t| t.on_progress(progress))
    }

    /// Resolves when any guest's qemu exits: its VM's name, and an error
    /// naming it.
    pub async fn qemu_exited(&self) -> (String, Error) {
        loop {
            for (name, target) in &self.vms {
                if let Some(e) = target.exit_error() {
                    return (name.clone(), e.on_vm(name));
                }
            }
            tokio::time::sleep(WATCH_POLL).await;
        }
    }

    /// Resolves when a guest whose agent never answered (as its progress
    /// reports tell: [`VmSession::on_progress`]) has printed nothing on its
    /// console for `limit`: its VM's name, and an error naming it.
    pub async fn silent_console(&self, limit: Duration) -> (String, Error) {
        let mut watches: Vec<Silence> = self.vms.iter().map(|(_, t)| t.silence()).collect();
        loop {
            for ((name, target), silence) in self.vms.iter().zip(&mut watches) {
                target.reset_a_stalled_kernel(silence, limit);
                if let Some(e) = target
                    .install_error()
                    .or_else(|| target.silence_error(silence, limit))
                {
                    return (name.clone(), e.on_vm(name));
                }
            }
            tokio::time::sleep(WATCH_POLL).await;
        }
    }

    /// Stops every guest at once (each as [`VmTarget::stop`] does), then
    /// removes the session's dir, unless a VM's console log is kept in it.
    pub fn stop(self, how: Stop) {
        self.stop_each(|_| how);
    }

    /// [`VmSession::stop`], each VM as `how(name)` says (e.g. the console
    /// shown of the VM that failed alone).
    pub fn stop_each(mut self, how: impl Fn(&str) -> Stop + Sync) {
        let vms = std::mem::take(&mut self.vms);
        let mut all_discarded = true;
        std::thread::scope(|s| {
            for (name, target) in vms {
                let how = how(&name);
                all_discarded &= matches!(how, Stop::Discard | Stop::Interrupted);
                std::thread::Builder::new()
                    .name(format!("stop-{name}"))
                    .spawn_scoped(s, move || target.stop(how))
                    .expect("spawn a thread to stop a VM");
            }
        });
        let dir = std::mem::take(&mut self.dir);
        if all_discarded {
            if let Err(e) = fs::remove_dir_all(&dir) {
                eprintln!("warning: failed to remove `{}`: {e}", dir.display());
            }
        }
    }

    /// `--keep`: leaves every guest running (each with its `stop.sh`) and
    /// writes the session's `stop.sh`, which runs them all and removes the
    /// session's dir; returns it and each VM's, by name.
    pub fn leave_running(mut self) -> (PathBuf, Vec<(String, LeftRunning)>) {
        let left: Vec<(String, LeftRunning)> = std::mem::take(&mut self.vms)
            .into_iter()
            .map(|(name, target)| (name, target.leave_running()))
            .collect();
        let dir = std::mem::take(&mut self.dir);
        let stop = dir.join("stop.sh");
        let script = stop_script(&dir, left.iter().map(|(_, l)| l.stop.as_path()));
        if let Err(e) = fs::write(&stop, script) {
            eprintln!("warning: failed to write `{}`: {e}", stop.display());
        }
        (stop, left)
    }
}

impl Drop for VmSession {
    /// A panic, an error or a cancel on the way: every guest dies, the
    /// dir goes (after the VMs' own, which their drops remove).
    fn drop(&mut self) {
        self.vms.clear();
        if !self.dir.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The session's names: each VM's at its address (the sandbox session's).
fn hosts(lab: &Lab) -> Vec<(String, Ipv4Addr)> {
    lab.vm_names()
        .into_iter()
        .enumerate()
        .map(|(i, name)| (name.to_owned(), switch::vm_addr(i)))
        .collect()
}

/// The `i`-th VM of the session: its run dir (made here), its NIC on `lan`
/// and the seed's files that configure it.
fn member(
    session_dir: &Path,
    i: usize,
    name: &str,
    lan: Lan,
    hosts: &[(String, Ipv4Addr)],
) -> Result<Member, Error> {
    let dir = session_dir.join(crate::qemu::sanitize(name));
    fs::create_dir(&dir).map_err(|e| {
        Error::usage(format!("failed to create `{}`", dir.display())).with_source(e)
    })?;
    let nic = LanNic {
        lan,
        mac: LanNic::mac_for(i),
        addr: switch::vm_addr(i),
        prefix_len: switch::PREFIX_LEN,
    };
    let seed_extra = vec![
        (
            "network-config".to_owned(),
            nic.network_config().into_bytes(),
        ),
        (
            "vendor-data".to_owned(),
            lan::hosts_script(hosts).into_bytes(),
        ),
    ];
    Ok(Member {
        name: name.to_owned(),
        dir,
        lan: nic,
        seed_extra,
    })
}

/// The session's `stop.sh` for `--keep`: each VM's, then the dir goes.
fn stop_script<'a>(dir: &Path, vms: impl Iterator<Item = &'a Path>) -> String {
    use lab_agent_cloudinit::shell::word;
    let mut s = String::from(
        "#!/bin/sh\n\
         # Written by `labctl try --keep`: stops the session's VMs and removes their files.\n",
    );
    for stop in vms {
        s.push_str(&format!("sh {}\n", word(&stop.display().to_string())));
    }
    s.push_str(&format!("rm -rf -- {}\n", word(&dir.display().to_string())));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_vm_lab() -> Lab {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/two-vm-lab");
        Lab::load(&dir).unwrap()
    }

    #[test]
    fn each_vm_gets_its_address_in_the_labs_order() {
        assert_eq!(
            hosts(&two_vm_lab()),
            [
                ("server".to_owned(), Ipv4Addr::new(10, 89, 0, 2)),
                ("client".to_owned(), Ipv4Addr::new(10, 89, 0, 3)),
            ]
        );
    }

    #[test]
    fn a_member_has_its_dir_nic_and_seed_files() {
        let root = crate::tempdir::create("runner-vm-session", 0o700).unwrap();
        let lan = Lan {
            group: Ipv4Addr::new(239, 89, 4, 5),
            port: 31000,
        };
        let hosts = hosts(&two_vm_lab());
        let m = member(root.path(), 1, "client", lan, &hosts).unwrap();
        assert_eq!(m.dir, root.path().join("client"));
        assert!(m.dir.is_dir());
        assert_eq!(m.lan.addr, Ipv4Addr::new(10, 89, 0, 3));
        assert_eq!(m.lan.mac, "52:54:00:89:00:01");
        let names: Vec<&str> = m.seed_extra.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["network-config", "vendor-data"]);
        let config = String::from_utf8(m.seed_extra[0].1.clone()).unwrap();
        assert!(config.contains("addresses: [\"10.89.0.3/24\"]"), "{config}");
        let script = String::from_utf8(m.seed_extra[1].1.clone()).unwrap();
        assert!(
            script.contains("10.89.0.2\tserver\n10.89.0.3\tclient\n"),
            "{script}"
        );
        // The same VM twice is an error, not a shared dir.
        assert!(member(root.path(), 1, "client", lan, &hosts).is_err());
    }

    #[test]
    fn the_sessions_stop_script_runs_each_vms() {
        let s = stop_script(
            Path::new("/tmp/labctl-try-vms-x"),
            [
                Path::new("/tmp/labctl-try-vms-x/server/stop.sh"),
                Path::new("/tmp/labctl-try-vms-x/client/stop.sh"),
            ]
            .into_iter(),
        );
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        assert!(
            s.ends_with(
                "sh '/tmp/labctl-try-vms-x/server/stop.sh'\n\
                 sh '/tmp/labctl-try-vms-x/client/stop.sh'\n\
                 rm -rf -- '/tmp/labctl-try-vms-x'\n"
            ),
            "{s}"
        );
    }

    #[test]
    fn a_lab_of_one_vm_is_no_session() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello-lab");
        let lab = Lab::load(&dir).unwrap();
        let vm = VmConfig {
            guest: crate::qemu::Guest::Disk {
                image: "/nonexistent".into(),
            },
            arch: None,
            memory_mib: 512,
            cpus: 1,
            disk_gib: None,
            accel: crate::qemu::AccelMode::Auto,
            accel_set_by: None,
            boot_silence: Duration::from_secs(1),
            agent_disk: None,
        };
        let err = VmSession::start(
            &lab,
            Path::new("/nonexistent"),
            &vm,
            &Params::default(),
            false,
            &|| false,
        )
        .unwrap_err();
        assert!(err.to_string().contains("has no [[vms]]"), "{err}");
    }
}
