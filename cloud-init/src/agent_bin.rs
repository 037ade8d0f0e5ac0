//! Finding the `lab-agent` binary (feature `fs`): `labctl secret` and the
//! Python package's `render_secret` ship it into lab VMs, so
//! it must be a static executable for the VM's architecture
//! ([`Linkage::Static`]); `labctl try` runs it on this machine, where any
//! build will do ([`Linkage::Any`]).
//!
//! Where it looks, in order (the first usable one wins), with TARGET the
//! architecture's Rust target (`x86_64-unknown-linux-musl`,
//! `aarch64-unknown-linux-musl`):
//! 1. `--agent PATH` (if given, it must be usable: no fallback);
//! 2. `lab-agent` next to the running `labctl` (an installed pair);
//! 3. `../TARGET/agent/lab-agent` from `labctl`'s folder, i.e. the static
//!    build in the same target dir as `target/debug/labctl`;
//! 4. `target/TARGET/agent/lab-agent` in the source tree `labctl` was built
//!    from (`packaging/build-agent.sh --arch ARCH` puts it there).
//!
//! A caller that is not `labctl` (the Python package, whose executable is
//! the interpreter) looks as a `labctl` found on `PATH` would
//! ([`load_as_labctl`]).
//!
//! A candidate that exists but is unusable (a dynamic `target/debug/lab-agent`
//! when a static one is needed) is skipped, and the error lists every place
//! and why it did not do.

use crate::Arch;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The static build's path for `arch` relative to a Cargo target dir.
pub fn static_agent_in_target_dir(arch: Arch) -> PathBuf {
    Path::new(arch.rust_target()).join("agent/lab-agent")
}

/// What kind of binary the caller needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linkage {
    /// For lab VMs of this architecture: its machine, no program
    /// interpreter, no shared libraries.
    Static(Arch),
    /// For running on this machine (`labctl try` local mode): any ELF.
    Any,
}

/// A found agent and its bytes.
#[derive(Debug)]
pub struct AgentBinary {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentBinError {
    #[error("failed to read the agent `{}`", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{}` cannot be used as the agent: {problem}", path.display())]
    Unusable {
        path: PathBuf,
        problem: String,
        linkage: Linkage,
    },
    #[error("no usable lab-agent binary found; looked at:{}", list(tried))]
    NotFound {
        /// Each place looked at, and why it did not do.
        tried: Vec<(PathBuf, String)>,
        linkage: Linkage,
    },
}

impl AgentBinError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        self.hint_giving("`--agent PATH`")
    }

    /// [`AgentBinError::hint`] for a caller whose way to name the agent is
    /// `explicit` (Python's `agent_path=`).
    pub fn hint_giving(&self, explicit: &str) -> Option<String> {
        let build = |linkage: &Linkage| match linkage {
            Linkage::Static(Arch::Amd64) => format!(
                "run `packaging/build-agent.sh` to build the static agent, or pass {explicit}"
            ),
            Linkage::Static(arch) => format!(
                "run `packaging/build-agent.sh --arch {arch}` to build the static agent, or pass {explicit}"
            ),
            Linkage::Any => format!("run `cargo build -p lab-agent`, or pass {explicit}"),
        };
        match self {
            AgentBinError::Read { .. } => None,
            AgentBinError::Unusable { linkage, .. } | AgentBinError::NotFound { linkage, .. } => {
                Some(build(linkage))
            }
        }
    }
}

fn list(tried: &[(PathBuf, String)]) -> String {
    let mut out = String::new();
    for (path, why) in tried {
        let _ = write!(out, "\n  `{}`: {why}", path.display());
    }
    out
}

/// Finds the agent (see the module docs for the order) and reads it.
pub fn load(explicit: Option<&Path>, linkage: Linkage) -> Result<AgentBinary, AgentBinError> {
    let exe = std::env::current_exe().ok();
    load_as(exe.as_deref(), explicit, linkage)
}

/// [`load`] as the program `labctl` (a `labctl` on `PATH`) would, for a
/// caller that is not `labctl` (the Python package, whose executable is
/// the interpreter): the same places, the first two beside `labctl`. No
/// `labctl` (`None`): those two are listed as not looked at.
pub fn load_as_labctl(
    labctl: Option<&Path>,
    linkage: Linkage,
) -> Result<AgentBinary, AgentBinError> {
    let found = load_as(labctl, None, linkage);
    match (labctl, found) {
        (None, Err(AgentBinError::NotFound { mut tried, linkage })) => {
            tried.insert(
                0,
                (
                    PathBuf::from("labctl"),
                    "not on `PATH`, so nothing beside it was looked at".into(),
                ),
            );
            Err(AgentBinError::NotFound { tried, linkage })
        }
        (_, found) => found,
    }
}

