//! The generator's ELF check (`agent_bin::check`) on fake agents: static or
//! dynamic, truncated, the wrong architecture.

use lab_agent_cloudinit::Arch;
use lab_agent_cloudinit::agent_bin::{Linkage, check};
use lab_agent_tests::elf::fake_elf;

#[test]
fn static_and_dynamic_fakes() {
    let amd64 = Linkage::Static(Arch::Amd64);
    assert_eq!(check(&fake_elf(false, b"x"), amd64), Ok(()));
    let err = check(&fake_elf(true, b"x"), amd64).unwrap_err();
    assert!(err.contains("dynamically linked"), "{err}");
    assert_eq!(check(&fake_elf(true, b"x"), Linkage::Any), Ok(()));
}

#[test]
fn not_elf_or_truncated() {
    assert!(
        check(b"#!/bin/sh\n", Linkage::Any)
            .unwrap_err()
            .contains("not an ELF")
    );
    let elf = fake_elf(false, b"");
    assert!(
        check(&elf[..40], Linkage::Any)
            .unwrap_err()
            .contains("truncated")
    );
    let mut arm = fake_elf(false, b"");
    arm[0x12] = 183; // EM_AARCH64
    assert_eq!(
        check(&arm, Linkage::Static(Arch::Amd64)).unwrap_err(),
        "it is built for arm64 (aarch64), and the lab VM is amd64 (x86_64)"
    );
    assert_eq!(check(&arm, Linkage::Static(Arch::Arm64)), Ok(()));
    assert!(
        check(&fake_elf(false, b""), Linkage::Static(Arch::Arm64))
            .unwrap_err()
            .contains("built for amd64 (x86_64), and the lab VM is arm64")
    );
}
