//! Secret → base64 → user-data → cloud-init's MIME processing and part
//! handlers → `bootcmd`, `write_files` and the per-instance installer, run
//! as a guest's first boot runs them (`support::deliver`): every byte and
//! mode arrives as it left, for the fixture lab, for `examples/hello-lab`,
//! and for names and contents chosen to break YAML, MIME and the shell; and
//! nothing else is written.

use crate::support::{
    Guest, TOKEN, Tools, deliver, deliver_with, labs, secret, spec_for, user_data,
};
use lab_agent_cloudinit::unit::guest_unit;
use lab_agent_cloudinit::{Format, PayloadSpec, SetupScript};
use lab_agent_proto::guest::{
    AGENT_PATH, INSTALL_ERROR_PATH, SETUP_SCRIPT_PATH, TOKEN_PATH, UNIT_PATH, autologin_dropin_path,
};
use lab_agent_proto::lab::LabFile;
use serde_json::json;

/// Everything in `spec` arrived intact, with the right modes, through the
/// two parts cloud-init was meant to see; and nothing else was written.
fn assert_delivered(spec: &PayloadSpec, d: &Guest) {
    assert_eq!(
        d.report["parts"],
        json!([
            {"content_type": "text/cloud-config", "filename": "part-001",
             "bytes": d.report["parts"][0]["bytes"]},
            {"content_type": "text/x-shellscript-per-instance", "filename": "lab-agent-install",
             "bytes": d.report["parts"][1]["bytes"]},
        ]),
        "cloud-init split the user-data differently"
    );
    assert_eq!(
        d.report["per_instance_scripts"],
        json!(["lab-agent-install"])
    );
    assert_eq!(d.report["per_instance_failed"], json!(null));

    let (agent, mode) = d.read(AGENT_PATH);
    assert!(
        lab_agent_cloudinit::AgentSource::Embedded(agent) == spec.agent,
        "agent bytes differ after the round trip"
    );
    assert_eq!(mode, 0o755, "agent mode");
    let (token, mode) = d.read(TOKEN_PATH);
    assert_eq!(
        String::from_utf8(token).unwrap(),
        format!("{}\n", spec.token)
    );
    assert_eq!(mode, 0o600, "the token must be readable by root only");
    let (unit, mode) = d.read(UNIT_PATH);
    assert_eq!(String::from_utf8(unit).unwrap(), guest_unit(spec.channel));
    assert_eq!(mode, 0o644);
    if let Some(setup) = &spec.setup {
        let (script, mode) = d.read(SETUP_SCRIPT_PATH);
        assert!(script == setup.contents, "setup script differs");
        assert_eq!(mode, 0o700, "setup script mode");
    }
    for f in &spec.files {
        let guest = format!("/opt/lab/{}", f.path);
        let (bytes, mode) = d.read(&guest);
        assert!(bytes == f.contents, "`{guest}`: contents differ");
        assert_eq!(mode, f.mode, "`{guest}`: mode {mode:o}, want {:o}", f.mode);
        let meta = std::fs::metadata(d.file(&guest)).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "`{guest}`: owner");
    }
    for file in d.report["files"].as_array().unwrap() {
        assert_eq!(file["owner"], "root:root", "{file}");
        assert!(file["permissions"].is_string(), "{file}");
    }

    let mut expected: Vec<String> = [AGENT_PATH, TOKEN_PATH, UNIT_PATH]
        .iter()
        .map(|p| p.to_string())
        .chain(spec.setup.as_ref().map(|_| SETUP_SCRIPT_PATH.to_owned()))
        .chain(
            spec.serial_autologin
                .then(|| autologin_dropin_path(spec.arch.serial_console())),
        )
        .chain(spec.files.iter().map(|f| format!("/opt/lab/{}", f.path)))
        .collect();
    expected.sort();
    assert_eq!(
        d.written(),
        expected,
        "the delivery wrote other files than the payload's (temp files left, or an \
         install-error record?)"
    );
}

