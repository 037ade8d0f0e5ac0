//! The root filesystem as a lab sees it: its size and free space
//! (`statvfs`, what `df /` shows), the bytes written to its block device
//! since boot (the device's `stat` in sysfs, 512-byte sectors whatever the
//! device's own sector size) and over the instance's life
//! (`STATE_DIR/writes`: the earlier boots' sum, kept by `serve`).

use crate::setup::record;
use lab_agent_proto::RootDisk;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What `serve` keeps of the writes, for one life: one line, `INSTANCE_ID
/// BOOT_ID EARLIER_BOOTS_BYTES THIS_BOOT_BYTES` (this boot's figure when
/// last written, every minute and at shutdown; plain words, not JSON: no
/// serde code for it in the agent).
pub const WRITES_FILE: &str = "writes";

/// `earlier`: the bytes written in the earlier boots of this life, added to
/// this boot's for `written_bytes_total`.
pub fn observe(root: &Path, earlier: u64) -> Option<RootDisk> {
    let vfs = nix::sys::statvfs::statvfs(root).ok()?;
    let frag = vfs.fragment_size() as u64;
    let written = written_bytes(root);
    Some(RootDisk {
        size_bytes: (vfs.blocks() as u64).saturating_mul(frag),
        free_bytes: (vfs.blocks_available() as u64).saturating_mul(frag),
        written_bytes: written,
        written_bytes_total: written.map(|w| w.saturating_add(earlier)),
        min_bytes: None,
        below_min: false,
    })
}

/// The bytes written in the earlier boots of `instance_id`'s life, from
/// what `serve` kept: the record's sum, plus its last figure of the boot
/// it was written in when that is not this one. Another life's record (a
/// disk that came with one), none or an unreadable one: 0.
pub fn earlier_boots(state_dir: &Path, instance_id: &str, boot_id: &str) -> u64 {
    let Ok(bytes) = record::read_owned(&state_dir.join(WRITES_FILE), 1024) else {
        return 0;
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut words = text.split_ascii_whitespace();
    let (Some(id), Some(boot), Some(Ok(earlier)), Some(Ok(this_boot))) = (
        words.next(),
        words.next(),
        words.next().map(str::parse::<u64>),
        words.next().map(str::parse::<u64>),
    ) else {
        return 0;
    };
    match (id == instance_id, boot == boot_id) {
        (true, true) => earlier,
        (true, false) => earlier.saturating_add(this_boot),
        (false, _) => 0,
    }
}

/// Keeps this boot's figure beside the earlier boots' (atomically: a
/// reader sees the last record or this one).
pub fn keep(
    state_dir: &Path,
    instance_id: &str,
    boot_id: &str,
    earlier: u64,
    this_boot: u64,
) -> io::Result<()> {
    let mut line = String::with_capacity(128);
    for word in [instance_id, boot_id] {
        line.push_str(word);
        line.push(' ');
    }
    line.push_str(&earlier.to_string());
    line.push(' ');
    line.push_str(&this_boot.to_string());
    line.push('\n');
    record::write_atomic(state_dir, WRITES_FILE, line.as_bytes())
}

/// `3.0 GiB (3221225472 bytes)`: binary units with one decimal, cut rather
/// than rounded (integer arithmetic: no float formatting in the agent), so
/// a disk just short of the need never reads as the same size.
pub fn push_size(s: &mut String, bytes: u64) {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut unit = "";
    let mut scale = 1u128;
    for u in UNITS {
        if u128::from(bytes) < scale << 10 {
            break;
        }
        scale <<= 10;
        unit = u;
    }
    if unit.is_empty() {
        s.push_str(&bytes.to_string());
        s.push_str(" bytes");
        return;
    }
    let tenths = u128::from(bytes) * 10 / scale;
    s.push_str(&(tenths / 10).to_string());
    s.push('.');
    s.push(char::from(b'0' + (tenths % 10) as u8));
    s.push(' ');
    s.push_str(unit);
    s.push_str(" (");
    s.push_str(&bytes.to_string());
    s.push_str(" bytes)");
}

/// `None` when `root` is on no block device (an overlay, tmpfs: major 0)
/// or sysfs is not there.
pub fn written_bytes(root: &Path) -> Option<u64> {
    let dev = std::fs::metadata(root).ok()?.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    if major == 0 {
        return None;
    }
    let mut path = String::from("/sys/dev/block/");
    path.push_str(&major.to_string());
    path.push(':');
    path.push_str(&minor.to_string());
    path.push_str("/stat");
    sectors_written(&std::fs::read_to_string(path).ok()?).map(|s| s.saturating_mul(512))
}

/// Field 7 of a block device's `stat` (Documentation/block/stat.rst).
fn sectors_written(stat: &str) -> Option<u64> {
    stat.split_ascii_whitespace().nth(6)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sectors_written_is_the_seventh_field() {
        let stat = "  140458    35187 11624006    40212   141497   126813  5930042   104425        0   139524   148592";
        assert_eq!(sectors_written(stat), Some(5_930_042));
        assert_eq!(sectors_written("1 2 3"), None);
    }

    #[test]
    fn the_root_has_a_size() {
        let r = observe(Path::new("/"), 7).unwrap();
        assert!(r.size_bytes > 0 && r.free_bytes <= r.size_bytes, "{r:?}");
        assert_eq!(r.written_bytes_total, r.written_bytes.map(|w| w + 7));
    }

    /// Boots of one life add up; another life's record counts nothing.
    #[test]
    fn writes_add_up_over_a_life() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        assert_eq!(earlier_boots(state, "life", "boot-1"), 0, "no record yet");
        keep(state, "life", "boot-1", 0, 100).unwrap();
        assert_eq!(earlier_boots(state, "life", "boot-1"), 0, "the same boot");
        assert_eq!(earlier_boots(state, "life", "boot-2"), 100, "the next boot");
        keep(state, "life", "boot-2", 100, 40).unwrap();
        assert_eq!(earlier_boots(state, "life", "boot-3"), 140);
        assert_eq!(earlier_boots(state, "another-life", "boot-3"), 0);
        std::fs::write(state.join(WRITES_FILE), "life boot-2 x 1").unwrap();
        assert_eq!(earlier_boots(state, "life", "boot-3"), 0);
    }

    #[test]
    fn sizes_read_in_binary_units_and_bytes() {
        let size = |n| {
            let mut s = String::new();
            push_size(&mut s, n);
            s
        };
        assert_eq!(size(0), "0 bytes");
        assert_eq!(size(1023), "1023 bytes");
        assert_eq!(size(1024), "1.0 KiB (1024 bytes)");
        assert_eq!(size(3 << 30), "3.0 GiB (3221225472 bytes)");
        assert_eq!(size(9 << 30), "9.0 GiB (9663676416 bytes)");
        // Cut, not rounded: just under 10 GiB is not "10.0 GiB".
        assert_eq!(size((10 << 30) - 1), "9.9 GiB (10737418239 bytes)");
        assert_eq!(size(1 << 60), "1.0 EiB (1152921504606846976 bytes)");
        assert_eq!(size(u64::MAX), "15.9 EiB (18446744073709551615 bytes)");
    }
}
