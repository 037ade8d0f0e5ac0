//! The NoCloud seed: an ISO9660 volume labelled `cidata` holding
//! `user-data` and `meta-data` (and, for a VM of a session,
//! `network-config` and `vendor-data`: `lan.rs`), attached as a read-only
//! virtio disk. This is
//! what `cloud-localds` makes (with the same tool underneath); cloud-init
//! finds it by its label.

use super::{QemuError, run, sanitize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// ISO makers that take `genisoimage`'s arguments, in order of preference.
const ISO_TOOLS: &[&str] = &["genisoimage", "mkisofs", "xorrisofs"];

/// `meta-data` naming the instance and the guest's hostname. A new
/// `instance_id` makes cloud-init treat the boot as a first boot.
pub fn meta_data(instance_id: &str, hostname: &str) -> String {
    format!("instance-id: {instance_id}\nlocal-hostname: {hostname}\n")
}

/// A valid hostname label from a machine's name.
pub fn hostname(name: &str) -> String {
    let h: String = sanitize(name).replace('_', "-").chars().take(63).collect();
    let h = h.trim_matches('-');
    if h.is_empty() {
        "labvm".into()
    } else {
        h.to_ascii_lowercase()
    }
}

/// The arguments that make `iso` from `files` in the current directory.
pub fn iso_args(iso: &Path, files: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-quiet".into(),
        "-output".into(),
        iso.display().to_string(),
        "-volid".into(),
        "cidata".into(),
        "-joliet".into(),
        "-rock".into(),
    ];
    args.extend(files.iter().map(|f| (*f).to_owned()));
    args
}

/// Writes `user-data`, `meta-data` and `extra` (name, content) into
/// `seed_dir` (mode 0600: the user-data holds the token) and makes the
/// seed image `iso` from them.
pub fn write(
    seed_dir: &Path,
    iso: &Path,
    user_data: &[u8],
    meta_data: &str,
    extra: &[(String, Vec<u8>)],
) -> Result<(), QemuError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::create_dir_all(seed_dir)
        .map_err(|e| QemuError::io(format!("create `{}`", seed_dir.display()), e))?;
    let files: Vec<(&str, &[u8])> = [
        ("user-data", user_data),
        ("meta-data", meta_data.as_bytes()),
    ]
    .into_iter()
    .chain(extra.iter().map(|(n, d)| (n.as_str(), d.as_slice())))
    .collect();
    for &(name, data) in &files {
        let path = seed_dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(data))
            .map_err(|e| QemuError::io(format!("write `{}`", path.display()), e))?;
    }
    let tool = iso_tool()?;
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    run(Command::new(&tool)
        .args(iso_args(iso, &names))
        .current_dir(seed_dir))
}

/// The first ISO maker on `PATH`.
fn iso_tool() -> Result<PathBuf, QemuError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ISO_TOOLS
        .iter()
        .flat_map(|tool| std::env::split_paths(&path).map(move |dir| dir.join(tool)))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            QemuError::Missing(format!(
                "none of {} is installed, so the NoCloud seed cannot be made \
                 (on Debian: `apt-get install genisoimage`)",
                ISO_TOOLS
                    .iter()
                    .map(|t| format!("`{t}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_are_valid_labels() {
        assert_eq!(hostname("vm_boot 0"), "vm-boot-0");
        assert_eq!(hostname("--"), "labvm");
        assert_eq!(hostname(&"x".repeat(100)).len(), 63);
        assert_eq!(hostname("Hello-Lab"), "hello-lab");
    }

    #[test]
    fn meta_data_names_instance_and_host() {
        assert_eq!(
            meta_data("try-1", "hello-lab"),
            "instance-id: try-1\nlocal-hostname: hello-lab\n"
        );
    }

    #[test]
    fn the_seed_is_labelled_cidata() {
        let args = iso_args(Path::new("/d/seed.iso"), &["user-data", "meta-data"]);
        assert!(
            args.windows(2).any(|w| w == ["-volid", "cidata"]),
            "{args:?}"
        );
        assert!(args.windows(2).any(|w| w == ["-output", "/d/seed.iso"]));
        assert!(args.ends_with(&["user-data".into(), "meta-data".into()]));
    }
}
