//! Whole rendered outputs, pinned. A change here is a change to what every
//! lab VM receives: review the diff.

use crate::support::{assert_snapshot, example, fixture, spec_for};
use lab_agent_cloudinit::{Format, SecretMeta, render_secret, render_user_data};
use lab_agent_proto::lab::READY_TIMEOUT_ANNOTATION;

#[test]
fn fixture_lab_user_data() {
    let user_data = render_user_data(&spec_for(&fixture("fixture-lab"))).unwrap();
    assert_snapshot("fixture-lab.user-data.txt", user_data.as_str());
}

#[test]
fn fixture_lab_without_autologin() {
    let mut spec = spec_for(&fixture("fixture-lab"));
    spec.serial_autologin = false;
    let text = render_user_data(&spec).unwrap().into_string();
    assert!(!text.contains("serial-getty"), "{text}");
    assert!(!text.contains("autologin"), "{text}");
}

#[test]
fn fixture_lab_secret() {
    let user_data = render_user_data(&spec_for(&fixture("fixture-lab"))).unwrap();
    let mut meta = SecretMeta::new("fixture-lab-userdata");
    meta.namespace = Some("lab-vms".into());
    meta.labels
        .insert("tt-lab.example/session-id".into(), "s-42".into());
    meta.labels
        .insert("tt-lab.example/environment".into(), "dev".into());
    meta.annotations
        .insert(READY_TIMEOUT_ANNOTATION.into(), "269".into());
    let yaml = render_secret(&user_data, &meta, Format::Yaml).unwrap();
    assert_snapshot("fixture-lab.secret.yaml", &yaml);
    let json = render_secret(&user_data, &meta, Format::Json).unwrap();
    assert_snapshot("fixture-lab.secret.json", &json);
}

/// `examples/hello-lab` is the lab every reader looks at first. When it
/// changes, so does this snapshot: rerun with `UPDATE_SNAPSHOTS=1`.
#[test]
fn hello_lab_user_data() {
    let user_data = render_user_data(&spec_for(&example("hello-lab"))).unwrap();
    assert_snapshot("hello-lab.user-data.txt", user_data.as_str());
}

/// `[readiness]` reaches the guest: `lab-agent setup` checks the root
/// filesystem's size, with or without a setup script, and is told what a
/// smaller one does; without the key, nothing is checked.
#[test]
fn min_root_bytes_reaches_the_setup_command() {
    let mut spec = spec_for(&fixture("fixture-lab"));
    assert_eq!(spec.readiness.min_root_bytes, Some(4 << 30));
    let text = render_user_data(&spec).unwrap().into_string();
    assert!(
        text.contains(
            r#""--timeout", "120", "--min-root-bytes", "4294967296", "--on-small-root", "warn", "--lab-dir""#
        ),
        "{text}"
    );
    assert!(text.contains("The backend waits 269 s for ready"), "{text}");
    spec.setup = None;
    spec.readiness.on_small_root = lab_agent_proto::lab::OnSmallRoot::Fail;
    let text = render_user_data(&spec).unwrap().into_string();
    assert!(
        text.contains(
            r#""setup", "--min-root-bytes", "4294967296", "--on-small-root", "fail", "--lab-dir""#
        ),
        "{text}"
    );
    spec.readiness = Default::default();
    let text = render_user_data(&spec).unwrap().into_string();
    assert!(!text.contains("--min-root-bytes"), "{text}");
    assert!(text.contains("The backend waits 150 s for ready"), "{text}");
}

#[test]
fn rendering_is_deterministic() {
    let spec = spec_for(&fixture("fixture-lab"));
    let a = render_user_data(&spec).unwrap().into_string();
    let b = render_user_data(&spec).unwrap().into_string();
    assert_eq!(a, b);
}
