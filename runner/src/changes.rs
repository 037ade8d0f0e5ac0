//! What a lab changed on the sandbox's copy of the machine (or of a guest
//! image's root file system), read from the
//! overlays' upper dirs (through `/proc/KEEPER/root`: the upper dirs are on
//! a tmpfs mounted only in the keeper's namespace). Every write outside the
//! private tmpfs trees lands there: a new file is in the upper dir alone, a
//! changed one is a copy there, a removed one is a whiteout (a character
//! device 0:0), a directory that replaced one is marked opaque. The try
//! dir (`$LAB_DIR`, the agent's state) is bound from the host, so nothing
//! of it is here.

use super::sandbox::{LAYERS_FILE, MOUNT_DIR};
use serde::Serialize;
use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What changed, as absolute paths of the machine (escaped for display),
/// each list sorted.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Changes {
    /// Files, dirs and links that did not exist.
    pub added: Vec<String>,
    /// Existing ones whose contents, type, mode or owner changed (a
    /// replaced directory too).
    pub changed: Vec<String>,
    /// Existing ones that were removed.
    pub removed: Vec<String>,
    /// Names in `/etc/passwd` that the machine's lacks.
    pub users_added: Vec<String>,
    /// Names in `/etc/group` that the machine's lacks.
    pub groups_added: Vec<String>,
    /// Units the lab enabled (`systemctl enable`'s links under
    /// `/etc/systemd/system/*.wants/` and `*.requires/`): it cannot start
    /// them here, there is no systemd.
    pub services_enabled: Vec<String>,
}

impl Changes {
    /// The paths changed in any way.
    pub fn files(&self) -> usize {
        self.added.len() + self.changed.len() + self.removed.len()
    }

    /// One line for the report.
    pub fn summary(&self) -> String {
        if self.files() == 0 {
            return "the lab changed nothing on the machine outside $LAB_DIR".to_owned();
        }
        let mut s = format!(
            "the lab changed {} path{} outside $LAB_DIR ({} added, {} changed, {} removed)",
            self.files(),
            if self.files() == 1 { "" } else { "s" },
            self.added.len(),
            self.changed.len(),
            self.removed.len()
        );
        for (what, names) in [
            ("users added", &self.users_added),
            ("groups added", &self.groups_added),
            ("services enabled", &self.services_enabled),
        ] {
            if !names.is_empty() {
                s.push_str(&format!("; {what}: {}", names.join(", ")));
            }
        }
        s
    }

    /// Every path, one a line: `+` added, `~` changed, `-` removed.
    pub fn listing(&self) -> String {
        let mut lines: Vec<(&str, char)> = Vec::new();
        lines.extend(self.added.iter().map(|p| (p.as_str(), '+')));
        lines.extend(self.changed.iter().map(|p| (p.as_str(), '~')));
        lines.extend(self.removed.iter().map(|p| (p.as_str(), '-')));
        lines.sort();
        lines
            .into_iter()
            .map(|(p, mark)| format!("  {mark} {p}\n"))
            .collect()
    }
}

/// The changes in the sandbox of keeper `keeper`, whose try dir is `dir`.
pub(crate) fn collect(keeper: u32, dir: &Path) -> io::Result<Changes> {
    let layers = fs::read_to_string(dir.join(LAYERS_FILE))?;
    let keeper_root = PathBuf::from(format!("/proc/{keeper}/root"));
    let in_keeper = |p: &Path| keeper_root.join(p.strip_prefix("/").unwrap_or(p));
    let top = in_keeper(dir).join(MOUNT_DIR);
    let mut raw = Raw::default();
    let mut lower_root = PathBuf::from("/");
    for line in layers.lines() {
        let mut fields = line.split('\t');
        let (Some(n), Some(mountpoint)) = (fields.next(), fields.next()) else {
            continue;
        };
        // The lower dir when it is not the machine's own (a guest image's
        // root, mounted in the keeper's namespace only).
        let lower = fields
            .next()
            .map_or_else(|| PathBuf::from(mountpoint), |l| in_keeper(Path::new(l)));
        let upper = top.join(format!("upper{n}"));
        walk(&upper, &lower, Path::new(mountpoint), dir, &mut raw)?;
        if n == "0" {
            lower_root = lower;
        }
    }
    let upper_root = top.join("upper0");
    let mut c = Changes {
        users_added: added_names(&upper_root, &lower_root, "etc/passwd"),
        groups_added: added_names(&upper_root, &lower_root, "etc/group"),
        services_enabled: enabled_units(&raw.added),
        ..Changes::default()
    };
    for (from, to) in [
        (raw.added, &mut c.added),
        (raw.changed, &mut c.changed),
        (raw.removed, &mut c.removed),
    ] {
        *to = from
            .iter()
            .map(|p| lab_agent_proto::text::escape(&p.to_string_lossy()).into_owned())
            .collect();
    }
    Ok(c)
}

#[derive(Default)]
struct Raw {
    added: BTreeSet<PathBuf>,
    changed: BTreeSet<PathBuf>,
    removed: BTreeSet<PathBuf>,
}

