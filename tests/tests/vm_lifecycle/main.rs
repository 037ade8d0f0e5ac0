//! The whole lifecycle in a real VM with real cloud-init: the payload
//! `labctl secret` renders (the real static agent, its unit, the lab), booted
//! by the cloud-init of Debian 12 and of Debian 13 (each scenario runs on
//! both: `NAME::debian_12`, `NAME::debian_13`) from a NoCloud seed, reached from the host only
//! through `labctl` and a loopback port forward.
//!
//! - [`lifecycle`]: hello-lab on one VM, step by step: first boot with a slow
//!   setup, grading, a `kill -9` of the agent, a wrong token, the student's
//!   reboot (scenarios 1, 4, 5, 3) and the serial console's root autologin.
//! - [`boot_cost`]: the full hello-lab payload through `labctl try --kernel
//!   --keep`: ready, the student's step through the commands `try` printed,
//!   a reboot, ready again, `stop.sh`; no YAML load of cloud-init's (from
//!   its log) holds the payload's bulk. Its benchmark, `#[ignore]`d and not
//!   in CI, boots a minimal user-data beside it for the payload's boot cost
//!   (`… boot_cost::side_by_side -- --ignored --nocapture`).
//! - [`failing`]: a setup that fails, under `labctl try --kernel …` with a
//!   `labctl wait` beside it (scenario 2; `try`'s failure path).
//! - [`accel`]: the accelerator's fallback: a KVM trial of the real machine
//!   that fails (a kernel that never prints) falls back to TCG, within the
//!   grace; a guest that stays silent ends `labctl try` (exit 3).
//! - [`runaway`]: fork bombs, memory hogs, spinners and a full disk, as
//!   root and as the student: each costs its own command, readiness and
//!   grading stay right.
//! - [`try_vm`]: `labctl try --vm IMAGE` on a boot-sector image, an
//!   unreachable VM; argument errors.
//! - [`selftest`]: `labctl test examples/hello-lab --vm DISK` (Debian 12
//!   only): each check fails after setup, passes after the solve and in
//!   reverse order.
//! - [`golden`]: a lab needing more root than the image has (ready with
//!   the reason, the small-root banner in interactive shells only), then
//!   that VM's disk as the base of two fresh VMs (a booted golden): each
//!   says `booted_before` with evidence, under an id of its own.
//! - [`session`]: `examples/two-vm-lab` as the runner's `VmSession`, a
//!   guest per VM on one private network: ready, graded, its self-test
//!   holds, stopped without a trace (Debian 12 only; both slots).
//!
//! - [`agent_disk`]: the VM `labctl render --agent-from disk` describes,
//!   booted through the manifest's mapping (`lab_agent_tests::vm::manifest`):
//!   the agent from its containerDisk (serial `lab-agent`, both guests,
//!   over TCP and vsock) or its ConfigMap's ISO (label `LAB-AGENT`,
//!   Debian 13); another agent on the disk is named and never runs.
//! - [`manifest`]: `labctl render` run for the VM tests, and every kind of
//!   VM it writes mapped without a boot (or failing on the field it names).
//!
//! - [`vsock`]: hello-lab on a guest with a virtio-vsock device, reached
//!   over vsock (the device's hybrid socket, and the KubeVirt stand-in
//!   relaying to it): `--channel vsock` leaves nothing on TCP; the
//!   student's firewall and unplugged NIC cut TCP, not vsock; a reboot
//!   keeps it; exec round trips on each channel, side by side.
//!
//! - [`exec_bench`]: the exec benchmark inside a Debian 12 guest (floor,
//!   per-exec cgroup, session fallback, side by side) and from the host;
//!   `#[ignore]`d, not in CI
//!   (`… exec_bench::in_the_guest -- --ignored --nocapture`).
//!
//! `lifecycle` and `failing` also run on Debian 13 for arm64
//! (`NAME::debian_13_arm64`), reported as ignored unless
//! `LAB_AGENT_VM_GUESTS` names `debian-13-arm64` (not in CI:
//! tests/vm/README.md, "The arm64 guest").
//!
//! Two VMs at a time (the harness's slots; the boot-cost benchmark's two VMs
//! alone): the tests of this binary queue for them.
//! Each prints its figures (`--nocapture` shows them):
//! `cargo test -p lab-agent-tests --test vm_lifecycle -- --nocapture`.

#[macro_use]
mod support;
mod accel;
mod agent_disk;
mod boot_cost;
mod exec_bench;
mod failing;
mod golden;
mod lifecycle;
mod manifest;
mod runaway;
mod selftest;
mod session;
mod try_vm;
mod vsock;
