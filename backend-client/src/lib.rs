//! Async client for lab-agent, and the `labctl` command line.
//!
//! # Layout
//! - [`cli`]: `labctl`, one module per verb.

pub mod cli;
