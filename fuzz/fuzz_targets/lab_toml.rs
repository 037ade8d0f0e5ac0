//! `lab.toml`: `Lab::parse` never panics, and a lab it accepts is valid:
//! a usable name, paths inside the lab folder, unique check names, timeouts
//! in range.
#![no_main]

use lab_agent_proto::lab::{Lab, MAX_READY_TIMEOUT_SECS, MAX_SETUP_TIMEOUT_SECS, MAX_TIMEOUT_SECS};
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::path::{Component, Path};

fn inside(p: &Path) -> bool {
    p.components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(lab) = Lab::parse(text, "/labs/fuzz") else {
        return;
    };
    assert!(!lab.name.is_empty() && lab.name.len() <= 63);
    assert!(
        lab.name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    );
    if let Some(setup) = &lab.setup {
        assert!((1..=MAX_SETUP_TIMEOUT_SECS).contains(&setup.timeout_secs));
        if let Some(script) = &setup.script {
            assert!(inside(script), "{script:?}");
        }
    }
    assert!((1..=MAX_READY_TIMEOUT_SECS).contains(&lab.readiness.timeout_secs));
    assert!(lab.readiness.min_root_bytes.is_none_or(|b| b > 0));
    if let Some(files) = &lab.files {
        assert!(inside(&files.source), "{:?}", files.source);
    }
    let mut names = HashSet::new();
    for c in &lab.checks {
        assert!(names.insert(&c.name), "duplicate check {:?}", c.name);
        assert!(!c.name.trim().is_empty() && !c.run.trim().is_empty());
        assert!((1..=MAX_TIMEOUT_SECS).contains(&c.exec.timeout_secs));
    }
});
