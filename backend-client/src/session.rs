//! A session: the VMs of one lab of several (`[[vms]]` in `lab.toml`),
//! each by its name, waited for and graded as one.
//!
//! - [`Session::wait_ready`] waits for every VM at once and fails fast: the
//!   first VM whose wait ends in an error (its setup failed, its token is
//!   refused, the deadline passed) ends the whole wait with that VM's name
//!   and error; the other waits are dropped.
//! - [`Session::grade`] keeps the grading rule for the session: it asks
//!   every VM whether it is ready first, and when one is not, runs nothing
//!   anywhere ([`SessionError`] naming it, its error
//!   [`Error::is_not_ready`]). Then each check runs on its VM (checks of
//!   one VM in the lab's order, the VMs at the same time, each pinned to
//!   the instance that answered ready), into one report whose checks carry
//!   their `vm`, its score over the whole session.

use crate::client::Client;
use crate::error::Error;
use crate::grade::{CheckResult, GradeReport};
use crate::wait::{Progress, WaitOutcome};
use lab_agent_proto::ReadyResponse;
use lab_agent_proto::lab::Lab;
use std::collections::BTreeMap;
use std::time::Instant;

/// The VMs of one session, each by its name in the lab (`[[vms]] name`).
#[derive(Debug, Clone)]
pub struct Session {
    vms: Vec<(String, Client)>,
}

/// Why a session could not be waited for or graded.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// One VM's call failed; the session stops there. `error` is that
    /// VM's own, with its predicates (`is_setup_failed`, `is_not_ready`,
    /// `is_unauthorized`, …).
    #[error("VM `{vm}`: {error}")]
    Vm {
        vm: String,
        #[source]
        error: Box<Error>,
    },
    /// The session's VMs are not the lab's: the caller's mistake, nothing
    /// was sent.
    #[error("{0}")]
    Mismatch(String),
}

impl SessionError {
    /// The VM that failed, if one did.
    pub fn vm(&self) -> Option<&str> {
        match self {
            SessionError::Vm { vm, .. } => Some(vm),
            SessionError::Mismatch(_) => None,
        }
    }

    /// That VM's error.
    pub fn error(&self) -> Option<&Error> {
        match self {
            SessionError::Vm { error, .. } => Some(&**error),
            SessionError::Mismatch(_) => None,
        }
    }
}

impl Session {
    /// A session of `vms`, each a VM's name and its client. Names must be
    /// unique (they are the lab's `[[vms]]` names).
    pub fn new(vms: impl IntoIterator<Item = (String, Client)>) -> Result<Session, SessionError> {
        let vms: Vec<(String, Client)> = vms.into_iter().collect();
        for (i, (name, _)) in vms.iter().enumerate() {
            if vms[..i].iter().any(|(n, _)| n == name) {
                return Err(SessionError::Mismatch(format!(
                    "VM `{name}` is given twice: give each VM of the session once"
                )));
            }
        }
        if vms.is_empty() {
            return Err(SessionError::Mismatch(
                "a session needs at least one VM".into(),
            ));
        }
        Ok(Session { vms })
    }

    /// The VMs, in the order given.
    pub fn vms(&self) -> impl Iterator<Item = (&str, &Client)> {
        self.vms.iter().map(|(n, c)| (n.as_str(), c))
    }

    /// The client of VM `name`.
    pub fn client(&self, name: &str) -> Option<&Client> {
        self.vms.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// Waits until every VM is ready; returns each one's answer in the
    /// session's order. The first VM whose wait fails ends it at once
    /// ([`SessionError::Vm`]: its name and error, e.g. its setup failed
    /// with its log tail); the others are not waited for further.
    pub async fn wait_ready(
        &self,
        deadline: Instant,
    ) -> Result<Vec<(String, ReadyResponse)>, SessionError> {
        self.wait_ready_with(deadline, |_, _| {}).await
    }

    /// [`Session::wait_ready`] as each VM's [`WaitOutcome`] (its URL, its
    /// answer or its error) by name: every VM when all are ready, else the
    /// one that failed, alone. `Err` only for an error that is no VM's.
    pub async fn wait_outcomes(
        &self,
        deadline: Instant,
    ) -> Result<Vec<(String, WaitOutcome)>, SessionError> {
        let outcome = |vm: String, result| {
            let url = self
                .client(&vm)
                .map_or(String::new(), |c| c.url().to_owned());
            (vm, WaitOutcome { url, result })
        };
        match self.wait_ready(deadline).await {
            Ok(ready) => Ok(ready
                .into_iter()
                .map(|(vm, r)| outcome(vm, Ok(r)))
                .collect()),
            Err(SessionError::Vm { vm, error }) => Ok(vec![outcome(vm, Err(*error))]),
            Err(e) => Err(e),
        }
    }

    /// [`Session::wait_ready`], calling `on_progress` with a VM's name and
    /// its progress after every attempt.
    pub async fn wait_ready_with(
        &self,
        deadline: Instant,
        mut on_progress: impl FnMut(&str, &Progress),
    ) -> Result<Vec<(String, ReadyResponse)>, SessionError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Dropped on return: the waits still running end with it.
        let mut tasks = tokio::task::JoinSet::new();
        for (i, (_, client)) in self.vms.iter().enumerate() {
            let (client, tx) = (client.clone(), tx.clone());
            tasks.spawn(async move {
                let progress_tx = tx.clone();
                let result = client
                    .wait_ready_with(deadline, move |p| {
                        let _ = progress_tx.send((i, Ok(p.clone())));
                    })
                    .await;
                let _ = tx.send((i, Err(Box::new(result))));
            });
        }
        drop(tx);
        let mut ready: Vec<Option<ReadyResponse>> = self.vms.iter().map(|_| None).collect();
        while let Some((i, event)) = rx.recv().await {
            let name = &self.vms[i].0;
            match event {
                Ok(progress) => on_progress(name, &progress),
                Err(done) => match *done {
                    Ok(r) => ready[i] = Some(r),
                    Err(error) => {
                        return Err(SessionError::Vm {
                            vm: name.clone(),
                            error: Box::new(error),
                        });
                    }
                },
            }
        }
        Ok(self
            .vms
            .iter()
            .zip(ready)
            .map(|((n, _), r)| (n.clone(), r.expect("every wait reports its end")))
            .collect())
    }

