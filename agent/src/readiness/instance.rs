//! `STATE_DIR/instance.json`: which life of the VM this is, and whether its
//! disk had a life before it.
//!
//! The state dir is on the root disk, so the file lives exactly as long as
//! the student's work: a reboot keeps it (and counts the boot), a VM
//! restarted onto a fresh disk (a containerDisk's write layer is gone)
//! starts without it and gets a new id. Both `lab-agent serve` and
//! `lab-agent setup` call [`observe_boot`] at start; they run side by side
//! on a first boot, so the read-modify-write holds an `flock` on the state
//! dir and one id comes out.
//!
//! A disk that was booted before (a booted golden, a cloned disk) carries
//! another VM's record. The record therefore keeps the cloud-init
//! instance-id it was made under (`CLOUD_INIT_DIR/.instance-id`, which
//! cloud-init writes on every boot once it knows its datasource) and the
//! machine-id: made under another, it came with the disk, and this VM gets
//! an id of its own, with the evidence in [`Disk`]. What else shows an
//! earlier life ([`Traces`]) is looked at once, when a record is made.

use crate::readiness::current_boot_id;
use crate::setup::record::{self, MAX_STATE_FILE_BYTES};
use lab_agent_proto::lifecycle::is_instance_id;
use lab_agent_proto::{Disk, Instance};
use nix::libc;
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const INSTANCE_JSON: &str = "instance.json";

/// The record: the wire's [`Instance`], what it was made under, and the
/// disk's judgement made then. Unknown fields are tolerated, and records of
/// older agents (the instance's fields alone) are read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    id: String,
    boots: u64,
    boot_id: String,
    first_boot_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cloud_init_instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    machine_id: Option<String>,
    /// [`Disk::evidence`], a line each (the sentences are printable text):
    /// a string, not a list, as the agent reads no other list (binary size).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    evidence: String,
    /// When `boot_id`'s boot began, ms since the epoch, as the first agent
    /// of that boot measured it: every later one says the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    boot_at_ms: Option<u64>,
}

/// One life of the VM, as the answers tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Life {
    pub instance: Instance,
    pub disk: Disk,
    /// This boot's wall-clock start, ms since the epoch (see `Record`).
    pub boot_at_ms: Option<u64>,
}

/// Which cloud-init instance this boot is, as far as the agent can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloudInitId {
    /// `--no-cloud-init`: there is none; the record is bound to the
    /// machine-id alone, and no other trace is judged (a lab tried on a
    /// machine, not a VM's disk).
    Unwatched,
    /// cloud-init has not said yet in this boot (it writes `.instance-id`
    /// in its first stage that finds the datasource; the agent may start
    /// before): nothing is judged until it has.
    Pending,
    Known(String),
}

impl CloudInitId {
    /// `dir/.instance-id`, cut to printable ASCII (it is shown to people).
    pub fn read(cloud_init_dir: Option<&Path>) -> CloudInitId {
        let Some(dir) = cloud_init_dir else {
            return CloudInitId::Unwatched;
        };
        let id = record::read_followed(&dir.join(".instance-id"), 4096)
            .ok()
            .map(|b| printable(&b, 128))
            .filter(|s| !s.is_empty());
        id.map_or(CloudInitId::Pending, CloudInitId::Known)
    }
}

/// Where a disk's earlier life shows besides the agent's record: the
/// guest's own paths ([`Traces::GUEST`]); a test gives a tree of its own.
#[derive(Debug, Clone)]
pub struct Traces {
    /// cloud-init's `/var/lib/cloud`: an `instances/ID` dir per instance
    /// it has run as on this disk.
    pub cloud_lib: PathBuf,
    /// `/etc/machine-id`.
    pub machine_id: PathBuf,
    /// `/etc/ssh`, where the host keys are.
    pub ssh_dir: PathBuf,
}

impl Traces {
    pub fn guest() -> Traces {
        Traces {
            cloud_lib: "/var/lib/cloud".into(),
            machine_id: "/etc/machine-id".into(),
            ssh_dir: "/etc/ssh".into(),
        }
    }
}

