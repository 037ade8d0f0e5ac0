//! The one way the project makes a temp dir (labctl's `try`, the qemu run
//! dirs, the tests and the bench): `tempfile`'s, so the name is random and
//! the directory is created exclusively — never a pre-existing one someone
//! else made — with its mode set at creation, before anything (a token) is
//! written into it.

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt;

/// A fresh directory `PREFIX-XXXXXX` in the system's temp dir with `mode`
/// (less the umask); removed when the result is dropped, unless kept with
/// [`tempfile::TempDir::keep`].
pub fn create(prefix: &str, mode: u32) -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("{prefix}-"))
        .permissions(Permissions::from_mode(mode))
        .tempdir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_private_and_removed() {
        let a = create("labctl-tempdir-test", 0o700).unwrap();
        let b = create("labctl-tempdir-test", 0o700).unwrap();
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let path = a.path().to_owned();
        drop(a);
        assert!(!path.exists());
    }
}