fn load_as(
    program: Option<&Path>,
    explicit: Option<&Path>,
    linkage: Linkage,
) -> Result<AgentBinary, AgentBinError> {
    if let Some(path) = explicit {
        let bytes = read(path)?;
        check(&bytes, linkage).map_err(|problem| AgentBinError::Unusable {
            path: path.to_owned(),
            problem,
            linkage,
        })?;
        return Ok(AgentBinary {
            path: path.to_owned(),
            bytes,
        });
    }
    let mut tried = Vec::new();
    for path in candidates(program, linkage) {
        if tried.iter().any(|(p, _)| *p == path) {
            continue;
        }
        let why = match std::fs::read(&path) {
            Ok(bytes) => match check(&bytes, linkage) {
                Ok(()) => return Ok(AgentBinary { path, bytes }),
                Err(problem) => problem,
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".into(),
            Err(e) => e.to_string(),
        };
        tried.push((path, why));
    }
    Err(AgentBinError::NotFound { tried, linkage })
}

/// Like [`load`], for callers that run the binary rather than ship it.
pub fn find(explicit: Option<&Path>, linkage: Linkage) -> Result<PathBuf, AgentBinError> {
    load(explicit, linkage).map(|agent| agent.path)
}

/// A warning when `path` is a build in the source tree `labctl` was built
/// from and an agent source file changed after it: `try` would otherwise
/// test, and `secret` ship, yesterday's agent without a word (cargo rebuilds
/// `labctl`, never the agent beside it). `None` for a binary elsewhere (an
/// installed pair, `--agent`), or when nothing is newer.
pub fn stale_warning(path: &Path) -> Option<String> {
    let tree = normalize(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let source = newer_source(path, &tree)?;
    Some(format!(
        "the agent `{}` is older than `{}`: rebuild it (`packaging/build-agent.sh` for the static one, `cargo build -p lab-agent`) or pass `--agent PATH`",
        path.display(),
        source.display()
    ))
}

/// The newest file of the agent's sources (`agent/`, `proto/`) in `tree`
/// changed after `path`, if `path` is under `tree/target`.
fn newer_source(path: &Path, tree: &Path) -> Option<PathBuf> {
    if !normalize(path).starts_with(tree.join("target")) {
        return None;
    }
    let built = std::fs::metadata(path).ok()?.modified().ok()?;
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut dirs: Vec<PathBuf> = vec![tree.join("agent/src"), tree.join("proto/src")];
    let mut files: Vec<PathBuf> =
        vec![tree.join("agent/Cargo.toml"), tree.join("proto/Cargo.toml")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(entry.path()),
                Ok(t) if t.is_file() => files.push(entry.path()),
                _ => {}
            }
        }
    }
    for file in files {
        let Some(modified) = std::fs::metadata(&file).and_then(|m| m.modified()).ok() else {
            continue;
        };
        if modified > built && newest.as_ref().is_none_or(|(t, _)| modified > *t) {
            newest = Some((modified, file));
        }
    }
    newest.map(|(_, file)| file)
}

/// The implicit places, in order.
fn candidates(program: Option<&Path>, linkage: Linkage) -> Vec<PathBuf> {
    // `try`'s local mode takes any build, the amd64 one as before.
    let in_target_dir = static_agent_in_target_dir(match linkage {
        Linkage::Static(arch) => arch,
        Linkage::Any => Arch::Amd64,
    });
    let mut out = Vec::new();
    if let Some(dir) = program.and_then(|exe| exe.parent().map(Path::to_owned)) {
        out.push(dir.join("lab-agent"));
        if let Some(target) = dir.parent() {
            out.push(target.join(&in_target_dir));
        }
    }
    let source_tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    out.push(normalize(&source_tree.join("target").join(&in_target_dir)));
    out
}

/// `a/b/../c` → `a/c`, lexically (for readable messages and deduplication).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

