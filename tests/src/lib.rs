//! Test-only package: see `tests/`.

pub mod elf;
pub mod hostile;
pub mod image_tools;
pub mod local;
pub mod pydeps;
pub mod relay;
pub mod vm;
