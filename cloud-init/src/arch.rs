//! The machine a lab VM runs on. A payload is for one architecture: the
//! agent in it is a static binary for that machine, and the serial console
//! the web terminal attaches to has that machine's name. The backend knows
//! the node's architecture when it renders the Secret.

use std::fmt;
use std::str::FromStr;

/// A lab VM's architecture, named as Kubernetes (`kubernetes.io/arch`) and
/// Debian name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Arch {
    /// x86_64: KubeVirt's `q35` machine.
    #[default]
    Amd64,
    /// aarch64: KubeVirt's `virt` machine.
    Arm64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::Amd64, Arch::Arm64];

    /// `amd64`, `arm64`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// What `uname -m` says in such a guest.
    pub fn uname(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }

    /// The ELF header's `e_machine` of a binary for it.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::Amd64 => 62,  // EM_X86_64
            Arch::Arm64 => 183, // EM_AARCH64
        }
    }

    /// The architecture whose binaries have this `e_machine`.
    pub fn from_elf_machine(machine: u16) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.elf_machine() == machine)
    }

    /// The Rust target the static agent is built for
    /// (`packaging/build-agent.sh --arch NAME`).
    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-unknown-linux-musl",
            Arch::Arm64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The serial console the platform's web terminal attaches to: the
    /// 16550 UART of x86 machines, the PL011 of arm64 `virt`.
    pub fn serial_console(self) -> &'static str {
        match self {
            Arch::Amd64 => "ttyS0",
            Arch::Arm64 => "ttyAMA0",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An architecture name that is not one of [`Arch::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown architecture `{0}`: use amd64 (x86_64) or arm64 (aarch64)")]
pub struct UnknownArch(pub String);

/// `amd64`/`arm64`, or the kernel's names `x86_64`/`aarch64`.
impl FromStr for Arch {
    type Err = UnknownArch;

    fn from_str(s: &str) -> Result<Arch, UnknownArch> {
        Arch::ALL
            .into_iter()
            .find(|a| s == a.name() || s == a.uname())
            .ok_or_else(|| UnknownArch(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Arch::ALL {
            assert_eq!(a.name().parse::<Arch>(), Ok(a));
            assert_eq!(a.uname().parse::<Arch>(), Ok(a));
            assert_eq!(Arch::from_elf_machine(a.elf_machine()), Some(a));
        }
        assert_eq!(Arch::default(), Arch::Amd64);
        let err = "x86".parse::<Arch>().unwrap_err().to_string();
        assert!(err.contains("`x86`") && err.contains("amd64"), "{err}");
        assert_eq!(Arch::from_elf_machine(40), None); // EM_ARM (32-bit)
    }
}