#[test]
fn labs_round_trip_through_yaml_and_json_secrets() {
    for lab in labs() {
        let spec = spec_for(&lab);
        let ud = user_data(&spec);
        for format in [Format::Yaml, Format::Json] {
            let d = deliver(&secret(&ud, format));
            assert_delivered(&spec, &d);
            assert_eq!(d.report["user_data_len"], ud.as_bytes().len());
            assert_eq!(
                d.report["parts"][0]["bytes"].as_u64().unwrap() as usize,
                ud.cloud_config().len(),
                "the YAML cloud-init parses is the cloud-config part alone"
            );
            assert_eq!(d.report["metadata"]["name"], "round-trip");
            assert_eq!(
                d.report["metadata"]["labels"]["tt-lab.example/environment"],
                "dev"
            );
        }
    }
}

/// The commands, exactly, and the script cloud-init makes of them.
#[test]
fn commands_are_what_the_guest_runs() {
    let spec = spec_for(&crate::support::fixture_lab());
    let d = deliver(&secret(&user_data(&spec), Format::Yaml));
    assert_eq!(
        d.report["keys"],
        json!(["bootcmd", "runcmd", "write_files"])
    );
    assert_eq!(
        d.report["bootcmd"],
        json!([
            [
                "install",
                "-d",
                "-m",
                "0700",
                "/etc/lab-agent",
                "/var/lib/lab-agent"
            ],
            ["mkdir", "-p", "/opt/lab"]
        ])
    );
    assert_eq!(
        d.report["runcmd"],
        json!([
            ["systemctl", "daemon-reload"],
            [
                "systemctl",
                "enable",
                "--now",
                "--no-block",
                "lab-agent.service"
            ],
            [
                "systemctl",
                "restart",
                "--no-block",
                "serial-getty@ttyS0.service"
            ],
            [
                "/usr/local/bin/lab-agent",
                "setup",
                "--script",
                "/etc/lab-agent/setup.sh",
                "--timeout",
                "120",
                "--min-root-bytes",
                "4294967296",
                "--on-small-root",
                "warn",
                "--lab-dir",
                "/opt/lab"
            ]
        ])
    );
    let script = d.report["runcmd_script"].as_str().unwrap();
    assert!(
        script.starts_with("#!/bin/sh\n'systemctl' 'daemon-reload'\n"),
        "{script}"
    );
    assert!(
        !script.contains("cloud-init status"),
        "never wait for cloud-init inside it"
    );
    let (dropin, _) = d.read(&autologin_dropin_path("ttyS0"));
    let dropin = String::from_utf8(dropin).unwrap();
    // systemd reads `\\u` as `\u`, which agetty replaces with the user name.
    assert!(
        dropin
            .contains("ExecStart=\nExecStart=-/sbin/agetty -o '-p -f -- \\\\u' --autologin root "),
        "{dropin}"
    );
}

#[test]
fn without_autologin_or_setup() {
    let mut spec = PayloadSpec::new("bare", crate::support::agent(), TOKEN);
    spec.serial_autologin = false;
    let d = deliver(&secret(&user_data(&spec), Format::Json));
    assert_delivered(&spec, &d);
    assert!(!d.file(&autologin_dropin_path("ttyS0")).exists());
    let runcmd = d.report["runcmd"].to_string();
    assert!(!runcmd.contains("serial-getty"), "{runcmd}");
    // Setup still runs, with no script: it records "succeeded".
    assert_eq!(
        d.report["runcmd"][2],
        json!(["/usr/local/bin/lab-agent", "setup", "--lab-dir", "/opt/lab"])
    );
}

