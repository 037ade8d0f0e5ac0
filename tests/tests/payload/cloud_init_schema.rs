//! `cloud-init schema` (Debian's 22.4, the guest's version) accepts the
//! cloud-config part we render, and rejects the mistakes it is known to
//! catch, so a pass means something. (It validates one cloud-config
//! document, not a MIME message; `round_trip` shows that cloud-init's own
//! MIME processing finds exactly this part.)

use crate::support::{TempDir, arm64_spec_for, cloud_init_schema, labs, spec_for, user_data};

#[test]
fn rendered_user_data_is_valid_cloud_config() {
    for lab in labs() {
        for (autologin, arm64) in [(true, false), (false, false), (true, true)] {
            let mut spec = if arm64 {
                arm64_spec_for(&lab)
            } else {
                spec_for(&lab)
            };
            spec.serial_autologin = autologin;
            let text = user_data(&spec).cloud_config().to_owned();
            let dir = TempDir::new("schema");
            let file = dir.write("user-data", &text);
            let out = cloud_init_schema(&file);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("Valid cloud-config"),
                "{} (autologin {autologin}, arm64 {arm64}): cloud-init schema said:\n{stdout}{}",
                lab.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Each broken variant of a good user-data, and a fragment of what
/// cloud-init must say about it.
#[test]
fn broken_user_data_is_rejected() {
    let good = user_data(&spec_for(&crate::support::fixture_lab()))
        .cloud_config()
        .to_owned();
    let runcmd_at = good.find("runcmd:\n").unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "integer permissions",
            good.replacen("permissions: \"0600\"", "permissions: 0600", 1),
            "permissions",
        ),
        (
            "runcmd not a list",
            format!("{}runcmd: 42\n", &good[..runcmd_at]),
            "runcmd",
        ),
        (
            "missing #cloud-config header",
            good.trim_start_matches("#cloud-config\n").to_owned(),
            "#cloud-config",
        ),
        (
            "YAML that does not parse",
            good.replacen(
                "- path: \"/etc/lab-agent/token\"",
                "- path: \"/etc/lab-agent/token",
                1,
            ),
            "",
        ),
    ];
    for (what, text, fragment) in cases {
        assert_ne!(text, good, "{what}: the variant did not change anything");
        let dir = TempDir::new("schema-bad");
        let file = dir.write("user-data", &text);
        let out = cloud_init_schema(&file);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.status.success(),
            "{what}: cloud-init accepted it:\n{said}"
        );
        assert!(
            said.contains(fragment),
            "{what}: {said:?} lacks {fragment:?}"
        );
    }
}
