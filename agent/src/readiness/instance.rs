//! `STATE_DIR/instance.json`: which life of the VM this is.
//!
//! The state dir is on the root disk, so the file lives exactly as long as
//! the student's work: a reboot keeps it (and counts the boot), a VM
//! restarted onto a fresh disk (a containerDisk's write layer is gone)
//! starts without it and gets a new id. Both `lab-agent serve` and
//! `lab-agent setup` call [`observe_boot`] at start; they run side by side
//! on a first boot, so the read-modify-write holds an `flock` on the state
//! dir and one id comes out.

use crate::readiness::current_boot_id;
use crate::setup::record::{self, MAX_STATE_FILE_BYTES};
use lab_agent_proto::Instance;
use lab_agent_proto::lifecycle::is_instance_id;
use nix::libc;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::SystemTime;

pub const INSTANCE_JSON: &str = "instance.json";

/// The instance this boot belongs to: the recorded one (its boot counted
/// once per boot id), or a new one when there is none. A record that
/// cannot be trusted (not valid, a symlink, not ours) is replaced by a new
/// identity, never written through: the backend then sees a reset, which
/// is what a lost record means. Errors only when the state dir cannot be
/// used at all.
pub fn observe_boot(state_dir: &Path) -> io::Result<Instance> {
    record::prepare_dir(state_dir)?;
    let dir = std::fs::File::open(state_dir)?;
    // Held until `dir` is dropped at the end of this function.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let boot_id = current_boot_id().unwrap_or_default();
    let path = state_dir.join(INSTANCE_JSON);
    let mut instance = match read(&path) {
        Ok(Some(found)) if found.boot_id == boot_id => return Ok(found),
        Ok(Some(mut found)) => {
            found.boots = found.boots.saturating_add(1);
            found.boot_id = boot_id;
            found
        }
        Ok(None) => new_instance(boot_id)?,
        Err(why) => {
            tracing::warn!(path = %path.display(), error = %why, "the instance record cannot be trusted; this disk gets a new instance id");
            new_instance(boot_id)?
        }
    };
    let mut bytes = serde_json::to_vec(&instance).map_err(io::Error::other)?;
    bytes.push(b'\n');
    record::write_atomic(state_dir, INSTANCE_JSON, &bytes)?;
    instance.boot_id.shrink_to_fit();
    Ok(instance)
}

/// `Ok(None)`: no record yet (a fresh disk).
fn read(path: &Path) -> io::Result<Option<Instance>> {
    let bytes = match record::read_owned(path, MAX_STATE_FILE_BYTES) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other?,
    };
    let found: Instance = serde_json::from_slice(&bytes).map_err(io::Error::other)?;
    if !is_instance_id(&found.id) || found.boots == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an instance record (bad id or boot count)",
        ));
    }
    Ok(Some(found))
}

fn new_instance(boot_id: String) -> io::Result<Instance> {
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
    Ok(Instance {
        id,
        boots: 1,
        boot_id,
        first_boot_at: crate::timefmt::rfc3339(SystemTime::now()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn made_once_then_kept_within_a_boot() {
        let dir = tempfile::tempdir().unwrap();
        let first = observe_boot(dir.path()).unwrap();
        assert!(is_instance_id(&first.id), "{}", first.id);
        assert_eq!(first.boots, 1);
        assert_eq!(Some(first.boot_id.clone()), current_boot_id());
        assert_eq!(observe_boot(dir.path()).unwrap(), first);
    }

    #[test]
    fn another_boot_id_counts_a_boot_and_keeps_the_id() {
        let dir = tempfile::tempdir().unwrap();
        let first = observe_boot(dir.path()).unwrap();
        let mut earlier = first.clone();
        earlier.boot_id = "an-earlier-boot".into();
        earlier.boots = 4;
        std::fs::write(
            dir.path().join(INSTANCE_JSON),
            serde_json::to_vec(&earlier).unwrap(),
        )
        .unwrap();
        let now = observe_boot(dir.path()).unwrap();
        assert_eq!((now.id.as_str(), now.boots), (first.id.as_str(), 5));
        assert_eq!(now.first_boot_at, first.first_boot_at);
    }

    #[test]
    fn an_untrusted_record_is_replaced_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(INSTANCE_JSON);
        for bad in [
            &b"not json"[..],
            br#"{"id":"XYZ","boots":1,"boot_id":"b","first_boot_at":"t"}"#,
            br#"{"id":"0123456789abcdef0123456789abcdef","boots":0,"boot_id":"b","first_boot_at":"t"}"#,
        ] {
            std::fs::write(&path, bad).unwrap();
            let got = observe_boot(dir.path()).unwrap();
            assert!(is_instance_id(&got.id) && got.boots == 1);
        }
        // A symlink to a file that looks right is not read, and its target
        // is not written: the link itself is replaced.
        let elsewhere = dir.path().join("elsewhere.json");
        let planted = br#"{"id":"0123456789abcdef0123456789abcdef","boots":9,"boot_id":"b","first_boot_at":"t"}"#;
        std::fs::write(&elsewhere, planted).unwrap();
        std::fs::remove_file(&path).unwrap();
        symlink(&elsewhere, &path).unwrap();
        let got = observe_boot(dir.path()).unwrap();
        assert_ne!(got.id, "0123456789abcdef0123456789abcdef");
        assert_eq!(std::fs::read(&elsewhere).unwrap(), planted);
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }

    /// `serve` and `setup` start together on a first boot: one id.
    #[test]
    fn concurrent_first_starts_agree() {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| observe_boot(dir.path()).unwrap().id))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    }
}
