//! The payload checked by validators we did not write: Debian's cloud-init
//! (the guest's version) and kubernetes-validate (the cluster's schemas),
//! plus `labctl secret` end to end.
//!
//! These tests need tools outside Cargo, and fail (never skip) without them:
//! Debian's cloud-init (the guest's version) and busybox, unpacked, and
//! `kubernetes-validate` in a virtualenv, all in the lab-agent cache
//! (`tests/pydeps.sh`, found through `lab_agent_tests::pydeps`); and root,
//! for the overlay chroot a delivery runs in (`support::deliver`).

mod agent_bin;
mod agent_disk;
mod cloud_init_schema;
mod kubernetes_validate;
mod kubevirt_session;
mod labctl_secret;
mod least_privilege;
mod round_trip;
mod support;
