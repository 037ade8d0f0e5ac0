//! Harness checks that need no boot. The harness's smoke boot (cloud-init
//! runs a tiny user-data to the end without errors, the forward carries
//! HTTP, ACPI power-off works) is the minimal-payload baseline of the
//! boot-cost benchmark in `vm_lifecycle/boot_cost.rs` (`#[ignore]`d, not
//! in CI); in CI every scenario boots through the harness or `labctl try`,
//! and `lifecycle` powers its VM off by ACPI.

use lab_agent_tests::vm::{BootOptions, GuestOs, Vm, VmImage};

/// Bad qemu arguments fail fast and say why, instead of hanging a test.
#[test]
fn qemu_failure_is_reported_with_its_stderr() {
    let image = VmImage::ensure(GuestOs::Debian12).expect("the guest image");
    let mut opts = BootOptions::new("vm-bad-args", "#cloud-config\n");
    opts.extra_qemu_args = vec!["-no-such-option".into()];
    let err = Vm::boot(&image, opts).expect_err("qemu must refuse");
    let msg = err.to_string();
    assert!(msg.contains("no-such-option"), "{msg}");
}