/// Compares `upper` (a dir of an upper layer) with `lower`, the same dir
/// in the layer below (the machine's, or an image's), which the sandbox
/// sees at `host`; skips the try dir.
fn walk(upper: &Path, lower: &Path, host: &Path, try_dir: &Path, raw: &mut Raw) -> io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(upper)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let up = entry.path();
        let path = host.join(entry.file_name());
        if path.starts_with(try_dir) {
            continue;
        }
        let below = lower.join(entry.file_name());
        let meta = fs::symlink_metadata(&up)?;
        let lower = fs::symlink_metadata(&below).ok();
        if meta.file_type().is_char_device() && meta.rdev() == 0 {
            raw.removed.insert(path);
        } else if meta.is_dir() {
            match lower {
                Some(l) if l.is_dir() && !opaque(&up) => {
                    if !same_attrs(&meta, &l) {
                        raw.changed.insert(path.clone());
                    }
                    walk(&up, &below, &path, try_dir, raw)?;
                }
                Some(_) => {
                    raw.changed.insert(path.clone());
                    add_all(&up, &path, raw)?;
                }
                None => {
                    raw.added.insert(path.clone());
                    add_all(&up, &path, raw)?;
                }
            }
        } else {
            match lower {
                None => {
                    raw.added.insert(path);
                }
                // A copy-up alone (opened for writing, touched) is no change.
                Some(l) if same_file(&up, &meta, &below, &l) => {}
                Some(_) => {
                    raw.changed.insert(path);
                }
            }
        }
    }
    Ok(())
}

/// Everything under a dir that is new (or replaced a machine's one).
fn add_all(upper: &Path, host: &Path, raw: &mut Raw) -> io::Result<()> {
    for entry in fs::read_dir(upper)? {
        let entry = entry?;
        let path = host.join(entry.file_name());
        let up = entry.path();
        // A whiteout in a new dir hides nothing of the machine's.
        let meta = fs::symlink_metadata(&up)?;
        if meta.file_type().is_char_device() && meta.rdev() == 0 {
            continue;
        }
        raw.added.insert(path.clone());
        if meta.is_dir() {
            add_all(&up, &path, raw)?;
        }
    }
    Ok(())
}

/// overlayfs marks a dir that replaced the lower one (`rm -r d; mkdir d`).
fn opaque(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut buf = [0u8; 4];
    // SAFETY: NUL-terminated names, a buffer of the length given.
    let n = unsafe {
        nix::libc::lgetxattr(
            path.as_ptr(),
            c"trusted.overlay.opaque".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n == 1 && buf[0] == b'y'
}

fn same_attrs(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    a.mode() == b.mode() && a.uid() == b.uid() && a.gid() == b.gid()
}

fn same_file(up: &Path, a: &fs::Metadata, host: &Path, b: &fs::Metadata) -> bool {
    if !same_attrs(a, b) {
        return false;
    }
    if a.file_type().is_symlink() {
        return fs::read_link(up).ok() == fs::read_link(host).ok();
    }
    if a.is_file() {
        return a.len() == b.len() && same_contents(up, host).unwrap_or(false);
    }
    a.rdev() == b.rdev()
}

fn same_contents(a: &Path, b: &Path) -> io::Result<bool> {
    use std::io::Read;
    let (mut fa, mut fb) = (fs::File::open(a)?, fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(fb.read(&mut bb[..1])? == 0);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// The names in the sandbox's `/etc/passwd` (or `group`) that the
/// lower layer's (`lower_root`: the machine's, or an image's) lacks; none
/// when the lab left the file alone.
fn added_names(upper_root: &Path, lower_root: &Path, file: &str) -> Vec<String> {
    let Ok(inside) = fs::read_to_string(upper_root.join(file)) else {
        return Vec::new();
    };
    let names = |text: &str| -> BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.split(':').next())
            .filter(|n| !n.is_empty() && !n.starts_with('#'))
            .map(|n| lab_agent_proto::text::escape(n).into_owned())
            .collect()
    };
    let host = names(&fs::read_to_string(lower_root.join(file)).unwrap_or_default());
    names(&inside).difference(&host).cloned().collect()
}

/// `systemctl enable`'s links among the added paths.
fn enabled_units(added: &BTreeSet<PathBuf>) -> Vec<String> {
    let units: BTreeSet<String> = added
        .iter()
        .filter_map(|p| {
            let dir = p.parent()?;
            let wants = dir.file_name()?.to_str()?;
            let under_etc = dir.parent()? == Path::new("/etc/systemd/system");
            let unit = p.file_name()?.to_string_lossy();
            (under_etc && (wants.ends_with(".wants") || wants.ends_with(".requires")))
                .then(|| lab_agent_proto::text::escape(&unit).into_owned())
        })
        .collect();
    units.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_users_and_services() {
        let c = Changes {
            added: vec!["/etc/a".into(), "/etc/b".into()],
            changed: vec!["/etc/passwd".into()],
            removed: vec!["/etc/old".into()],
            users_added: vec!["student".into()],
            groups_added: vec![],
            services_enabled: vec!["nginx.service".into()],
        };
        assert_eq!(
            c.summary(),
            "the lab changed 4 paths outside $LAB_DIR (2 added, 1 changed, 1 removed); \
             users added: student; services enabled: nginx.service"
        );
        assert_eq!(
            c.listing(),
            "  + /etc/a\n  + /etc/b\n  - /etc/old\n  ~ /etc/passwd\n"
        );
        assert_eq!(
            Changes::default().summary(),
            "the lab changed nothing on the machine outside $LAB_DIR"
        );
    }

    #[test]
    fn enabled_units_are_links_under_wants() {
        let added: BTreeSet<PathBuf> = [
            "/etc/systemd/system/multi-user.target.wants/web.service",
            "/etc/systemd/system/web.service",
            "/usr/lib/x.wants/y.service",
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(enabled_units(&added), ["web.service"]);
    }
}