fn read(path: &Path) -> Result<Vec<u8>, AgentBinError> {
    std::fs::read(path).map_err(|source| AgentBinError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Checks that `bytes` is an ELF executable of the needed kind; `Err` says
/// what it is instead.
pub fn check(bytes: &[u8], linkage: Linkage) -> Result<(), String> {
    let elf = Elf::parse(bytes)?;
    let Linkage::Static(arch) = linkage else {
        return Ok(());
    };
    if elf.machine != arch.elf_machine() {
        let built_for = Arch::from_elf_machine(elf.machine).map_or_else(
            || format!("ELF machine {:#x}", elf.machine),
            |a| format!("{a} ({})", a.uname()),
        );
        return Err(format!(
            "it is built for {built_for}, and the lab VM is {arch} ({})",
            arch.uname()
        ));
    }
    if elf.interpreter {
        return Err("it is dynamically linked (it has a program interpreter); \
                    lab VMs need the static musl build"
            .into());
    }
    if elf.needs_libraries {
        return Err("it needs shared libraries; lab VMs need the static musl build".into());
    }
    Ok(())
}

const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NEEDED: u64 = 1;

/// What the static check needs from an ELF file, read from its program
/// headers (what the kernel and the loader look at), not its sections,
/// which a stripped binary may lack.
struct Elf {
    machine: u16,
    interpreter: bool,
    needs_libraries: bool,
}

impl Elf {
    fn parse(b: &[u8]) -> Result<Elf, String> {
        if b.get(..4) != Some(b"\x7fELF") {
            return Err("it is not an ELF executable".into());
        }
        // Only 64-bit little-endian: the one kind we build and ship.
        if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
            return Err("it is not a 64-bit little-endian ELF file".into());
        }
        let truncated = || "it is a truncated ELF file".to_string();
        let e_type = u16_at(b, 0x10).ok_or_else(truncated)?;
        if e_type != 2 && e_type != 3 {
            return Err(format!(
                "it is an ELF file of type {e_type}, not an executable"
            ));
        }
        let machine = u16_at(b, 0x12).ok_or_else(truncated)?;
        let phoff = u64_at(b, 0x20).ok_or_else(truncated)?;
        let phentsize = u16_at(b, 0x36).ok_or_else(truncated)? as u64;
        let phnum = u16_at(b, 0x38).ok_or_else(truncated)? as u64;
        let mut elf = Elf {
            machine,
            interpreter: false,
            needs_libraries: false,
        };
        for i in 0..phnum {
            let ph = phoff + i * phentsize;
            let p_type = u32_at(b, ph).ok_or_else(truncated)?;
            match p_type {
                PT_INTERP => elf.interpreter = true,
                PT_DYNAMIC => {
                    let offset = u64_at(b, ph + 8).ok_or_else(truncated)?;
                    let size = u64_at(b, ph + 0x20).ok_or_else(truncated)?;
                    let mut at = offset;
                    while at + 16 <= offset + size {
                        match u64_at(b, at).ok_or_else(truncated)? {
                            0 => break, // DT_NULL
                            DT_NEEDED => elf.needs_libraries = true,
                            _ => {}
                        }
                        at += 16;
                    }
                }
                _ => {}
            }
        }
        Ok(elf)
    }
}

fn field<const N: usize>(b: &[u8], at: u64) -> Option<[u8; N]> {
    let at = usize::try_from(at).ok()?;
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u16_at(b: &[u8], at: u64) -> Option<u16> {
    field(b, at).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], at: u64) -> Option<u32> {
    field(b, at).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: u64) -> Option<u64> {
    field(b, at).map(u64::from_le_bytes)
}

/// The architecture an agent binary is built for, when it is an ELF file of
/// a known machine: what `--agent PATH` means when no `--arch` is given.
pub fn arch_of(path: &Path) -> Result<Option<Arch>, AgentBinError> {
    let bytes = read(path)?;
    Ok(Elf::parse(&bytes)
        .ok()
        .and_then(|elf| Arch::from_elf_machine(elf.machine)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_older_than_its_source_is_stale() {
        let tree = tempfile::Builder::new()
            .prefix("labctl-stale-")
            .tempdir()
            .unwrap();
        let src = tree.path().join("agent/src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("main.rs"), "fn main() {}").unwrap();
        let bin = tree.path().join("target/release/lab-agent");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        let f = std::fs::File::create(&bin).unwrap();
        let hour = std::time::Duration::from_secs(3600);
        f.set_modified(std::time::SystemTime::now() - hour).unwrap();
        assert_eq!(newer_source(&bin, tree.path()), Some(src.join("main.rs")));
        f.set_modified(std::time::SystemTime::now() + hour).unwrap();
        assert_eq!(newer_source(&bin, tree.path()), None);
        // Outside the tree's target/: someone else's build, not judged.
        let elsewhere = tree.path().join("bin/lab-agent");
        std::fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
        std::fs::File::create(&elsewhere)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - hour)
            .unwrap();
        assert_eq!(newer_source(&elsewhere, tree.path()), None);
    }

    /// The system's own shell is dynamically linked on every distribution
    /// this runs on; the real ELF parser must say so.
    #[test]
    fn a_real_dynamic_binary_is_refused() {
        let Ok(bytes) = std::fs::read("/bin/sh") else {
            return;
        };
        let err = check(&bytes, Linkage::Static(Arch::Amd64)).unwrap_err();
        assert!(err.contains("dynamic"), "{err}");
    }

    #[test]
    fn explicit_path_has_no_fallback() {
        let err = load(Some(Path::new("/nonexistent/lab-agent")), Linkage::Any).unwrap_err();
        assert!(matches!(err, AgentBinError::Read { .. }), "{err:?}");
        let err = load(Some(Path::new("/bin/sh")), Linkage::Static(Arch::Amd64)).unwrap_err();
        assert!(
            err.to_string().contains("cannot be used as the agent"),
            "{err}"
        );
        assert!(err.hint().unwrap().contains("packaging/build-agent.sh"));
        let err = load(Some(Path::new("/bin/sh")), Linkage::Static(Arch::Arm64)).unwrap_err();
        assert!(
            err.hint()
                .unwrap()
                .contains("packaging/build-agent.sh --arch arm64")
        );
    }

    #[test]
    fn normalizes_parent_components() {
        assert_eq!(
            normalize(Path::new("/a/b/../target/x")),
            Path::new("/a/target/x")
        );
    }
}
