//! Which life of the VM `serve` answers for, and the bytes written over it.
//!
//! The life is observed when the agent starts ([`instance::observe_boot`]).
//! After a reboot (and on a booted golden's first boot) the agent starts
//! before cloud-init has said which instance this is: the record is taken
//! as it is until `CLOUD_INIT_DIR/.instance-id` appears, then bound to it
//! once, on the next answer — a record of another instance then gives way
//! to this VM's own. cloud-init writes that file well before it can be
//! done, so no VM is ready (and no client pins an id) before the binding.

use super::ReadinessConfig;
use super::instance::{self, CloudInitId, Life, Traces};
use super::root_disk;
use std::sync::Mutex;

#[derive(Debug)]
pub struct Lives {
    current: Mutex<Current>,
    traces: Traces,
}

#[derive(Debug)]
struct Current {
    /// `None` when the state dir cannot be used.
    life: Option<Life>,
    /// cloud-init has not said yet which instance this boot is.
    pending: bool,
    /// Bytes written in the earlier boots of this life.
    earlier_writes: u64,
}

impl Lives {
    /// Observes this boot's life (counting the boot) and keeps its
    /// writes' record; logs which life it is.
    pub fn start(cfg: &ReadinessConfig) -> Lives {
        let traces = Traces::guest();
        let ci = CloudInitId::read(cfg.cloud_init_dir.as_deref());
        let lives = Lives {
            current: Mutex::new(Current {
                life: None,
                pending: ci == CloudInitId::Pending,
                earlier_writes: 0,
            }),
            traces,
        };
        lives.observe(cfg, &ci, &mut lives.lock());
        lives
    }

    /// The life answering now (bound to cloud-init's instance as soon as
    /// it is known) and the bytes its earlier boots wrote.
    pub fn current(&self, cfg: &ReadinessConfig) -> (Option<Life>, u64) {
        let current = self.bound(cfg);
        (current.life.clone(), current.earlier_writes)
    }

    /// The id of [`Self::current`]'s life.
    pub fn instance_id(&self, cfg: &ReadinessConfig) -> Option<String> {
        let current = self.bound(cfg);
        current.life.as_ref().map(|l| l.instance.id.clone())
    }

    /// The current life, bound to cloud-init's instance once it is known.
    fn bound(&self, cfg: &ReadinessConfig) -> std::sync::MutexGuard<'_, Current> {
        let mut current = self.lock();
        if current.pending {
            let ci = CloudInitId::read(cfg.cloud_init_dir.as_deref());
            if ci != CloudInitId::Pending {
                current.pending = false;
                self.observe(cfg, &ci, &mut current);
            }
        }
        current
    }

    /// Keeps this boot's writes beside the earlier boots' (every minute and
    /// at shutdown): a crash loses at most the last minute's.
    pub fn keep_writes(&self, cfg: &ReadinessConfig) {
        keep_writes(cfg, &self.lock());
    }

    fn observe(&self, cfg: &ReadinessConfig, ci: &CloudInitId, current: &mut Current) {
        match instance::observe_boot(&cfg.state_dir, ci, &self.traces) {
            Ok(life) => {
                let changed = current
                    .life
                    .as_ref()
                    .is_some_and(|l| l.instance.id != life.instance.id);
                tracing::info!(
                    instance = %life.instance.id,
                    boots = life.instance.boots,
                    booted_before = life.disk.booted_before,
                    rebound = changed,
                    "instance"
                );
                if let Some(ms) = life.boot_at_ms {
                    crate::readiness::timeline::adopt_boot_epoch_ms(ms);
                }
                current.earlier_writes = root_disk::earlier_boots(
                    &cfg.state_dir,
                    &life.instance.id,
                    &life.instance.boot_id,
                );
                current.life = Some(life);
                keep_writes(cfg, current);
            }
            Err(e) => {
                tracing::warn!(state_dir = %cfg.state_dir.display(), error = %e, "no instance identity: the state dir cannot be used");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Keeps this boot's writes beside the earlier boots' ([`root_disk::keep`]).
fn keep_writes(cfg: &ReadinessConfig, current: &Current) {
    let (Some(life), Some(now)) = (&current.life, root_disk::written_bytes(&cfg.root)) else {
        return;
    };
    if let Err(e) = root_disk::keep(
        &cfg.state_dir,
        &life.instance.id,
        &life.instance.boot_id,
        current.earlier_writes,
        now,
    ) {
        tracing::warn!(error = %e, "failed to keep the root disk's writes; written_bytes_total may miss this boot's latest");
    }
}
