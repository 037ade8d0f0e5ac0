//! The root filesystem as a lab sees it: its size and free space
//! (`statvfs`, what `df /` shows) and the bytes written to its block device
//! since boot (the device's `stat` in sysfs, 512-byte sectors whatever the
//! device's own sector size).

use lab_agent_proto::RootDisk;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

pub fn observe(root: &Path) -> Option<RootDisk> {
    let vfs = nix::sys::statvfs::statvfs(root).ok()?;
    let frag = vfs.fragment_size() as u64;
    Some(RootDisk {
        size_bytes: (vfs.blocks() as u64).saturating_mul(frag),
        free_bytes: (vfs.blocks_available() as u64).saturating_mul(frag),
        written_bytes: written_bytes(root),
    })
}

/// `None` when `root` is on no block device (an overlay, tmpfs: major 0)
/// or sysfs is not there.
fn written_bytes(root: &Path) -> Option<u64> {
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
        let r = observe(Path::new("/")).unwrap();
        assert!(r.size_bytes > 0 && r.free_bytes <= r.size_bytes, "{r:?}");
    }
}
