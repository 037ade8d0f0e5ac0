//! The `/v1/ready` answers a backend logged (or `labctl wait --json`
//! outputs), read into [`Preparation`]s, and the report's JSON.

use super::{BackendTimes, Distribution, Preparation};
use lab_agent_proto::lifecycle::Timeline;
use serde::Deserialize as _;
use serde_json::{Value, json};

/// The answers read: how many, and the preparations among them (the
/// answers with a timeline, each with the backend's stamps beside it).
#[derive(Debug, Default)]
pub struct Answers {
    /// Every answer read, with a timeline or without.
    pub answers: usize,
    pub preparations: Vec<Preparation>,
    /// Answers whose `backend` stamps were there but not RFC 3339 times
    /// (each such stamp is left out of every phase), by document: a reader
    /// is told, not misled by a phase that silently counts fewer VMs.
    pub malformed_stamps: Vec<(usize, &'static str)>,
}

/// Why a text is not answers; the index counts documents from 1.
#[derive(Debug, thiserror::Error)]
pub enum AnswersError {
    #[error("not JSON at line {line}")]
    NotJson {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("document {index}: the timeline is malformed: {source}")]
    MalformedTimeline {
        index: usize,
        source: serde_json::Error,
    },
    #[error("document {index}: the backend's stamps are malformed: {source}")]
    MalformedBackend {
        index: usize,
        source: serde_json::Error,
    },
    #[error("document {index}: a {kind} is no `/v1/ready` answer")]
    NotAnAnswer { index: usize, kind: &'static str },
}

impl Answers {
    /// Adds every answer in `text`: a stream of JSON documents (one per
    /// line, or pretty-printed), each an answer, a `labctl wait --json`
    /// output (its VMs' answers) or an array of either. An answer may
    /// carry the backend's own stamps as `backend` ([`BackendTimes`]).
    pub fn read(&mut self, text: &str) -> Result<(), AnswersError> {
        let docs = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        for (doc, index) in docs.zip(1..) {
            let doc = doc.map_err(|source| AnswersError::NotJson {
                line: source.line(),
                source,
            })?;
            self.add(&doc, index)?;
        }
        Ok(())
    }

    /// How many answers carry no timeline (an agent that predates it, or
    /// a VM that never answered).
    pub fn without_timeline(&self) -> usize {
        self.answers - self.preparations.len()
    }

    fn add(&mut self, doc: &Value, index: usize) -> Result<(), AnswersError> {
        match doc {
            Value::Array(items) => items.iter().try_for_each(|item| self.add(item, index)),
            Value::Object(o) => match o.get("vms") {
                // `labctl wait --json`: each VM's last answer, `null` for a
                // VM that never answered (counted: it has no timeline).
                Some(Value::Array(vms)) => vms.iter().try_for_each(|vm| match vm.get("ready") {
                    None | Some(Value::Null) => {
                        self.answers += 1;
                        Ok(())
                    }
                    Some(answer) => self.add(answer, index),
                }),
                _ => {
                    self.answers += 1;
                    let Some(t) = o.get("timeline").filter(|t| !t.is_null()) else {
                        return Ok(());
                    };
                    let timeline = Timeline::deserialize(t)
                        .map_err(|source| AnswersError::MalformedTimeline { index, source })?;
                    let backend = match o.get("backend").filter(|b| !b.is_null()) {
                        None => BackendTimes::default(),
                        Some(b) => BackendTimes::deserialize(b)
                            .map_err(|source| AnswersError::MalformedBackend { index, source })?,
                    };
                    for name in backend.malformed() {
                        self.malformed_stamps.push((index, name));
                    }
                    self.preparations.push(Preparation { timeline, backend });
                    Ok(())
                }
            },
            other => Err(AnswersError::NotAnAnswer {
                index,
                kind: match other {
                    Value::String(_) => "string",
                    Value::Number(_) => "number",
                    Value::Bool(_) => "boolean",
                    _ => "null",
                },
            }),
        }
    }

    /// `{"answers","timelines","without_timeline","phases":[{"phase",
    /// "count","min_secs","median_secs","p90_secs","max_secs"}]}`; a phase
    /// nothing has is there with count 0 and nulls.
    pub fn to_json(&self, d: &Distribution) -> Value {
        let phases: Vec<Value> = d
            .phases
            .iter()
            .map(|s| {
                json!({
                    "phase": s.phase.name(),
                    "count": s.count,
                    "min_secs": s.min_secs,
                    "median_secs": s.median_secs,
                    "p90_secs": s.p90_secs,
                    "max_secs": s.max_secs,
                })
            })
            .collect();
        json!({
            "answers": self.answers,
            "timelines": d.timelines,
            "without_timeline": self.answers - d.timelines,
            "phases": phases,
        })
    }
}
