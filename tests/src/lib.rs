//! Test-only package: see `tests/`.

pub mod local;
pub mod vm;
