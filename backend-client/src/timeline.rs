//! Where many VMs' preparation time went: the distribution (count, median,
//! p90, max) of each phase of their [`Timeline`]s, the number a platform
//! plans with ("time to ready" per lab, and which stage to shorten).
//!
//! Pure functions over answers a backend already has (each VM's last
//! `/v1/ready` answer, as it logs them); `labctl timeline` prints them.

use lab_agent_proto::lifecycle::{Span, Timeline};
use serde::Deserialize as _;
use serde_json::{Value, json};

/// One phase of a VM's preparation, as a report over many VMs counts it.
/// Each is a duration in seconds; the first and the last count from the
/// kernel's boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// From the kernel's boot to the agent's start.
    AgentStart,
    /// cloud-init's `init-local` stage, start to finish.
    InitLocal,
    /// cloud-init's `init` (network) stage.
    Init,
    /// cloud-init's `modules-config` stage.
    ModulesConfig,
    /// cloud-init's `modules-final` stage (setup runs inside it).
    ModulesFinal,
    /// The lab's setup script, start to finish.
    Setup,
    /// From the kernel's boot to ready: the platform's headline number.
    Ready,
}

impl Phase {
    /// Every phase, in the order a boot goes through them.
    pub const ALL: [Phase; 7] = [
        Phase::AgentStart,
        Phase::InitLocal,
        Phase::Init,
        Phase::ModulesConfig,
        Phase::ModulesFinal,
        Phase::Setup,
        Phase::Ready,
    ];

    /// The name a program reads: the timeline's own (`agent_started`,
    /// cloud-init's stage names as in `status.json`, `setup`, `ready`).
    pub const fn name(self) -> &'static str {
        match self {
            Phase::AgentStart => "agent_started",
            Phase::InitLocal => "init-local",
            Phase::Init => "init",
            Phase::ModulesConfig => "modules-config",
            Phase::ModulesFinal => "modules-final",
            Phase::Setup => "setup",
            Phase::Ready => "ready",
        }
    }

    /// The name a person reads.
    pub const fn label(self) -> &'static str {
        match self {
            Phase::AgentStart => "kernel → agent start",
            Phase::InitLocal => "cloud-init init-local",
            Phase::Init => "cloud-init init",
            Phase::ModulesConfig => "cloud-init modules-config",
            Phase::ModulesFinal => "cloud-init modules-final",
            Phase::Setup => "setup",
            Phase::Ready => "kernel → ready",
        }
    }

    /// This phase's duration in `t`, rounded to the millisecond (the
    /// timeline's precision: `2.4 - 1.9` is `0.5`, not `0.49999…`); `None`
    /// when it has not finished, or when what the guest reported is no
    /// duration (negative: a finish before its start).
    pub fn secs(self, t: &Timeline) -> Option<f64> {
        let stage = |name: &str| t.cloud_init.get(name)?.duration_secs();
        let secs = match self {
            Phase::AgentStart => t.agent_started_secs,
            Phase::InitLocal => stage("init-local"),
            Phase::Init => stage("init"),
            Phase::ModulesConfig => stage("modules-config"),
            Phase::ModulesFinal => stage("modules-final"),
            Phase::Setup => t.setup?.duration_secs(),
            Phase::Ready => t.ready_secs,
        }?;
        (secs.is_finite() && secs >= 0.0).then(|| round_ms(secs))
    }
}

/// One phase over many VMs. The statistics are `None` when no VM's
/// timeline has the phase (`count` 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseStats {
    pub phase: Phase,
    /// Timelines in which the phase finished.
    pub count: usize,
    pub median_secs: Option<f64>,
    pub p90_secs: Option<f64>,
    pub max_secs: Option<f64>,
}

/// [`distribution`]'s answer: every phase of [`Phase::ALL`], in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// Timelines summed up.
    pub timelines: usize,
    pub phases: Vec<PhaseStats>,
}

