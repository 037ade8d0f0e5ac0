//! The shape of the user-data: two parts, ASCII, and a cloud-config part
//! that does not grow with the lab (what cloud-init YAML-parses on every
//! boot must cost the same for a 1 KiB lab and a 400 KiB one).

use crate::support::{TOKEN, example, fixture, spec_for};
use lab_agent_cloudinit::mime::{BOUNDARY, INSTALLER_TYPE};
use lab_agent_cloudinit::{AgentSource, PayloadSpec, SetupScript, render_user_data};
use lab_agent_proto::lab::LabFile;

/// Incompressible bytes.
fn noise(n: usize, mut x: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn the_cloud_config_part_does_not_grow_with_the_lab() {
    let small = spec_for(&example("hello-lab"));
    let mut big = small.clone();
    big.agent = AgentSource::Embedded(noise(900 * 1024, 7));
    for i in 0..40 {
        big.files.push(LabFile {
            path: format!("data/set-{i}/blob.bin"),
            mode: 0o644,
            contents: noise(10 * 1024, i),
        });
    }
    big.setup = Some(SetupScript {
        contents: "echo step\n".repeat(5000).into_bytes(),
        timeout_secs: 3600,
    });
    let small = render_user_data(&small).unwrap();
    let big = render_user_data(&big).unwrap();
    assert!(big.as_bytes().len() > 1_500_000, "the big lab is big");
    assert!(small.cloud_config().len() <= 8 * 1024);
    // Only the setup timeout's digits differ.
    assert_eq!(
        small.cloud_config().replace("\"120\"", "\"3600\"").len(),
        big.cloud_config().len()
    );
    assert_eq!(big.budget().cloud_config, big.cloud_config().len());
    for ud in [&small, &big] {
        let cc = ud.cloud_config();
        assert!(cc.starts_with("#cloud-config\n"), "{cc}");
        assert!(!cc.contains("/opt/lab/"), "lab files leak into the YAML");
        assert!(
            !cc.contains("/usr/local/bin/lab-agent\"\n"),
            "the agent is not a write_files entry"
        );
    }
}

#[test]
fn two_parts_in_order_and_all_ascii() {
    for lab in [fixture("fixture-lab"), example("hello-lab")] {
        let ud = render_user_data(&spec_for(&lab)).unwrap();
        let text = ud.as_str();
        assert!(text.is_ascii());
        assert!(text.starts_with(&format!(
            "Content-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n"
        )));
        let delimiters: Vec<_> = text
            .lines()
            .filter(|l| l.starts_with(&format!("--{BOUNDARY}")))
            .collect();
        assert_eq!(
            delimiters,
            [
                format!("--{BOUNDARY}"),
                format!("--{BOUNDARY}"),
                format!("--{BOUNDARY}--")
            ]
        );
        let cc = text.find("Content-Type: text/cloud-config").unwrap();
        let sh = text
            .find(&format!("Content-Type: {INSTALLER_TYPE}"))
            .unwrap();
        assert!(cc < sh, "the cloud-config part comes first");
        assert!(text.ends_with(&format!("--{BOUNDARY}--\n")));
    }
}

/// Names, contents and a token chosen to break quoting stay ASCII and never
/// end a part early.
#[test]
fn hostile_inputs_stay_inside_their_part() {
    let mut spec = PayloadSpec::new("hostile", noise(5000, 3), TOKEN);
    spec.files = [
        ("日本語/ファイル.txt", "ünïcödé ✓\n".as_bytes().to_vec()),
        ("line.txt", format!("--{BOUNDARY}\n").into_bytes()),
        ("end.txt", format!("x\n--{BOUNDARY}--\n").into_bytes()),
        ("heredoc.txt", b"LAB_AGENT_EOF\n".to_vec()),
        ("it's \"quoted\" $(id) `id` %s \\.txt", b"$(id)\n".to_vec()),
    ]
    .into_iter()
    .map(|(path, contents)| LabFile {
        path: path.into(),
        mode: 0o640,
        contents,
    })
    .collect();
    let ud = render_user_data(&spec).unwrap();
    let text = ud.as_str();
    assert!(text.is_ascii());
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with(&format!("--{BOUNDARY}")))
            .count(),
        3
    );
    assert_eq!(
        text.lines().filter(|l| *l == "LAB_AGENT_EOF").count(),
        spec.files.len() + 1,
        "one terminator per file and the agent"
    );
}

/// An arm64 payload logs root in on arm64 `virt`'s console (the PL011,
/// `ttyAMA0`) and nowhere else; the rest is the amd64 payload's, byte for
/// byte, but for the agent.
#[test]
fn the_arm64_payload_differs_only_in_its_console_and_agent() {
    let amd64 = spec_for(&example("hello-lab"));
    let mut arm64 = amd64.clone();
    arm64.arch = lab_agent_cloudinit::Arch::Arm64;
    let (amd64, arm64) = (
        render_user_data(&amd64).unwrap(),
        render_user_data(&arm64).unwrap(),
    );
    let dropin =
        |tty: &str| format!("/etc/systemd/system/serial-getty@{tty}.service.d/autologin.conf");
    let arm = arm64.cloud_config();
    assert!(arm.contains(&dropin("ttyAMA0")), "{arm}");
    assert!(arm.contains("\"serial-getty@ttyAMA0.service\""), "{arm}");
    assert!(!arm.contains("ttyS0"), "{arm}");
    assert!(amd64.cloud_config().contains(&dropin("ttyS0")));
    assert_eq!(
        arm.replace("ttyAMA0", "ttyS0"),
        amd64.cloud_config(),
        "only the console differs"
    );
    assert_eq!(
        arm64.as_str().replace("ttyAMA0", "ttyS0"),
        amd64.as_str(),
        "the same installer (the fake agent is the same bytes)"
    );
    assert!(arm64.budget().to_string().starts_with("budget (arm64): "));
}
