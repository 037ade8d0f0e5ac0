//! A lab of several VMs (`[[vms]]`) in the sandbox: one sandbox per VM,
//! each a [`LocalAgent`] of its own (its mount, PID, UTS, IPC and network
//! namespaces, its hostname the VM's name, its overlay, its try dir), the
//! VM's view of the lab ([`Lab::for_vm`]: its setup, and `LAB_VM`,
//! `LAB_VMS` in the agent's `--env-file`), all joined by one private
//! `Switch` on which each VM's name resolves to its address (an
//! `/etc/hosts` bound into each sandbox).
//!
//! ```text
//! labctl try                     holds the switch's network namespace
//!  ├─ labctl __sandbox (server)  a keeper per VM, as for one VM
//!  │   └─ init ─ lab-agent serve
//!  └─ labctl __sandbox (client)
//!      └─ init ─ lab-agent serve
//! ```
//!
//! Start: every keeper is started held (nothing runs inside yet), its
//! namespace plugged into the switch, then all are released at once, so
//! the setups run at the same time and find the network up. Each keeper
//! dies with `labctl` as one VM's does ([`crate::sandbox`]); the switch's
//! namespace is only ever held by `labctl`'s descriptor: after `kill -9`
//! of `labctl` nothing of the session is left.

use crate::Error;
use crate::changes::Changes;
use crate::local::{LocalAgent, SessionVm};
use crate::sandbox::Image;
use crate::switch::{self, Switch};
use crate::trial::Params;
use lab_agent_client::{Client, Session};
use lab_agent_proto::lab::Lab;
use std::fs;
use std::path::Path;

/// The VMs of a session, each in its sandbox, on one switch. Dropping it
/// kills every sandbox; [`LocalSession::stop`] stops them politely.
#[derive(Debug)]
pub struct LocalSession {
    /// In `[[vms]]`' order. Declared before the switch: dropped first.
    vms: Vec<(String, LocalAgent)>,
    _switch: Switch,
}

impl LocalSession {
    /// Starts every VM of `lab` (a lab with `[[vms]]`) in a sandbox of its
    /// own with `agent` (of `image`'s root file system, when given), each
    /// with its `params`; returns once every agent listens (the setups run
    /// on, all at once).
    pub async fn start(
        lab: &Lab,
        agent: &Path,
        params: &Params,
        image: Option<&Image>,
    ) -> Result<LocalSession, Error> {
        if lab.vms.is_empty() {
            return Err(Error::usage(format!(
                "lab `{}` has no [[vms]]: it is one VM, started on its own",
                lab.name
            )));
        }
        let switch = Switch::new().map_err(|e| {
            Error::usage("failed to make the session's network (a network namespace with a bridge)")
                .with_source(e)
        })?;
        let hosts = hosts_file(lab);
        let mut vms = Vec::with_capacity(lab.vms.len());
        for (i, vm) in lab.vms.iter().enumerate() {
            let own = lab
                .for_vm(Some(&vm.name), &params.for_vm(Some(&vm.name)))
                .map_err(|e| Error::usage(e.to_string()))?;
            let spec = SessionVm {
                name: vm.name.clone(),
                hosts: hosts.clone(),
            };
            let started = LocalAgent::launch(&own, agent, true, image, Some(&spec))?;
            let keeper = started.keeper().expect("a session's VM is sandboxed");
            let plugged = fs::File::open(format!("/proc/{keeper}/ns/net"))
                .and_then(|netns| switch.plug(i, &netns, switch::vm_addr(i)));
            // Pushed first: on an error below, dropping it ends its sandbox.
            vms.push((vm.name.clone(), started));
            plugged.map_err(|e| {
                Error::usage(format!(
                    "failed to plug VM `{}`'s sandbox into the session's network",
                    vm.name
                ))
                .with_source(e)
            })?;
        }
        for (_, vm) in &vms {
            vm.release();
        }
        for (name, vm) in &mut vms {
            vm.listening().await.map_err(|e| e.on_vm(name))?;
        }
        Ok(LocalSession {
            vms,
            _switch: switch,
        })
    }

    /// Each VM by its name, in the lab's order.
    pub fn vms(&self) -> impl Iterator<Item = (&str, &LocalAgent)> {
        self.vms.iter().map(|(n, a)| (n.as_str(), a))
    }

    /// The VM named `name`.
    pub fn vm(&self, name: &str) -> Option<&LocalAgent> {
        self.vms.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The session's clients, for waiting and grading it as one.
    pub fn session(&self) -> Result<Session, lab_agent_client::Error> {
        let mut clients: Vec<(String, Client)> = Vec::with_capacity(self.vms.len());
        for (name, agent) in &self.vms {
            clients.push((name.clone(), agent.client()?));
        }
        Ok(Session::new(clients).expect("a lab's VM names are unique"))
    }

    /// What the lab changed in each VM's sandbox, in the lab's order.
    pub fn changes(&self) -> Vec<(String, Result<Changes, Error>)> {
        self.vms
            .iter()
            .filter_map(|(n, a)| a.changes().map(|c| (n.clone(), c)))
            .collect()
    }

    /// Stops every VM (each as [`LocalAgent::stop`] does), then the
    /// switch goes.
    pub async fn stop(mut self) {
        for (_, agent) in &mut self.vms {
            agent.stop().await;
        }
    }
}

/// The session's `/etc/hosts`: loopback, then each VM's name at its
/// address.
fn hosts_file(lab: &Lab) -> String {
    let mut text =
        String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    for (i, name) in lab.vm_names().into_iter().enumerate() {
        text.push_str(&switch::vm_addr(i).to_string());
        text.push('\t');
        text.push_str(name);
        text.push('\n');
    }
    text
}