/// The life this boot belongs to: the recorded one (its boot counted once
/// per boot id), or a new one when there is none or it came with the disk.
/// A record that cannot be trusted (not valid, a symlink, not ours) is
/// replaced by a new identity, never written through: the backend then sees
/// a reset, which is what a lost record means. Errors only when the state
/// dir cannot be used at all.
pub fn observe_boot(state_dir: &Path, ci: &CloudInitId, traces: &Traces) -> io::Result<Life> {
    record::prepare_dir(state_dir)?;
    let dir = std::fs::File::open(state_dir)?;
    // Held until `dir` is dropped at the end of this function.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let boot_id = current_boot_id().unwrap_or_default();
    let machine_id = read_machine_id(&traces.machine_id);
    let path = state_dir.join(INSTANCE_JSON);
    let made = |foreign: Option<String>| {
        let mut evidence = Vec::from_iter(foreign);
        if *ci != CloudInitId::Unwatched {
            earlier_life(traces, ci, &mut evidence);
        }
        new_record(boot_id.clone(), ci, machine_id.clone(), evidence)
    };
    let rec = match read(&path) {
        Ok(Some(found)) => match foreign(&found, ci, machine_id.as_deref(), state_dir) {
            Some(why) => {
                tracing::warn!(path = %path.display(), evidence = %why, "the instance record came with the disk; this VM gets a new instance id");
                made(Some(why))?
            }
            None => {
                let mut rec = found.clone();
                if rec.boot_id != boot_id {
                    rec.boots = rec.boots.saturating_add(1);
                    rec.boot_id = boot_id.clone();
                    rec.boot_at_ms = None;
                }
                if rec.boot_at_ms.is_none() {
                    rec.boot_at_ms = Some(crate::readiness::timeline::boot_epoch_ms());
                }
                // A record of an older agent, or made before cloud-init
                // said which instance this is: it is this VM's.
                if let (None, CloudInitId::Known(id)) = (&rec.cloud_init_instance_id, ci) {
                    rec.cloud_init_instance_id = Some(id.clone());
                }
                if rec.machine_id.is_none() {
                    rec.machine_id = machine_id;
                }
                if rec == found {
                    return Ok(rec.into_life());
                }
                rec
            }
        },
        Ok(None) => made(None)?,
        Err(why) => {
            tracing::warn!(path = %path.display(), error = %why, "the instance record cannot be trusted; this disk gets a new instance id");
            made(None)?
        }
    };
    let mut bytes = serde_json::to_vec(&rec).map_err(io::Error::other)?;
    bytes.push(b'\n');
    record::write_atomic(state_dir, INSTANCE_JSON, &bytes)?;
    Ok(rec.into_life())
}

impl Record {
    fn into_life(self) -> Life {
        Life {
            instance: Instance {
                id: self.id,
                boots: self.boots,
                boot_id: self.boot_id,
                first_boot_at: self.first_boot_at,
            },
            disk: Disk {
                booted_before: !self.evidence.is_empty(),
                evidence: self.evidence.lines().map(str::to_owned).collect(),
            },
            boot_at_ms: self.boot_at_ms,
        }
    }
}

/// Why `rec` is another VM's: made under another cloud-init instance (or,
/// without cloud-init, on another machine); `None` when it is this one's
/// or cannot be told yet.
fn foreign(rec: &Record, ci: &CloudInitId, machine_id: Option<&str>, dir: &Path) -> Option<String> {
    let (what, then, now) = match ci {
        CloudInitId::Known(now) => (
            "cloud-init instance",
            rec.cloud_init_instance_id.as_deref()?,
            now.as_str(),
        ),
        CloudInitId::Unwatched => ("machine-id", rec.machine_id.as_deref()?, machine_id?),
        CloudInitId::Pending => return None,
    };
    if then == now {
        return None;
    }
    let mut s = String::from("the agent's record in ");
    s.push_str(&dir.display().to_string());
    s.push_str(" was made under ");
    s.push_str(what);
    s.push_str(" `");
    s.push_str(then);
    s.push_str("`, not this VM's `");
    s.push_str(now);
    s.push_str("`: it came with the disk");
    Some(s)
}

