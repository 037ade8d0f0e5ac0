//! `lab_agent._native`: the Rust half of the `lab_agent` Python package.
//!
//! One implementation, two languages: every call here is
//! `lab-agent-client` (or, for `render_secret` and `render_manifests`, the
//! generator's `lab_payload::render` and `lab_manifest::render`)
//! run on one tokio runtime per process. Answers cross into Python as the
//! JSON the Rust types serialize to, so `Report.to_json()` is `labctl grade
//! --json` by construction; the package's Python modules
//! (`lab_agent/_*.py`) turn them into typed objects.
//!
//! # Layout
//! - `client.rs` — `Client`, blocking methods (GIL released while waiting)
//!   and `a*` methods returning asyncio awaitables; `wait_all`.
//! - `each.rs` — `WaitEach`, a fleet's waits read VM by VM as each ends.
//! - `error.rs` — the exception hierarchy and the one mapping from
//!   `lab_agent_client::Error` to it.
//! - `lab.rs` — `Lab.load`.
//! - `manifest.rs` — `render_manifests` (`labctl render`: `render_vm`,
//!   `render_session`) and `golden_unusable_reason`.
//! - `render.rs` — `render_secret`.
//! - `stream.rs` — `ExecStream`, a streamed exec read event by event
//!   (blocking or asyncio); dropping or closing it ends the request.
//! - `timeline.rs` — `labctl timeline`'s distribution and picture of
//!   logged answers.
//! - `tasks.rs` — asyncio futures resolved from the runtime, blocking
//!   waits Ctrl-C interrupts, and the exit hook that keeps the runtime's
//!   threads away from a finalising interpreter.

use pyo3::prelude::*;

mod client;
mod each;
mod error;
mod lab;
mod manifest;
mod render;
mod stream;
mod tasks;
mod timeline;

/// The process's one tokio runtime, shared by blocking and asyncio calls
/// (pyo3-async-runtimes owns it, so its awaitables and `block_on` agree).
fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("EXEC_HAS_PROFILE", client::exec_has_profile())?;
    m.add(
        "DEFAULT_REQUEST_TIMEOUT",
        lab_agent_client::client::DEFAULT_REQUEST_TIMEOUT.as_secs_f64(),
    )?;
    m.add_class::<client::Client>()?;
    m.add_class::<lab::Lab>()?;
    m.add_class::<stream::ExecStream>()?;
    m.add_class::<render::Rendered>()?;
    m.add_class::<each::WaitEach>()?;
    m.add_function(wrap_pyfunction!(client::wait_all, m)?)?;
    m.add_function(wrap_pyfunction!(client::wait_all_async, m)?)?;
    m.add_function(wrap_pyfunction!(client::grade_all, m)?)?;
    m.add_function(wrap_pyfunction!(client::grade_all_async, m)?)?;
    m.add_function(wrap_pyfunction!(client::session_wait_ready, m)?)?;
    m.add_function(wrap_pyfunction!(client::session_wait_ready_async, m)?)?;
    m.add_function(wrap_pyfunction!(client::session_grade_json, m)?)?;
    m.add_function(wrap_pyfunction!(client::session_grade_json_async, m)?)?;
    m.add_function(wrap_pyfunction!(render::render_secret, m)?)?;
    m.add_class::<manifest::RenderedManifests>()?;
    m.add_function(wrap_pyfunction!(manifest::render_manifests, m)?)?;
    m.add_function(wrap_pyfunction!(manifest::golden_unusable_reason, m)?)?;
    m.add_function(wrap_pyfunction!(timeline::timeline_distribution_json, m)?)?;
    m.add_function(wrap_pyfunction!(timeline::timeline_svg, m)?)?;
    m.add_function(wrap_pyfunction!(client::_rust_exec_timings, m)?)?;
    tasks::register(m)?;
    error::register(m)
}