/// Names and contents that break hand-written YAML, through the real parser.
#[test]
fn hostile_names_and_contents_arrive_intact() {
    let long_line = "x: y # z ".repeat(40_000);
    // Incompressible and valid UTF-8, so it travels as text or base64.
    let mut seed = 0x0123_4567_89ab_cdef_u64;
    let noisy_text: String = (0..60_000)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            char::from(b' ' + (seed >> 40) as u8 % 95)
        })
        .collect();
    let contents: Vec<(&str, Vec<u8>)> = vec![
        ("a: b.txt", b"key: value\n".to_vec()),
        (
            "quote\"d'.txt",
            b"\"double\" and 'single' quotes\n".to_vec(),
        ),
        ("---", b"---\n...\n--- !tag &anchor *alias\n".to_vec()),
        (
            " leading space.txt",
            b"  two leading spaces\n\n\ttab first\n   \n".to_vec(),
        ),
        ("#hash", b"# not a comment\nx # nor this\n".to_vec()),
        (
            "trailing space ",
            b"trailing spaces   \nand tabs\t\t\n".to_vec(),
        ),
        ("back\\slash", b"\\ at start, \\n literal, end \\".to_vec()),
        (
            "ünï ✓/日本語.txt",
            "ünïcödé ✓ 日本語 🦀\n".as_bytes().to_vec(),
        ),
        (
            "bytes/not-utf8.bin",
            vec![0xff, 0xfe, 0x00, 0x85, 0xc3, 0x28, b'\n'],
        ),
        ("bytes/nul.txt", b"nul\x00inside\n".to_vec()),
        (
            "bytes/yaml-breaks.txt",
            "nel\u{85}ls\u{2028}ps\u{2029}bom\u{feff}\n"
                .as_bytes()
                .to_vec(),
        ),
        ("crlf.txt", b"windows\r\nline\r\nends\r\n".to_vec()),
        ("no-newline", b"no newline at end".to_vec()),
        ("newlines", b"\n\n\n".to_vec()),
        ("empty", Vec::new()),
        ("quote-line", b"\"\n\"\n".to_vec()),
        (
            "directive",
            b"%YAML 1.1\n- item\n? key\n: value\n{flow: [seq]}\n".to_vec(),
        ),
        ("long/line.txt", long_line.into_bytes()),
        ("long/noise.txt", noisy_text.into_bytes()),
    ];
    let modes = [0o644, 0o600, 0o755, 0o4755, 0o640, 0o444];
    let files: Vec<LabFile> = contents
        .into_iter()
        .enumerate()
        .map(|(i, (path, contents))| LabFile {
            path: path.into(),
            mode: modes[i % modes.len()],
            contents,
        })
        .collect();
    let mut spec = PayloadSpec::new("hostile.lab_1", crate::support::agent(), TOKEN);
    spec.files = files;
    spec.setup = Some(SetupScript {
        contents: b"#!/bin/sh\n---\n  key: \"value\" # x\n\xff\xfe\n".to_vec(),
        timeout_secs: 3600,
    });
    let ud = user_data(&spec);
    for format in [Format::Yaml, Format::Json] {
        let d = deliver(&secret(&ud, format));
        assert_delivered(&spec, &d);
    }
}

/// The installer needs only POSIX `sh`, `base64` and `gzip`: busybox's
/// alone deliver the same files, hostile names included.
#[test]
fn the_installer_runs_with_busybox_alone() {
    let mut spec = spec_for(&crate::support::fixture_lab());
    spec.files.push(LabFile {
        path: "ünï ✓/it's \"$(id)\" %s.txt".into(),
        mode: 0o640,
        contents: vec![0, 1, 2, 0xff, b'\n'],
    });
    let d = deliver_with(&secret(&user_data(&spec), Format::Yaml), Tools::Busybox);
    assert_delivered(&spec, &d);
}