/// What else shows that the disk lived before this VM's first boot, one
/// sentence each: cloud-init instances of other ids, and a machine-id or
/// SSH host keys written before this boot began (the first of this life:
/// a record is being made). cloud-init regenerates host keys for a new
/// instance, so these are seen when it has not yet, or was told not to.
fn earlier_life(traces: &Traces, ci: &CloudInitId, out: &mut Vec<String>) {
    if let (CloudInitId::Known(now), Ok(dir)) =
        (ci, std::fs::read_dir(traces.cloud_lib.join("instances")))
    {
        let mut others = Vec::new();
        for entry in dir {
            let Ok(entry) = entry else { continue };
            let name = printable(entry.file_name().as_encoded_bytes(), 128);
            if name != *now && !name.is_empty() {
                others.push(name);
            }
        }
        // In the directory's order (a sort of strings costs the agent ~3 KB).
        if !others.is_empty() {
            let mut s = String::from("cloud-init ran on this disk before as ");
            for (i, name) in others.iter().take(3).enumerate() {
                s.push_str(if i == 0 { "`" } else { "`, `" });
                s.push_str(name);
            }
            s.push('`');
            if others.len() > 3 {
                s.push_str(" and ");
                s.push_str(&(others.len() - 3).to_string());
                s.push_str(" more");
            }
            s.push_str(" (");
            s.push_str(&traces.cloud_lib.join("instances").display().to_string());
            s.push(')');
            out.push(s);
        }
    }
    // Written before this boot began (a second's slack for the boot time,
    // which is now less the time since boot).
    let booted = SystemTime::UNIX_EPOCH
        + Duration::from_millis(crate::readiness::timeline::boot_epoch_ms().saturating_sub(1000));
    let older = |p: &Path| {
        let t = std::fs::symlink_metadata(p).ok()?.modified().ok()?;
        (t < booted).then_some(t)
    };
    // An empty or `uninitialized` machine-id is the one a never-booted
    // image ships: systemd makes it at first boot.
    if read_machine_id(&traces.machine_id).is_some() {
        if let Some(t) = older(&traces.machine_id) {
            out.push(written_before(&traces.machine_id, "was written", t));
        }
    }
    let mut oldest_key: Option<(SystemTime, PathBuf)> = None;
    if let Ok(dir) = std::fs::read_dir(&traces.ssh_dir) {
        for entry in dir {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let name = name.as_encoded_bytes();
            if !(name.starts_with(b"ssh_host_") && name.ends_with(b"_key")) {
                continue;
            }
            let path = entry.path();
            if let Some(t) = older(&path) {
                if oldest_key.as_ref().is_none_or(|(o, _)| t < *o) {
                    oldest_key = Some((t, path));
                }
            }
        }
    }
    if let Some((t, path)) = oldest_key {
        out.push(written_before(&path, "(an SSH host key) was made", t));
    }
}

fn written_before(path: &Path, what: &str, at: SystemTime) -> String {
    let mut s = path.display().to_string();
    s.push(' ');
    s.push_str(what);
    s.push_str(" at ");
    s.push_str(&crate::timefmt::rfc3339(at));
    s.push_str(", before this VM first booted: every VM made from this disk shares it");
    s
}

/// `/etc/machine-id` when it holds one (32 lowercase hex digits).
fn read_machine_id(path: &Path) -> Option<String> {
    let bytes = record::read_followed(path, 64).ok()?;
    let id = std::str::from_utf8(&bytes).ok()?.trim();
    is_instance_id(id).then(|| id.to_owned())
}

/// `bytes` as text to show: printable ASCII only (the rest as `?`),
/// trimmed, at most `max` characters.
fn printable(bytes: &[u8], max: usize) -> String {
    let text: String = bytes
        .trim_ascii()
        .iter()
        .take(max)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    text
}

/// `Ok(None)`: no record yet (a fresh disk).
fn read(path: &Path) -> io::Result<Option<Record>> {
    let bytes = match record::read_owned(path, MAX_STATE_FILE_BYTES) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other?,
    };
    let found: Record = serde_json::from_slice(&bytes).map_err(io::Error::other)?;
    if !is_instance_id(&found.id) || found.boots == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an instance record (bad id or boot count)",
        ));
    }
    Ok(Some(found))
}

fn new_record(
    boot_id: String,
    ci: &CloudInitId,
    machine_id: Option<String>,
    evidence: Vec<String>,
) -> io::Result<Record> {
    let mut raw = [0u8; 16];
    // getrandom(2) blocks only until the kernel's pool is first seeded,
    // which modern kernels do within the first second of boot.
    let n = unsafe { libc::getrandom(raw.as_mut_ptr().cast(), raw.len(), 0) };
    if n != raw.len() as isize {
        return Err(io::Error::last_os_error());
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = String::with_capacity(32);
    for b in raw {
        id.push(HEX[usize::from(b >> 4)] as char);
        id.push(HEX[usize::from(b & 15)] as char);
    }
    Ok(Record {
        id,
        boots: 1,
        boot_id,
        first_boot_at: crate::timefmt::rfc3339(SystemTime::now()),
        cloud_init_instance_id: match ci {
            CloudInitId::Known(id) => Some(id.clone()),
            _ => None,
        },
        machine_id,
        evidence: {
            let mut lines = String::new();
            for e in &evidence {
                if !lines.is_empty() {
                    lines.push('\n');
                }
                lines.push_str(e);
            }
            lines
        },
        boot_at_ms: Some(crate::readiness::timeline::boot_epoch_ms()),
    })
}

#[cfg(test)]
mod tests;
