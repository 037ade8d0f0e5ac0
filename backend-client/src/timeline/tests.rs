use super::*;
use serde_json::Value;

fn prep(timeline: Timeline) -> Preparation {
    Preparation {
        timeline,
        backend: BackendTimes::default(),
    }
}

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
    let ready: Vec<_> = r
        .preparations
        .iter()
        .map(|p| p.timeline.ready_secs.unwrap())
        .collect();
    assert_eq!(ready, [1.0, 2.0, 4.0, 3.0]);
    let v = r.to_json(&distribution(&r.preparations));
    assert_eq!(v["without_timeline"], 2);
    assert_eq!(v["phases"][9]["phase"], "ready");
    assert_eq!(v["phases"][9]["median_secs"], 2.5);
    assert_eq!(v["phases"][9]["min_secs"], 1.0);
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
    let ts: Vec<Preparation> = [269.0, 82.0, 150.0, 94.0, 300.0]
        .into_iter()
        .map(|ready| prep(full(3.1, ready - 20.0, ready)))
        .collect();
    let d = distribution(&ts);
    assert_eq!(d.timelines, 5);
    let names: Vec<_> = d.phases.iter().map(|s| s.phase.name()).collect();
    assert_eq!(
        names,
        [
            "scheduled",
            "running",
            "kernel_boot",
            "agent_started",
            "init-local",
            "init",
            "modules-config",
            "modules-final",
            "setup",
            "ready",
            "request_to_ready"
        ]
    );
    let ready = d.phases[9];
    assert_eq!(ready.count, 5);
    assert_eq!(
        (ready.min_secs, ready.median_secs),
        (Some(82.0), Some(150.0))
    );
    // 82 94 150 269 300: rank 3.6 → 269 + 0.6 × 31.
    assert_eq!(ready.p90_secs, Some(287.6));
    assert_eq!(ready.max_secs, Some(300.0));
    assert_eq!(d.phases[8].median_secs, Some(130.0));
    let agent = d.phases[3];
    assert_eq!(
        (agent.count, agent.median_secs, agent.max_secs),
        (5, Some(3.1), Some(3.1))
    );
    // No backend stamps: their phases count nothing.
    for phase in [0, 1, 2, 10] {
        assert_eq!(d.phases[phase].count, 0, "{:?}", d.phases[phase]);
    }
    for stage in &d.phases[4..8] {
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
    let d = distribution(&[prep(unfinished), prep(no_cloud_init), prep(backwards)]);
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

    let none = distribution(&[]);
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
    let p = prep(t);
    assert_eq!(Phase::InitLocal.secs(&p), Some(0.5));
    assert_eq!(Phase::Init.secs(&p), None);
}

/// The backend's stamps before the guest's timeline: request → ready
/// as the platform measures it. A VM whose guest clock is behind the
/// cluster's has no kernel-boot phase (negative), its other phases
/// stand.
#[test]
fn the_backends_stamps_cover_request_to_ready() {
    let answer = |created: &str, boot: &str, ready: f64| {
        format!(
            r#"{{"state":"ready","backend":{{"vm_created_at":"{created}","vmi_scheduled_at":"2026-12-03T10:00:02Z","vmi_running_at":"2026-12-03T10:00:10.500Z"}},"timeline":{{"boot_at":"{boot}","ready_secs":{ready}}}}}"#
        )
    };
    let text = [
        answer("2026-12-03T10:00:00Z", "2026-12-03T10:00:12.500Z", 70.0),
        answer("2026-12-03T10:00:01Z", "2026-12-03T10:00:13Z", 80.0),
        // The guest's clock 5 s behind: no kernel phase, the rest stands.
        answer("2026-12-03T10:00:00Z", "2026-12-03T10:00:05.500Z", 90.0),
    ]
    .join("\n");
    let r = read(&text).unwrap();
    assert!(r.malformed_stamps.is_empty());
    let d = distribution(&r.preparations);
    let by = |p: Phase| d.phases.iter().find(|s| s.phase == p).copied().unwrap();
    let scheduled = by(Phase::Scheduled);
    assert_eq!(
        (scheduled.count, scheduled.min_secs, scheduled.max_secs),
        (3, Some(1.0), Some(2.0))
    );
    assert_eq!(by(Phase::Running).median_secs, Some(8.5));
    let kernel = by(Phase::KernelBoot);
    assert_eq!(
        (kernel.count, kernel.min_secs, kernel.max_secs),
        (2, Some(2.0), Some(2.5))
    );
    let total = by(Phase::RequestToReady);
    // 82.5, 92, 95.5
    assert_eq!(
        (total.count, total.median_secs, total.max_secs),
        (3, Some(92.0), Some(95.5))
    );
    assert_eq!(by(Phase::Ready).median_secs, Some(80.0));

    let r =
        read(r#"{"backend":{"vm_created_at":"yesterday"},"timeline":{"ready_secs":1}}"#).unwrap();
    assert_eq!(r.malformed_stamps, [(1, "vm_created_at")]);
    let e = read(r#"{"backend":{"vm_created_at":7},"timeline":{}}"#).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("document 1: the backend's stamps are malformed"),
        "{e}"
    );
}

/// The picture holds a row per phase measured (in order, totals
/// last), its figures, and names what was not measured; it is
/// well-formed XML.
#[test]
fn the_picture_of_a_distribution() {
    let ts: Vec<Preparation> = [269.0, 82.0, 150.0]
        .into_iter()
        .map(|ready| prep(full(3.1, ready - 20.0, ready)))
        .collect();
    let picture = svg(&distribution(&ts), 4);
    assert!(
        picture.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{picture}"
    );
    assert!(
        picture.contains("3 VMs (4 answers, 1 without a timeline)"),
        "{picture}"
    );
    let at = |needle: &str| {
        picture
            .find(needle)
            .unwrap_or_else(|| panic!("{needle}: {picture}"))
    };
    assert!(at(">kernel → agent start<") < at(">cloud-init init-local<"));
    assert!(at(">setup<") < at(">kernel → ready<"));
    assert!(
        picture.contains("kernel → ready: 3 VMs, min 82 s, median 150 s, p90 245 s, max 269 s"),
        "{picture}"
    );
    assert!(picture.contains("not measured in these answers: VM created → VMI scheduled, VMI scheduled → running, VMI running → kernel, VM created → ready"), "{picture}");
    assert_eq!(picture.matches("<g>").count(), 7);
    assert_eq!(
        picture.matches("<g>").count(),
        picture.matches("</g>").count()
    );
    assert!(picture.trim_end().ends_with("</svg>"));
    let empty = svg(&distribution(&[]), 0);
    assert!(empty.contains("no timeline to draw"), "{empty}");
}
