//! `timeline_distribution_json`, `timeline_svg`: `labctl timeline` as
//! functions. They read answers with the client library's `Answers` and
//! sum them up with its `distribution`, as the verb does, so a backend gets
//! the figures (and the picture) `labctl timeline --json` (`--svg`) gives
//! for the same answers.

use lab_agent_client::{Answers, distribution, timeline};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn read(text: &str) -> PyResult<Answers> {
    let mut answers = Answers::default();
    answers
        .read(text)
        .map_err(|e| PyValueError::new_err(format!("the answers cannot be read: {e}")))?;
    Ok(answers)
}

/// The distribution's JSON (`labctl timeline --json`'s object) of the
/// answers in `text` (JSON documents: answers, `labctl wait --json`
/// outputs, arrays of either), and the malformed backend stamps found, as
/// `(document, stamp)`.
#[pyfunction]
pub fn timeline_distribution_json(text: &str) -> PyResult<(String, Vec<(usize, &'static str)>)> {
    let answers = read(text)?;
    let d = distribution(&answers.preparations);
    Ok((answers.to_json(&d).to_string(), answers.malformed_stamps))
}

/// The SVG picture `labctl timeline --svg` draws of the same answers.
#[pyfunction]
pub fn timeline_svg(text: &str) -> PyResult<String> {
    let answers = read(text)?;
    Ok(timeline::svg(
        &distribution(&answers.preparations),
        answers.answers,
    ))
}
