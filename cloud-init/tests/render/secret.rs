//! The Secret: both formats carry the same user-data; metadata Kubernetes
//! would reject and payloads over 1 MiB fail with a message that says what
//! to do.

use crate::support::{FAKE_AGENT, TOKEN, fixture, spec_for};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lab_agent_cloudinit::{
    Format, PayloadSpec, SECRET_LIMIT, SecretMeta, render_secret, render_user_data,
};
use lab_agent_proto::lab::{LabFile, READY_TIMEOUT_ANNOTATION};

fn meta(name: &str) -> SecretMeta {
    SecretMeta::new(name)
}

#[test]
fn json_secret_decodes_to_the_user_data() {
    let user_data = render_user_data(&spec_for(&fixture("fixture-lab"))).unwrap();
    let mut m = meta("x");
    m.labels.insert("k".into(), "v".into());
    let json = render_secret(&user_data, &m, Format::Json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["apiVersion"], "v1");
    assert_eq!(v["kind"], "Secret");
    assert_eq!(v["type"], "Opaque");
    assert_eq!(v["metadata"]["name"], "x");
    assert_eq!(v["metadata"]["labels"]["k"], "v");
    assert!(v["metadata"].get("namespace").is_none());
    let decoded = STANDARD
        .decode(v["data"]["userdata"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, user_data.as_bytes());
}

/// Annotations (the lab's readiness deadline) are in both formats, and a
/// key Kubernetes would reject is refused.
#[test]
fn annotations_in_both_formats() {
    let user_data = render_user_data(&spec_for(&fixture("fixture-lab"))).unwrap();
    let mut m = meta("x");
    m.annotations
        .insert(READY_TIMEOUT_ANNOTATION.into(), "269".into());
    let json = render_secret(&user_data, &m, Format::Json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["metadata"]["annotations"]["lab-agent/ready-timeout-secs"],
        "269"
    );
    assert!(v["metadata"].get("labels").is_none(), "{v}");
    let yaml = render_secret(&user_data, &m, Format::Yaml).unwrap();
    assert!(
        yaml.contains(
            "\n  annotations:\n    \"lab-agent/ready-timeout-secs\": \"269\"\ntype: Opaque\n"
        ),
        "{yaml}"
    );
    m.annotations.insert("bad key".into(), "v".into());
    let err = render_secret(&user_data, &m, Format::Yaml)
        .unwrap_err()
        .to_string();
    assert!(err.contains("annotation key `bad key`"), "{err}");
}

#[test]
fn yaml_secret_carries_the_same_base64() {
    let user_data = render_user_data(&spec_for(&fixture("fixture-lab"))).unwrap();
    let yaml = render_secret(&user_data, &meta("x"), Format::Yaml).unwrap();
    let line = yaml
        .lines()
        .find(|l| l.starts_with("  userdata: "))
        .unwrap();
    let b64 = line.trim_start_matches("  userdata: ").trim_matches('"');
    assert_eq!(STANDARD.decode(b64).unwrap(), user_data.as_bytes());
    assert!(!yaml.contains("labels"), "no labels, no key: {yaml}");
    assert!(!yaml.contains("annotations"), "{yaml}");
}

/// Each bad metadata and a fragment its message must contain.
#[test]
fn metadata_kubernetes_would_reject() {
    let user_data = render_user_data(&PayloadSpec::new("l", FAKE_AGENT.to_vec(), TOKEN)).unwrap();
    let label = |k: &str, v: &str| {
        let mut m = meta("ok");
        m.labels.insert(k.into(), v.into());
        m
    };
    let ns = |n: &str| SecretMeta {
        namespace: Some(n.into()),
        ..meta("ok")
    };
    let cases = [
        (meta("Hello"), "invalid metadata.name `Hello`: contains 'H'"),
        (meta(""), "invalid metadata.name ``: is empty"),
        (meta("a_b"), "contains '_'"),
        (meta(&"a".repeat(254)), "is 254 characters long"),
        (
            ns("lab.vms"),
            "invalid metadata.namespace `lab.vms`: contains '.'",
        ),
        (label("a b", "v"), "invalid label key `a b`"),
        (label("x/y/z", "v"), "more than one `/`"),
        (
            label("k", "has space"),
            "invalid value of label `k` `has space`",
        ),
        (label("k", "line\nbreak"), "`line\\nbreak`"),
        (label("k", "-dash"), "starts with '-'"),
    ];
    for (m, want) in cases {
        let err = render_secret(&user_data, &m, Format::Yaml).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(want), "{m:?}: {msg:?} lacks {want:?}");
        assert!(!err.is_too_large());
    }
}

#[test]
fn over_the_limit_says_by_how_much_and_what_is_large() {
    let mut spec = PayloadSpec::new("big", vec![0x55; 300 * 1024], TOKEN);
    // Base64 (no gain from gzip on noise) of 800 KiB is ~1067 KiB on its own.
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let noise: Vec<u8> = (0..800 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    spec.files.push(LabFile {
        path: "images/disk.img".into(),
        mode: 0o644,
        contents: noise,
    });
    let user_data = render_user_data(&spec).unwrap();
    let total = user_data.as_bytes().len();
    assert!(total > SECRET_LIMIT);
    let err = render_secret(&user_data, &meta("big"), Format::Yaml).unwrap_err();
    assert!(err.is_too_large());
    let msg = err.to_string();
    let over = total - SECRET_LIMIT;
    for want in [
        format!("the user-data is {total} bytes"),
        format!("{over} bytes"),
        "over the 1 MiB Secret limit".to_string(),
        "largest parts: `/opt/lab/images/disk.img`".to_string(),
    ] {
        assert!(msg.contains(&want), "{msg:?} lacks {want:?}");
    }
    assert!(
        !msg.contains("hint"),
        "the hint is not part of the message: {msg:?}"
    );
    assert!(err.hint().unwrap().contains("packaging/build-agent.sh"));
    // The user-data alone (a NoCloud seed) has no such limit.
    assert!(user_data.budget().excess() == Some(over));
}

#[test]
fn budget_adds_up() {
    let user_data = render_user_data(&spec_for(&fixture("fixture-lab"))).unwrap();
    let b = user_data.budget();
    assert_eq!(b.total, user_data.as_bytes().len());
    assert_eq!(b.agent + b.lab_files + b.rest, b.total);
    assert_eq!(b.parts.iter().map(|p| p.bytes).sum::<usize>(), b.total);
    assert_eq!(b.cloud_config, user_data.cloud_config().len());
    assert!(
        b.cloud_config < b.rest,
        "the cloud-config is part of the rest"
    );
    let line = b.to_string();
    assert!(line.starts_with("budget (amd64): agent "), "{line}");
    assert!(
        line.ends_with(&format!(
            "of the 1 MiB Secret limit); cloud-init parses {:.1} KiB of it as YAML",
            b.cloud_config as f64 / 1024.0
        )),
        "{line}"
    );
}
