//! Where many VMs' preparation time went: the distribution (count, min,
//! median, p90, max) of each phase, from the backend's request to ready:
//! the backend's own stamps before the guest boots ([`BackendTimes`]: VM
//! created, VMI scheduled, running), then each VM's [`Timeline`] (kernel
//! to agent, cloud-init's stages, setup, ready). The numbers a platform
//! plans with ("time to ready" per lab, and which stage to shorten).
//!
//! Pure functions over answers a backend already has (each VM's last
//! `/v1/ready` answer, as it logs them, with its own stamps beside):
//! [`Answers`] reads them, [`distribution`] sums them up, [`svg`] draws
//! them; `labctl timeline` prints them, Python's
//! `lab_agent.timeline_distribution` returns them (the same code, so the
//! same figures).

mod answers;
mod backend;
mod svg;

pub use answers::{Answers, AnswersError};
pub use backend::{BackendTimes, epoch_secs};
pub use svg::svg;

use lab_agent_proto::lifecycle::{Span, Timeline};

/// One VM's preparation as a report counts it: its guest's timeline and
/// the backend's stamps from before it (empty when none were logged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Preparation {
    pub timeline: Timeline,
    pub backend: BackendTimes,
}

/// One phase of a VM's preparation, as a report over many VMs counts it.
/// Each is a duration in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// From the VM's creation (the backend's request) to its VMI being
    /// scheduled onto a node.
    Scheduled,
    /// From the VMI scheduled to running (the pod and qemu started).
    Running,
    /// From the VMI running to the guest's kernel boot (the guest's clock
    /// against the cluster's: left out when it comes out negative).
    KernelBoot,
    /// From the kernel's boot to the agent's start.
    AgentStart,
    /// cloud-init's `init-local` stage, start to finish.
    InitLocal,
    /// cloud-init's `init` (network) stage.
    Init,
    /// cloud-init's `modules-config` stage.
    ModulesConfig,
    /// cloud-init's `modules-final` stage (setup runs inside it).
    ModulesFinal,
    /// The lab's setup script, start to finish.
    Setup,
    /// From the kernel's boot to ready.
    Ready,
    /// From the VM's creation to ready: the platform's headline number.
    RequestToReady,
}

impl Phase {
    /// Every phase, in the order a VM goes through them (the last two are
    /// totals).
    pub const ALL: [Phase; 11] = [
        Phase::Scheduled,
        Phase::Running,
        Phase::KernelBoot,
        Phase::AgentStart,
        Phase::InitLocal,
        Phase::Init,
        Phase::ModulesConfig,
        Phase::ModulesFinal,
        Phase::Setup,
        Phase::Ready,
        Phase::RequestToReady,
    ];

    /// The name a program reads: the timeline's own (`agent_started`,
    /// cloud-init's stage names as in `status.json`, `setup`, `ready`) and
    /// the backend's (`scheduled`, `running`, `kernel_boot`,
    /// `request_to_ready`).
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Scheduled => "scheduled",
            Phase::Running => "running",
            Phase::KernelBoot => "kernel_boot",
            Phase::AgentStart => "agent_started",
            Phase::InitLocal => "init-local",
            Phase::Init => "init",
            Phase::ModulesConfig => "modules-config",
            Phase::ModulesFinal => "modules-final",
            Phase::Setup => "setup",
            Phase::Ready => "ready",
            Phase::RequestToReady => "request_to_ready",
        }
    }

    /// The name a person reads.
    pub const fn label(self) -> &'static str {
        match self {
            Phase::Scheduled => "VM created → VMI scheduled",
            Phase::Running => "VMI scheduled → running",
            Phase::KernelBoot => "VMI running → kernel",
            Phase::AgentStart => "kernel → agent start",
            Phase::InitLocal => "cloud-init init-local",
            Phase::Init => "cloud-init init",
            Phase::ModulesConfig => "cloud-init modules-config",
            Phase::ModulesFinal => "cloud-init modules-final",
            Phase::Setup => "setup",
            Phase::Ready => "kernel → ready",
            Phase::RequestToReady => "VM created → ready",
        }
    }

    /// Whether the phase is a total of others (drawn apart).
    pub const fn is_total(self) -> bool {
        matches!(self, Phase::Ready | Phase::RequestToReady)
    }

    /// Whether the backend's stamps measure it (the guest cannot).
    pub const fn is_backends(self) -> bool {
        matches!(
            self,
            Phase::Scheduled | Phase::Running | Phase::KernelBoot | Phase::RequestToReady
        )
    }

    /// This phase's duration in `p`, rounded to the millisecond (the
    /// timeline's precision: `2.4 - 1.9` is `0.5`, not `0.49999…`); `None`
    /// when it has not finished, a stamp it needs is missing or malformed,
    /// or what was reported is no duration (negative: a finish before its
    /// start).
    pub fn secs(self, p: &Preparation) -> Option<f64> {
        let t = &p.timeline;
        let stage = |name: &str| t.cloud_init.get(name)?.duration_secs();
        let stamp = |s: &Option<String>| epoch_secs(s.as_deref()?);
        let boot = || epoch_secs(t.boot_at.as_deref()?);
        let created = || stamp(&p.backend.vm_created_at);
        let secs = match self {
            Phase::Scheduled => stamp(&p.backend.vmi_scheduled_at)? - created()?,
            Phase::Running => {
                stamp(&p.backend.vmi_running_at)? - stamp(&p.backend.vmi_scheduled_at)?
            }
            Phase::KernelBoot => boot()? - stamp(&p.backend.vmi_running_at)?,
            Phase::AgentStart => t.agent_started_secs?,
            Phase::InitLocal => stage("init-local")?,
            Phase::Init => stage("init")?,
            Phase::ModulesConfig => stage("modules-config")?,
            Phase::ModulesFinal => stage("modules-final")?,
            Phase::Setup => t.setup?.duration_secs()?,
            Phase::Ready => t.ready_secs?,
            Phase::RequestToReady => boot()? + t.ready_secs? - created()?,
        };
        (secs.is_finite() && secs >= 0.0).then(|| round_ms(secs))
    }
}

