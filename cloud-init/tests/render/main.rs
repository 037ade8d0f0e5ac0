//! Tests of the pure renderer: snapshots of whole outputs, the Secret in
//! both formats, metadata and size errors. Validation by real cloud-init and
//! kubernetes-validate lives in `tests/tests/payload/` (lab-agent-tests).

mod disk;
mod parts;
mod secret;
mod snapshot;
mod support;
