//! The guests by name, and which of them `LAB_AGENT_VM_GUESTS` selects.
//! Std only: `build.rs` compiles this file too (`#[path]`), to turn the
//! selection into `vm_guest_left_out="NAME"` cfgs, so that a VM test for a
//! guest left out is reported as ignored, not as a pass — one definition
//! of the names and of the default set for both.

/// The guests the VM tests boot: the Debian releases whose cloud-init and
/// systemd generations the platform meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuestOs {
    /// bookworm: cloud-init 22.4 (one process per stage, the classic units),
    /// systemd 252 (no `DelegateSubgroup=`), kernel 6.1.
    Debian12,
    /// trixie: cloud-init 25.1 (all stages in `cloud-init-main.service`;
    /// warnings make a "degraded" boot), systemd 257 (cgroup v2 only,
    /// `DelegateSubgroup=`, `.control` subgroups), kernel 6.12.
    Debian13,
    /// The same trixie for arm64, on qemu's `virt` machine (KubeVirt's
    /// arm64 machine) under TCG: the arm64 payload's agent, console
    /// `ttyAMA0`. Not in [`GuestOs::ALL`]: each boot emulates another
    /// architecture, minutes more than the amd64 guests' TCG boots, so it
    /// runs only when `LAB_AGENT_VM_GUESTS` names it (tests/vm/README.md).
    Debian13Arm64,
}

impl GuestOs {
    /// The guests the VM tests boot unless `LAB_AGENT_VM_GUESTS` says
    /// otherwise (CI boots these).
    pub const ALL: [GuestOs; 2] = [GuestOs::Debian12, GuestOs::Debian13];
    /// Every guest the build script knows.
    pub const KNOWN: [GuestOs; 3] = [GuestOs::Debian12, GuestOs::Debian13, GuestOs::Debian13Arm64];

    /// The build script's `--guest` name, also used in VM names, logs and
    /// the `vm_guest_left_out` cfg's values.
    pub fn name(self) -> &'static str {
        match self {
            GuestOs::Debian12 => "debian-12",
            GuestOs::Debian13 => "debian-13",
            GuestOs::Debian13Arm64 => "debian-13-arm64",
        }
    }

    /// The guests a value of `LAB_AGENT_VM_GUESTS` (comma-separated names)
    /// selects; unset or blank: [`GuestOs::ALL`]. A name no guest has is an
    /// error, not an empty selection: a typo must not turn every VM test
    /// into an ignored one.
    pub fn selection(var: Option<&str>) -> Result<Vec<GuestOs>, String> {
        let Some(list) = var.filter(|l| !l.trim().is_empty()) else {
            return Ok(GuestOs::ALL.to_vec());
        };
        list.split(',')
            .map(str::trim)
            .map(|n| {
                GuestOs::KNOWN
                    .into_iter()
                    .find(|g| g.name() == n)
                    .ok_or_else(|| {
                        format!(
                            "LAB_AGENT_VM_GUESTS names `{n}`, not one of debian-12, debian-13, \
                             debian-13-arm64"
                        )
                    })
            })
            .collect()
    }

    /// Whether `LAB_AGENT_VM_GUESTS` asks for this guest ([`GuestOs::selection`]).
    /// A test for a guest left out is `#[ignore]`d at build time (`build.rs`
    /// reads the same variable); this is the run's own check, so that such a
    /// test run anyway (`--ignored`) fails saying why instead of passing.
    pub fn selected(self) -> bool {
        let var = std::env::var("LAB_AGENT_VM_GUESTS").ok();
        GuestOs::selection(var.as_deref())
            .unwrap_or_else(|e| panic!("{e}"))
            .contains(&self)
    }
}

impl std::fmt::Display for GuestOs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::GuestOs;

    #[test]
    fn the_selection_defaults_to_the_amd64_guests_and_refuses_unknown_names() {
        assert_eq!(GuestOs::selection(None).unwrap(), GuestOs::ALL);
        assert_eq!(GuestOs::selection(Some(" ")).unwrap(), GuestOs::ALL);
        assert_eq!(
            GuestOs::selection(Some("debian-13, debian-13-arm64")).unwrap(),
            [GuestOs::Debian13, GuestOs::Debian13Arm64]
        );
        let err = GuestOs::selection(Some("debian-13,debian-14")).unwrap_err();
        assert!(err.contains("`debian-14`"), "{err}");
    }
}
