//! Test-only package: see `tests/`.

pub mod local;
pub mod pydeps;
pub mod vm;