/// An installer that cannot finish leaves no half file and says why where
/// `lab-agent setup` will find it: here the agent is not a program this
/// machine runs, so it is not put in place (systemd would restart a broken
/// binary forever) and the lab's files are not written after it.
#[test]
fn a_failing_installer_leaves_no_half_agent_and_records_why() {
    let mut spec = spec_for(&crate::support::fixture_lab());
    spec.agent = lab_agent_cloudinit::AgentSource::Embedded(lab_agent_tests::elf::fake_elf(
        false,
        b"not a real program",
    ));
    let d = deliver(&secret(&user_data(&spec), Format::Yaml));
    assert_eq!(
        d.report["per_instance_failed"]
            .as_str()
            .map(|s| s.contains("lab-agent-install")),
        Some(true),
        "cloud-init must see the installer fail: {}",
        d.report
    );
    let (why, mode) = d.read(INSTALL_ERROR_PATH);
    let why = String::from_utf8(why).unwrap();
    assert!(
        why.starts_with("/usr/local/bin/lab-agent does not run on this machine (x86_64)"),
        "{why}"
    );
    assert_eq!(mode & 0o077, 0, "the record is in root's private state dir");
    let mut expected = [
        INSTALL_ERROR_PATH,
        TOKEN_PATH,
        &autologin_dropin_path("ttyS0"),
        UNIT_PATH,
    ]
    .map(String::from)
    .to_vec();
    expected.sort();
    assert_eq!(
        d.written(),
        expected,
        "no agent, no temp file, nothing after the failure"
    );
}

/// A VM on an amd64 node that was given the arm64 payload (the backend
/// rendered for the wrong node): the installer reads the agent's ELF machine
/// before running it, refuses it with a reason that names both
/// architectures, and the agent's readiness reports that reason as
/// `failed`, so the backend hears at once what is wrong instead of timing
/// out. (This machine is the "amd64 node": the delivery runs here.)
#[test]
fn an_agent_for_another_architecture_is_refused_by_name_and_readiness_says_so() {
    assert_eq!(
        std::env::consts::ARCH,
        "x86_64",
        "this test plays an amd64 node"
    );
    let spec = crate::support::arm64_spec_for(&crate::support::fixture_lab());
    let d = deliver(&secret(&user_data(&spec), Format::Yaml));
    let (why, _) = d.read(INSTALL_ERROR_PATH);
    let why = String::from_utf8(why).unwrap();
    assert_eq!(
        why,
        "/usr/local/bin/lab-agent is built for aarch64 (--arch arm64), and this machine is \
         x86_64 (--arch amd64): render this VM's payload for its architecture\n"
    );
    assert!(!d.file(AGENT_PATH).exists(), "no agent put in place");
    // The arm64 payload's autologin is for arm64's console, written before
    // the installer ran.
    assert!(d.file(&autologin_dropin_path("ttyAMA0")).exists());

    // What the VM's agent would say: `lab-agent setup` (runcmd) records the
    // installer's failure, and `/v1/ready` reports it. The host's agent
    // plays the guest's, on the delivered state dir.
    let state = d.file("/var/lib/lab-agent");
    let agent = lab_agent_tests::local::agent_bin();
    let setup = std::process::Command::new(&agent)
        .args(["setup", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!setup.status.success(), "setup must fail: {setup:?}");
    let dir = crate::support::TempDir::new("wrong-arch");
    let token = lab_agent_tests::local::new_token();
    let token_file = dir.path().join("token");
    lab_agent_tests::local::write_token(&token_file, &token);
    let addr_file = dir.path().join("addr");
    let mut serve = std::process::Command::new(&agent)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-cloud-init",
            "--addr-file",
        ])
        .arg(&addr_file)
        .arg("--token-file")
        .arg(&token_file)
        .arg("--state-dir")
        .arg(&state)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr = lab_agent_proto::addr_file::wait(
        &addr_file,
        &mut serve,
        std::time::Duration::from_secs(20),
    );
    let ready = addr.map(|addr| get_ready(addr, &token));
    let _ = serve.kill();
    let _ = serve.wait();
    let ready = ready.unwrap();
    assert_eq!(ready["state"], "failed", "{ready}");
    let reason = ready["reason"].as_str().unwrap();
    assert!(
        reason.contains("built for aarch64 (--arch arm64), and this machine is x86_64"),
        "{reason}"
    );
}

/// `GET /v1/ready` over a plain socket: the JSON body.
fn get_ready(addr: std::net::SocketAddr, token: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        s,
        "GET /v1/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
}
