//! Who a command runs as: the passwd entry of a user name, resolved before
//! anything is spawned so a bad name is a clear 400, not a failed fork.

use nix::unistd::{Gid, Uid, User};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Everything needed to become a user: ids, supplementary groups and the
/// login environment values from passwd.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub uid: Uid,
    pub gid: Gid,
    pub groups: Vec<Gid>,
    pub home: PathBuf,
    pub shell: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("unknown user `{0}`: there is no such entry in the guest's passwd database")]
    Unknown(String),
    #[error("user name {0:?} is not valid")]
    BadName(String),
    #[error("failed to look up user `{name}`: {source}")]
    Lookup { name: String, source: nix::Error },
    #[error(
        "cannot run commands as `{name}`: the agent runs as uid {agent_uid}, and only root can switch users"
    )]
    NotRoot { name: String, agent_uid: u32 },
}

impl IdentityError {
    /// Whether the caller asked for something impossible (a 400) rather than
    /// the guest failing to answer (a 500).
    pub fn is_client_error(&self) -> bool {
        !matches!(self, IdentityError::Lookup { .. })
    }
}

impl Identity {
    pub fn lookup(name: &str) -> Result<Identity, IdentityError> {
        if name.is_empty() || name.contains('\0') || name.contains('/') {
            return Err(IdentityError::BadName(name.to_owned()));
        }
        let user = User::from_name(name)
            .map_err(|source| IdentityError::Lookup {
                name: name.to_owned(),
                source,
            })?
            .ok_or_else(|| IdentityError::Unknown(name.to_owned()))?;
        let me = nix::unistd::geteuid();
        if !me.is_root() && me != user.uid {
            return Err(IdentityError::NotRoot {
                name: name.to_owned(),
                agent_uid: me.as_raw(),
            });
        }
        let groups = match CString::new(name) {
            Ok(cname) => nix::unistd::getgrouplist(&cname, user.gid).map_err(|source| {
                IdentityError::Lookup {
                    name: name.to_owned(),
                    source,
                }
            })?,
            Err(_) => return Err(IdentityError::BadName(name.to_owned())),
        };
        Ok(Identity {
            name: user.name,
            uid: user.uid,
            gid: user.gid,
            groups,
            home: user.dir,
            shell: user.shell,
        })
    }

    /// [`Identity::lookup`] behind a cache that is kept only while
    /// `/etc/passwd` and `/etc/group` are unchanged (inode, size, mtime),
    /// so a user a lab creates is seen at once. Two `stat`s instead of
    /// musl reading and parsing both files (and asking for an nscd first):
    /// ~85 µs of every exec's critical path on the benchmark machine. With
    /// an nscd running (which musl consults before the files) nothing is
    /// cached.
    /// Shared, not copied: an exec reads it and drops it.
    pub fn cached(name: &str) -> Result<Arc<Identity>, IdentityError> {
        type Users = HashMap<String, Arc<Identity>>;
        static CACHE: Mutex<Option<(Stamps, Users)>> = Mutex::new(None);
        let Some(stamps) = Stamps::now() else {
            return Identity::lookup(name).map(Arc::new);
        };
        {
            let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, users)) = cache.as_ref()
                && *at == stamps
                && let Some(id) = users.get(name)
            {
                return Ok(id.clone());
            }
        }
        let id = Arc::new(Identity::lookup(name)?);
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        match cache.as_mut() {
            Some((at, users)) if *at == stamps && users.len() < 256 => {
                users.insert(name.to_owned(), id.clone());
            }
            _ => *cache = Some((stamps, HashMap::from([(name.to_owned(), id.clone())]))),
        }
        Ok(id)
    }

    /// Whether spawning needs setgroups/setgid/setuid. As root we always
    /// switch, even to root, so the child gets exactly the user's groups and
    /// none of the agent's. Not as root, `lookup` only allows ourselves.
    pub fn needs_switch(&self) -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// The `PATH` login(1) would set; the login profile may change it.
    pub fn default_path(&self) -> &'static str {
        if self.uid.is_root() {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        } else {
            "/usr/local/bin:/usr/bin:/bin:/usr/games"
        }
    }
}

/// What identifies a version of the user databases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamps([(u64, u64, u64, i64, i64); 2]);

impl Stamps {
    /// `None` when a file cannot be stat'ed or an nscd answers lookups.
    fn now() -> Option<Stamps> {
        if std::fs::symlink_metadata("/var/run/nscd/socket").is_ok() {
            return None;
        }
        let stamp = |path: &str| {
            std::fs::metadata(path)
                .ok()
                .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
        };
        Some(Stamps([stamp("/etc/passwd")?, stamp("/etc/group")?]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_resolves() {
        let id = Identity::lookup("root").unwrap();
        assert!(id.uid.is_root());
        assert_eq!(id.home, PathBuf::from("/root"));
    }

    #[test]
    fn cached_lookups_agree_and_unknown_users_stay_unknown() {
        let a = Identity::cached("root").unwrap();
        let b = Identity::cached("root").unwrap();
        assert_eq!((a.uid, a.gid, &a.home), (b.uid, b.gid, &b.home));
        assert_eq!(a.groups, Identity::lookup("root").unwrap().groups);
        assert!(Identity::cached("no-such-user-lab-agent").is_err());
        assert!(Identity::cached("no-such-user-lab-agent").is_err());
    }

    #[test]
    fn unknown_user_is_a_client_error() {
        let err = Identity::lookup("no-such-user-lab-agent").unwrap_err();
        assert!(err.is_client_error());
        assert!(
            err.to_string()
                .contains("unknown user `no-such-user-lab-agent`")
        );
        assert!(Identity::lookup("").unwrap_err().is_client_error());
        assert!(Identity::lookup("a/b").unwrap_err().is_client_error());
    }
}
