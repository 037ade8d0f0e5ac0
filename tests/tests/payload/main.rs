//! The payload checked by validators we did not write: Debian's cloud-init
//! (the guest's version) and kubernetes-validate (the cluster's schemas),
//! plus `labctl secret` end to end.
//!
//! These tests need tools outside Cargo, and fail (never skip) without them:
//! - `cloud-init` (Debian package; `/usr/bin/python3` with `cloudinit` and
//!   `yaml` importable);
//! - `kubernetes-validate` (PyPI) on PATH.
//!
//! `support` says how to install each when it is missing.

mod cloud_init_schema;
mod kubernetes_validate;
mod labctl_secret;
mod least_privilege;
mod round_trip;
mod support;