    /// Grades `lab` on the session: every VM must be ready (asked of all
    /// before anything runs; one that is not is [`SessionError::Vm`] with
    /// [`Error::is_not_ready`], nothing run anywhere; a VM whose setup
    /// failed is named before one still setting up), then each check runs
    /// on its `vm` with `LAB_DIR` as given or as its agent reports it. One
    /// report: the lab's checks in its order, each with its `vm`, the
    /// score over all of them.
    ///
    /// The session's VMs must be the lab's `[[vms]]` (a lab of one VM: a
    /// session of one, whatever its name).
    pub async fn grade(
        &self,
        lab: &Lab,
        guest_lab_dir: Option<&str>,
    ) -> Result<GradeReport, SessionError> {
        self.check_lab(lab)?;
        // The grading rule first, for every VM: one that is not ready costs
        // one call each and nothing runs.
        let asked = futures_join(self.vms.iter().map(|(_, c)| c.require_ready())).await;
        let mut instances = Vec::with_capacity(asked.len());
        let mut refused: Option<(String, Error)> = None;
        for ((name, _), r) in self.vms.iter().zip(asked) {
            match r {
                Ok(instance) => instances.push(instance),
                // The one to name: a VM whose setup failed (it will never
                // be ready) before one that is only not ready yet.
                Err(e) => {
                    let keep = refused
                        .as_ref()
                        .is_some_and(|(_, r)| r.is_setup_failed() || !e.is_setup_failed());
                    if !keep {
                        refused = Some((name.clone(), e));
                    }
                }
            }
        }
        if let Some((vm, error)) = refused {
            return Err(SessionError::Vm {
                vm,
                error: Box::new(error),
            });
        }
        let grades = self
            .vms
            .iter()
            .zip(instances)
            .map(|((name, client), instance)| {
                let mut own = lab.clone();
                own.checks
                    .retain(|c| c.vm.as_deref().is_none_or(|vm| vm == name));
                async move {
                    let dir = match guest_lab_dir {
                        Some(dir) => dir.to_owned(),
                        None => client.reported_lab_dir().await?,
                    };
                    client.grade_instance(instance, &own, &dir, |_| {}).await
                }
            });
        let reports = futures_join(grades).await;
        let mut by_check: BTreeMap<String, CheckResult> = BTreeMap::new();
        let mut instances = BTreeMap::new();
        for ((name, _), report) in self.vms.iter().zip(reports) {
            let report = report.map_err(|error| SessionError::Vm {
                vm: name.clone(),
                error: Box::new(error),
            })?;
            if let Some(instance) = report.instance {
                instances.insert(name.clone(), instance);
            }
            for mut c in report.checks {
                // Only a lab of several VMs names them: a one-VM report
                // stays as it always was.
                c.vm = (!lab.vms.is_empty()).then(|| name.clone());
                by_check.insert(c.name.clone(), c);
            }
        }
        let checks = lab
            .checks
            .iter()
            .filter_map(|c| by_check.remove(&c.name))
            .collect();
        // A lab of one VM reports as `Client::grade` does: its `instance`.
        if lab.vms.is_empty() {
            let instance = instances.into_values().next();
            return Ok(GradeReport::new(lab.name.clone(), instance, checks));
        }
        let mut report = GradeReport::new(lab.name.clone(), None, checks);
        report.instances = instances;
        Ok(report)
    }

    /// The session's VMs are the lab's.
    fn check_lab(&self, lab: &Lab) -> Result<(), SessionError> {
        let names: Vec<&str> = self.vms().map(|(n, _)| n).collect();
        let wanted = lab.vm_names();
        if wanted.is_empty() {
            if names.len() != 1 {
                return Err(SessionError::Mismatch(format!(
                    "lab `{}` is one VM (it has no [[vms]]), and the session has {}: grade it on one",
                    lab.name,
                    names.len()
                )));
            }
            return Ok(());
        }
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|w| !names.contains(w))
            .copied()
            .collect();
        let unknown: Vec<&str> = names
            .iter()
            .filter(|n| !wanted.contains(n))
            .copied()
            .collect();
        if missing.is_empty() && unknown.is_empty() {
            return Ok(());
        }
        let mut problem = format!(
            "the session's VMs are not lab `{}`'s ({})",
            lab.name,
            wanted.join(", ")
        );
        if !missing.is_empty() {
            problem.push_str(&format!("; missing: {}", missing.join(", ")));
        }
        if !unknown.is_empty() {
            problem.push_str(&format!("; not in the lab: {}", unknown.join(", ")));
        }
        Err(SessionError::Mismatch(problem))
    }
}

/// Runs `futures` at once on this task and returns their outputs in order.
async fn futures_join<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (fut, slot) in pending.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}
