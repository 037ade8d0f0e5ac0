//! Finding the subtree the agent may use: a cgroup v2 mount, the delegated
//! cgroup systemd gave the unit, the controllers and their ceilings.

use super::*;
use std::ffi::CString;
use std::io::{self};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub(super) const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

pub(super) fn check_cgroup2(p: &Path) -> Result<(), CgroupError> {
    let not = |reason: String| CgroupError::NotCgroup2 {
        path: p.to_path_buf(),
        reason,
    };
    let fs = nix::sys::statfs::statfs(p).map_err(|e| not(e.to_string()))?;
    if fs.filesystem_type().0 as i64 != CGROUP2_SUPER_MAGIC {
        return Err(not("it is not on a cgroup2 file system".into()));
    }
    if !p.join("cgroup.procs").exists() {
        return Err(not("it has no `cgroup.procs`".into()));
    }
    Ok(())
}

/// The agent's own cgroup when systemd delegated it (`Delegate=yes` sets
/// `trusted.delegate=1` on it, systemd 251+), with the agent in its leaf
/// `agent/`, and whether controllers may be enabled there: only when
/// systemd itself put the agent in `agent/` (`DelegateSubgroup=agent`,
/// systemd ≥ 254), so a restart goes there too. Otherwise (252) the agent
/// moves itself. `Err`: why not, for the log.
pub(super) fn delegated_self() -> Result<(PathBuf, bool), String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("failed to read /proc/self/cgroup: {e}"))?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 hierarchy")?
        .to_owned();
    if rel == "/" {
        return Err("the agent runs in the root cgroup".into());
    }
    let mount = cgroup2_mount().ok_or("no cgroup2 mount")?;
    let own = mount.join(rel.trim_start_matches('/'));
    // A unit's own cgroup is `NAME.service`, never `agent`: in `agent/`
    // under a delegated cgroup, systemd put us there (whether it also
    // marks the subgroup delegated is not relied on).
    if let Some(unit) = own.parent()
        && own.file_name() == Some("agent".as_ref())
        && has_delegate_xattr(unit)
    {
        return Ok((unit.to_path_buf(), true));
    }
    let root = own;
    if !has_delegate_xattr(&root) {
        return Err(format!(
            "`{}` is not delegated to the agent (the unit needs `Delegate=yes`)",
            root.display()
        ));
    }
    let leaf = root.join("agent");
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("failed to create `{}`: {e}", leaf.display())),
    }
    // Writing "0" moves the writing process, every thread of it.
    std::fs::write(leaf.join("cgroup.procs"), b"0")
        .map_err(|e| format!("failed to move the agent into `{}`: {e}", leaf.display()))?;
    Ok((root, false))
}

/// Tasks left to the agent itself under its unit's limit: its thread, the
/// shells of the next commands, housekeeping.
pub(super) const AGENT_TASKS: u64 = 64;

/// The most processes one command may have, from the `pids.max` of the
/// subtree the commands share (the unit's `TasksMax=`; systemd's default is
/// 15 % of the guest's threads: ~1,170 on a 1 GiB VM, ~2,350 on 2 GiB): a
/// quarter of it after the agent's share. A command that reached the
/// unit's own limit would leave the agent unable to start the next
/// command and slow to end this one (measured on Debian 13: a 20 s
/// timeout answered after 45 s); at a quarter, three runaways at once
/// still leave room. `max` (no unit limit): no ceiling.
pub(super) fn pids_ceiling(unit_pids_max: &str) -> Option<u64> {
    let n: u64 = unit_pids_max.trim().parse().ok()?;
    Some((n.saturating_sub(AGENT_TASKS) / 4).max(16))
}

pub(super) fn at_most(v: Option<u64>, ceiling: Option<u64>) -> Option<u64> {
    match (v, ceiling) {
        (Some(v), Some(c)) => Some(v.min(c)),
        (v, c) => v.or(c),
    }
}

/// Turns on `controller` for the exec cgroups, if it is available to
/// `root`; detected by the write succeeding, not by the systemd version.
pub(super) fn enable(root: &Path, controller: &str, plus: &[u8]) -> bool {
    let available = std::fs::read_to_string(root.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == controller));
    available && std::fs::write(root.join("cgroup.subtree_control"), plus).is_ok()
}

/// The default `memory.max` of a command: the guest's memory less a
/// reserve of max(256 MiB, 1/8 of it). What the reserve keeps alive: the
/// kernel's own growth (slab, page tables, the hog's kernel stacks are
/// charged to it but the rest of the guest's are not), systemd, journald,
/// sshd and the serial getty (~50–80 MiB on a minimal Debian), and the
/// agent (2 MiB idle, ~20 MiB with 8 execs at the default output cap). A
/// floor for small VMs, a share for large ones, whose lab services
/// (a kubelet, a database) grow with them. One command may then take all
/// the rest; the OOM killer stops it at its own limit, and `oom_score_adj`
/// (see `serve`) makes sure that, should the guest run out anyway, it is
/// the command that goes, not the agent.
pub(super) fn default_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    let total = kib * 1024;
    let reserve = (256 << 20u64).max(total / 8);
    Some(
        total
            .saturating_sub(reserve)
            .max(lab_agent_proto::exec::MIN_MEMORY_BYTES),
    )
}

pub(super) fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        // `id parent maj:min root mountpoint opts... - fstype source superopts`
        let (pre, post) = l.split_once(" - ")?;
        if post.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        Some(PathBuf::from(pre.split_whitespace().nth(4)?))
    })
}

pub(super) fn has_delegate_xattr(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    let mut buf = [0u8; 8];
    // SAFETY: NUL-terminated strings; the kernel writes at most buf.len().
    let n = unsafe {
        nix::libc::getxattr(
            c.as_ptr(),
            c"trusted.delegate".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n > 0 && &buf[..n as usize] == b"1"
}