/// Count, median, p90 and max of each phase over `timelines`. A timeline
/// without a phase (a stage that had not finished when it was taken, a
/// boot without cloud-init, a setup that ran in an earlier boot) counts
/// only for the phases it has, so each phase's `count` says how many VMs
/// its numbers stand for.
pub fn distribution<'a>(timelines: impl IntoIterator<Item = &'a Timeline>) -> Distribution {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); Phase::ALL.len()];
    let mut n = 0;
    for t in timelines {
        n += 1;
        for (phase, seen) in Phase::ALL.iter().zip(&mut samples) {
            seen.extend(phase.secs(t));
        }
    }
    let phases = Phase::ALL
        .iter()
        .zip(&mut samples)
        .map(|(&phase, seen)| {
            seen.sort_by(f64::total_cmp);
            PhaseStats {
                phase,
                count: seen.len(),
                median_secs: percentile(seen, 0.5),
                p90_secs: percentile(seen, 0.9),
                max_secs: seen.last().copied(),
            }
        })
        .collect();
    Distribution {
        timelines: n,
        phases,
    }
}

/// The `p` quantile (0 to 1) of `sorted` (ascending), by linear
/// interpolation between the closest ranks (numpy's and R's default, so a
/// backend's own numbers agree): the median of an even count is the mean
/// of the middle two. Rounded to the millisecond; `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = p.clamp(0.0, 1.0) * last as f64;
    let lo = rank.floor() as usize;
    let hi = (lo + 1).min(last);
    let value = sorted[lo] + (rank - lo as f64) * (sorted[hi] - sorted[lo]);
    Some(round_ms(value))
}

fn round_ms(secs: f64) -> f64 {
    (secs * 1000.0).round() / 1000.0
}

/// One VM's own timeline as a table's rows, in its boot's order, each a
/// span in seconds since the kernel booted: kernel to the agent's start,
/// each cloud-init stage that started, setup (once it started in this
/// boot), kernel to ready. What has not happened is `None` in its span.
pub fn phases_of(t: &Timeline) -> Vec<(Phase, Span)> {
    let from_boot = |end: Option<f64>| Span {
        start_secs: end.map(|_| 0.0),
        finished_secs: end,
    };
    let mut rows = vec![(Phase::AgentStart, from_boot(t.agent_started_secs))];
    for (name, span) in t.stages() {
        if let Some(phase) = Phase::ALL.into_iter().find(|p| p.name() == name) {
            rows.push((phase, *span));
        }
    }
    rows.extend(t.setup.map(|setup| (Phase::Setup, setup)));
    rows.push((Phase::Ready, from_boot(t.ready_secs)));
    rows
}

