//! `Lab.load(path)`: the `lab.toml` model of `lab-agent-proto`, with its
//! validation, for `Client.grade` and `render_secret`.

use crate::error::{LabError, plain};
use lab_agent_proto::lab;
use pyo3::prelude::*;
use std::path::PathBuf;

/// A lab loaded from its folder (`lab.toml`), validated as `labctl` does.
#[pyclass(frozen, module = "lab_agent")]
#[derive(Debug)]
pub struct Lab {
    pub inner: lab::Lab,
}

#[pymethods]
impl Lab {
    /// Loads and validates `DIR/lab.toml`; raises `LabError` naming the
    /// file, the field and the fix.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Lab> {
        match lab::Lab::load(&path) {
            Ok(inner) => Ok(Lab { inner }),
            Err(e) => {
                let hint = e.hint().map(str::to_owned);
                Err(plain(py, LabError::new_err(e.to_string()), hint))
            }
        }
    }

    /// `name` from lab.toml.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// The lab's folder.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.inner.dir.clone()
    }

    /// The checks' names, in order.
    #[getter]
    fn check_names(&self) -> Vec<String> {
        self.inner.checks.iter().map(|c| c.name.clone()).collect()
    }

    /// The sum of every check's points.
    #[getter]
    fn max_score(&self) -> u64 {
        self.inner.max_score()
    }

    /// `[readiness] timeout_secs`: how long to wait for the VM from its
    /// start to ready (default 150): the deadline for `wait_ready`.
    #[getter]
    fn readiness_timeout_secs(&self) -> u64 {
        self.inner.readiness.timeout_secs
    }

    /// `[readiness] min_root_bytes`: the root filesystem the lab needs, or
    /// `None` for any size.
    #[getter]
    fn min_root_bytes(&self) -> Option<u64> {
        self.inner.readiness.min_root_bytes
    }

    /// `[readiness] on_small_root`: what a root under `min_root_bytes`
    /// does, `"warn"` (ready, flagged, a banner for the student; the
    /// default) or `"fail"`.
    #[getter]
    fn on_small_root(&self) -> &'static str {
        self.inner.readiness.on_small_root.as_str()
    }

    /// `[[vms]]`: the names of the session's VMs, in order; empty for a
    /// lab of one VM.
    #[getter]
    fn vm_names(&self) -> Vec<String> {
        self.inner.vms.iter().map(|v| v.name.clone()).collect()
    }

    /// Each check's VM, by check name (`None` in a lab of one VM).
    #[getter]
    fn check_vms(&self) -> Vec<(String, Option<String>)> {
        let checks = self.inner.checks.iter();
        checks.map(|c| (c.name.clone(), c.vm.clone())).collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "Lab(name={:?}, dir={:?}, checks={})",
            self.inner.name,
            self.inner.dir,
            self.inner.checks.len()
        )
    }
}