/// One phase over many VMs. The statistics are `None` when no VM has the
/// phase (`count` 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseStats {
    pub phase: Phase,
    /// Preparations in which the phase finished.
    pub count: usize,
    pub min_secs: Option<f64>,
    pub median_secs: Option<f64>,
    pub p90_secs: Option<f64>,
    pub max_secs: Option<f64>,
}

/// [`distribution`]'s answer: every phase of [`Phase::ALL`], in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// Preparations summed up.
    pub timelines: usize,
    pub phases: Vec<PhaseStats>,
}

/// Count, min, median, p90 and max of each phase over `preparations`. One
/// without a phase (a stage that had not finished when it was taken, a
/// boot without cloud-init, a setup that ran in an earlier boot, no
/// backend stamps) counts only for the phases it has, so each phase's
/// `count` says how many VMs its numbers stand for.
pub fn distribution<'a>(preparations: impl IntoIterator<Item = &'a Preparation>) -> Distribution {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); Phase::ALL.len()];
    let mut n = 0;
    for p in preparations {
        n += 1;
        for (phase, seen) in Phase::ALL.iter().zip(&mut samples) {
            seen.extend(phase.secs(p));
        }
    }
    let phases = Phase::ALL
        .iter()
        .zip(&mut samples)
        .map(|(&phase, seen)| {
            seen.sort_by(f64::total_cmp);
            PhaseStats {
                phase,
                count: seen.len(),
                min_secs: seen.first().copied(),
                median_secs: percentile(seen, 0.5),
                p90_secs: percentile(seen, 0.9),
                max_secs: seen.last().copied(),
            }
        })
        .collect();
    Distribution {
        timelines: n,
        phases,
    }
}

/// The `p` quantile (0 to 1) of `sorted` (ascending), by linear
/// interpolation between the closest ranks (numpy's and R's default, so a
/// backend's own numbers agree): the median of an even count is the mean
/// of the middle two. Rounded to the millisecond; `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = p.clamp(0.0, 1.0) * last as f64;
    let lo = rank.floor() as usize;
    let hi = (lo + 1).min(last);
    let value = sorted[lo] + (rank - lo as f64) * (sorted[hi] - sorted[lo]);
    Some(round_ms(value))
}

fn round_ms(secs: f64) -> f64 {
    (secs * 1000.0).round() / 1000.0
}

/// One VM's own timeline as a table's rows, in its boot's order, each a
/// span in seconds since the kernel booted: kernel to the agent's start,
/// each cloud-init stage that started, setup (once it started in this
/// boot), kernel to ready. What has not happened is `None` in its span.
pub fn phases_of(t: &Timeline) -> Vec<(Phase, Span)> {
    let from_boot = |end: Option<f64>| Span {
        start_secs: end.map(|_| 0.0),
        finished_secs: end,
    };
    let mut rows = vec![(Phase::AgentStart, from_boot(t.agent_started_secs))];
    for (name, span) in t.stages() {
        if let Some(phase) = Phase::ALL.into_iter().find(|p| p.name() == name) {
            rows.push((phase, *span));
        }
    }
    rows.extend(t.setup.map(|setup| (Phase::Setup, setup)));
    rows.push((Phase::Ready, from_boot(t.ready_secs)));
    rows
}

#[cfg(test)]
mod tests;