/// The `/v1/ready` answers read from what a backend logged (or `labctl
/// wait --json` outputs): how many, and the timelines among them.
#[derive(Debug, Default)]
pub struct Answers {
    /// Every answer read, with a timeline or without.
    pub answers: usize,
    pub timelines: Vec<Timeline>,
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
    #[error("document {index}: a {kind} is no `/v1/ready` answer")]
    NotAnAnswer { index: usize, kind: &'static str },
}

impl Answers {
    /// Adds every answer in `text`: a stream of JSON documents (one per
    /// line, or pretty-printed), each an answer, a `labctl wait --json`
    /// output (its VMs' answers) or an array of either.
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
        self.answers - self.timelines.len()
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
                    if let Some(t) = o.get("timeline").filter(|t| !t.is_null()) {
                        let t = Timeline::deserialize(t)
                            .map_err(|source| AnswersError::MalformedTimeline { index, source })?;
                        self.timelines.push(t);
                    }
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
    /// "count","median_secs","p90_secs","max_secs"}]}`; a phase no timeline
    /// has is there with count 0 and nulls.
    pub fn to_json(&self, d: &Distribution) -> Value {
        let phases: Vec<Value> = d
            .phases
            .iter()
            .map(|s| {
                json!({
                    "phase": s.phase.name(),
                    "count": s.count,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_vms_phases_in_its_boots_order() {
        let t: Timeline = serde_json::from_str(
            r#"{"agent_started_secs":3.1,
               "cloud_init":{"modules-final":{"start_secs":9.0,"finished_secs":71.5},
                             "init-local":{"start_secs":1.9,"finished_secs":2.4},
                             "init":{"start_secs":2.5}},
               "ready_secs":71.6}"#,
        )
        .unwrap();
        let rows = phases_of(&t);
        let phases: Vec<Phase> = rows.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            phases,
            [
                Phase::AgentStart,
                Phase::InitLocal,
                Phase::Init,
                Phase::ModulesFinal,
                Phase::Ready
            ],
            "no setup in this boot: no row"
        );
        assert_eq!(rows[0].1, span(0.0, 3.1));
        assert_eq!(rows[2].1.finished_secs, None);
        assert_eq!(rows[4].1, span(0.0, 71.6));
        let none = phases_of(&Timeline::default());
        assert_eq!(none.len(), 2);
        assert_eq!(none[1].1, Span::default(), "not ready: nothing known");
    }

    fn read(text: &str) -> Result<Answers, AnswersError> {
        let mut r = Answers::default();
        r.read(text)?;
        Ok(r)
    }

    #[test]
    fn lines_arrays_and_wait_outputs() {
        let answer = |ready: f64| {
            format!(
                r#"{{"state":"ready","cloud_init":{{"done":true}},"setup":{{"state":"succeeded"}},"timeline":{{"ready_secs":{ready}}}}}"#
            )
        };
        let old = r#"{"state":"ready","cloud_init":{"done":true},"setup":{"state":"succeeded"}}"#;
        let wait = format!(
            r#"{{"ready":false,"vms":[{{"url":"u","ready":{}}},{{"url":"v","ready":null}}]}}"#,
            answer(3.0)
        );
        let text = format!(
            "{}\n\n{old}\n[{}, {}]\n{wait}\n",
            answer(1.0),
            answer(2.0),
            answer(4.0)
        );
        let r = read(&text).unwrap();
        assert_eq!((r.answers, r.without_timeline()), (6, 2));
        let ready: Vec<_> = r.timelines.iter().map(|t| t.ready_secs.unwrap()).collect();
        assert_eq!(ready, [1.0, 2.0, 4.0, 3.0]);
        let v = r.to_json(&distribution(&r.timelines));
        assert_eq!(v["without_timeline"], 2);
        assert_eq!(v["phases"][6]["phase"], "ready");
        assert_eq!(v["phases"][6]["median_secs"], 2.5);
        assert_eq!(v["phases"][0]["count"], 0);
        assert_eq!(v["phases"][0]["max_secs"], Value::Null);
    }

    #[test]
    fn what_is_not_an_answer_is_named() {
        let e = read("{\"timeline\":{}}\nnot json\n").unwrap_err();
        assert!(matches!(e, AnswersError::NotJson { line: 2, .. }), "{e}");
        let e = read("{}\n42\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "document 2: a number is no `/v1/ready` answer"
        );
        let e = read(r#"{"timeline":{"ready_secs":"soon"}}"#).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("document 1: the timeline is malformed: "),
            "{e}"
        );
    }
    use lab_agent_proto::lifecycle::Span;

    fn span(start: f64, finished: f64) -> Span {
        Span {
            start_secs: Some(start),
            finished_secs: Some(finished),
        }
    }

    /// A timeline with every phase: agent at `agent`, each cloud-init
    /// stage lasting 1 s from 1 s on, setup `setup` long, ready at `ready`.
    fn full(agent: f64, setup: f64, ready: f64) -> Timeline {
        let mut t = Timeline {
            boot_at: Some("2026-12-03T10:00:00Z".into()),
            agent_started_secs: Some(agent),
            setup: Some(span(10.0, 10.0 + setup)),
            ready_secs: Some(ready),
            ..Timeline::default()
        };
        for (i, name) in lab_agent_proto::lifecycle::CLOUD_INIT_STAGES
            .iter()
            .enumerate()
        {
            let start = 1.0 + i as f64;
            t.cloud_init
                .insert((*name).into(), span(start, start + 1.0));
        }
        t
    }

    #[test]
    fn percentiles_of_known_sets() {
        let odd = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&odd, 0.5), Some(3.0));
        assert_eq!(percentile(&odd, 0.9), Some(4.6));
        let even = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&even, 0.5), Some(2.5));
        assert_eq!(percentile(&even, 0.9), Some(3.7));
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&ten, 0.5), Some(5.5));
        assert_eq!(percentile(&ten, 0.9), Some(9.1));
        assert_eq!(percentile(&ten, 1.0), Some(10.0));
        assert_eq!(percentile(&ten, 0.0), Some(1.0));
        assert_eq!(percentile(&[82.0], 0.9), Some(82.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    /// The seeds' labs' times to ready, in any order: sorted first.
    #[test]
    fn a_distribution_over_vms() {
        let ts: Vec<Timeline> = [269.0, 82.0, 150.0, 94.0, 300.0]
            .into_iter()
            .map(|ready| full(3.1, ready - 20.0, ready))
            .collect();
        let d = distribution(&ts);
        assert_eq!(d.timelines, 5);
        let names: Vec<_> = d.phases.iter().map(|s| s.phase.name()).collect();
        assert_eq!(
            names,
            [
                "agent_started",
                "init-local",
                "init",
                "modules-config",
                "modules-final",
                "setup",
                "ready"
            ]
        );
        let ready = d.phases[6];
        assert_eq!(ready.count, 5);
        assert_eq!(ready.median_secs, Some(150.0));
        // 82 94 150 269 300: rank 3.6 → 269 + 0.6 × 31.
        assert_eq!(ready.p90_secs, Some(287.6));
        assert_eq!(ready.max_secs, Some(300.0));
        assert_eq!(d.phases[5].median_secs, Some(130.0));
        let agent = d.phases[0];
        assert_eq!(
            (agent.count, agent.median_secs, agent.max_secs),
            (5, Some(3.1), Some(3.1))
        );
        for stage in &d.phases[1..5] {
            assert_eq!(
                (stage.count, stage.median_secs),
                (5, Some(1.0)),
                "{stage:?}"
            );
        }
    }

    /// A stage not finished, a boot without cloud-init, a setup of an
    /// earlier boot, a finish before its start: each phase counts only the
    /// timelines that have it.
    #[test]
    fn missing_phases_count_only_where_they_are() {
        let mut unfinished = full(2.0, 50.0, 0.0);
        unfinished.ready_secs = None;
        unfinished
            .cloud_init
            .get_mut("modules-final")
            .unwrap()
            .finished_secs = None;
        let no_cloud_init = Timeline {
            agent_started_secs: Some(4.0),
            ready_secs: Some(9.0),
            ..Timeline::default()
        };
        let mut backwards = full(6.0, 1.0, 30.0);
        backwards.setup = Some(span(20.0, 19.0));
        let d = distribution([&unfinished, &no_cloud_init, &backwards]);
        assert_eq!(d.timelines, 3);
        let by = |p: Phase| d.phases.iter().find(|s| s.phase == p).copied().unwrap();
        assert_eq!(by(Phase::AgentStart).count, 3);
        assert_eq!(by(Phase::AgentStart).median_secs, Some(4.0));
        assert_eq!(by(Phase::AgentStart).p90_secs, Some(5.6));
        assert_eq!(by(Phase::InitLocal).count, 2);
        assert_eq!(by(Phase::ModulesFinal).count, 1);
        let setup = by(Phase::Setup);
        assert_eq!((setup.count, setup.max_secs), (1, Some(50.0)));
        let ready = by(Phase::Ready);
        assert_eq!((ready.count, ready.median_secs), (2, Some(19.5)));

        let none = distribution([]);
        assert_eq!(none.timelines, 0);
        assert!(
            none.phases
                .iter()
                .all(|s| s.count == 0 && s.median_secs.is_none() && s.max_secs.is_none())
        );
    }

    #[test]
    fn durations_are_rounded_to_the_millisecond() {
        let mut t = Timeline::default();
        t.cloud_init.insert("init-local".into(), span(1.9, 2.4));
        assert_eq!(Phase::InitLocal.secs(&t), Some(0.5));
        assert_eq!(Phase::Init.secs(&t), None);
    }
}
