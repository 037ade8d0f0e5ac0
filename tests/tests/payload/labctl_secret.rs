//! `labctl secret` end to end, in process: what it writes where, with which
//! modes, what stdout carries (data only), and its exit statuses.

use crate::support::{TempDir, deliver, fixture_lab, mode};
use lab_agent_tests::elf::fake_elf;
use labctl::Failure;
use labctl::secret::{Config, ManifestFormat, Report, SecretArgs, execute};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A run's result and what it printed.
struct Run {
    /// A failure as `labctl secret` prints it and exits with it.
    result: Result<Report, Failure>,
    stdout: String,
    stderr: String,
}

fn run(args: &SecretArgs) -> Run {
    let (mut out, mut log) = (Vec::new(), Vec::new());
    let result = Config::from_args(args)
        .and_then(|config| execute(&config, &mut out, &mut log))
        .map_err(Failure::from);
    Run {
        result,
        stdout: String::from_utf8(out).unwrap(),
        stderr: String::from_utf8(log).unwrap(),
    }
}

impl Run {
    fn report(&self) -> &Report {
        match &self.result {
            Ok(r) => r,
            Err(e) => panic!("labctl secret failed:\n{}{}", self.stderr, e.render(false)),
        }
    }

    /// The exit status and the full stderr, error included.
    fn failure(&self) -> (u8, String) {
        let e = self
            .result
            .as_ref()
            .expect_err("labctl secret should have failed");
        (e.exit.code(), format!("{}{}", self.stderr, e.render(false)))
    }
}

/// A copy of the static agent in `dir`, and default arguments using it.
fn args(dir: &TempDir, lab: &Path) -> (SecretArgs, Vec<u8>) {
    let agent = crate::support::agent();
    let agent_path = dir.write("lab-agent", &agent);
    let args = SecretArgs {
        lab_dir: lab.to_owned(),
        name: "hello-userdata".into(),
        namespace: None,
        labels: Vec::new(),
        token_file: None,
        arch: None,
        agent: Some(agent_path),
        format: ManifestFormat::Yaml,
        output: None,
        user_data_out: None,
        token_out: None,
        no_autologin: false,
        agent_from: labctl::secret::AgentFromArg::Embedded,
        channel: Default::default(),
        json: false,
        vm: None,
        params: Vec::new(),
    };
    (args, agent)
}

#[test]
fn writes_secret_user_data_and_token_privately() {
    let dir = TempDir::new("labctl");
    let (mut a, agent) = args(&dir, &fixture_lab());
    let out = |name: &str| -> PathBuf { dir.path().join(name) };
    a.namespace = Some("lab-vms".into());
    a.labels = vec![
        "tt-lab.example/session-id=s-1".into(),
        "tt-lab.example/environment=dev".into(),
    ];
    a.output = Some(out("secret.yaml"));
    a.user_data_out = Some(out("user-data"));
    a.token_out = Some(out("token"));
    let r = run(&a);
    let report = r.report();
    assert_eq!(r.stdout, "", "with -o and no --json, stdout stays empty");
    assert!(
        r.stderr.contains("\nbudget (amd64): agent "),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("of the 1 MiB Secret limit); cloud-init parses "),
        "{}",
        r.stderr
    );
    for f in ["secret.yaml", "user-data", "token"] {
        assert_eq!(mode(&out(f)), 0o600, "{f} holds the token: owner-only");
    }
    let token = std::fs::read_to_string(out("token")).unwrap();
    let token = token.strip_suffix('\n').unwrap();
    assert_eq!(token, report.token);
    assert_eq!(
        token.len(),
        43,
        "32 random bytes, base64url without padding"
    );
    assert!(
        token
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    );
    assert!(report.token_generated);
    assert!(!r.stderr.contains(token), "the token never goes to the log");

    let d = deliver(&std::fs::read_to_string(out("secret.yaml")).unwrap());
    assert_eq!(d.read("/usr/local/bin/lab-agent").0, agent);
    assert_eq!(
        d.read("/etc/lab-agent/token").0,
        format!("{token}\n").into_bytes()
    );
    assert_eq!(d.report["metadata"]["namespace"], "lab-vms");
    assert_eq!(
        d.report["metadata"]["labels"]["tt-lab.example/session-id"],
        "s-1"
    );
    let user_data = std::fs::read(out("user-data")).unwrap();
    assert_eq!(d.report["user_data_len"], user_data.len());
    assert_eq!(report.budget.total_bytes, user_data.len());
    assert_eq!(
        report.budget.cloud_config_bytes as u64,
        d.report["parts"][0]["bytes"].as_u64().unwrap()
    );
}

#[test]
fn json_output_is_one_object_with_the_token_and_the_secret() {
    let dir = TempDir::new("labctl-json");
    let (mut a, _) = args(&dir, &fixture_lab());
    a.json = true;
    a.format = ManifestFormat::Json;
    let r = run(&a);
    let report = r.report();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["token"], report.token.as_str());
    assert_eq!(v["lab"], "fixture-lab");
    assert_eq!(v["budget"]["limit_bytes"], 1024 * 1024);
    let secret: serde_json::Value = serde_json::from_str(v["secret"].as_str().unwrap()).unwrap();
    assert_eq!(secret["kind"], "Secret");
    // The lab's `[readiness] timeout_secs`, for the backend that applies it.
    assert_eq!(
        secret["metadata"]["annotations"]["lab-agent/ready-timeout-secs"],
        "269"
    );
    let d = deliver(v["secret"].as_str().unwrap());
    assert_eq!(
        d.read("/etc/lab-agent/token").0,
        format!("{}\n", report.token).into_bytes()
    );
}

#[test]
fn token_file_is_used_and_checked() {
    let dir = TempDir::new("labctl-token");
    let (mut a, _) = args(&dir, &fixture_lab());
    let mine = "my-own-token-that-is-long-enough-0123456789";
    let file = dir.write("mine", format!("{mine}\n"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    a.token_file = Some(file.clone());
    a.output = Some(dir.path().join("s.yaml"));
    let r = run(&a);
    assert_eq!(r.report().token, mine);
    assert!(!r.report().token_generated);
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);

    std::fs::write(&file, "short\n").unwrap();
    let (code, err) = run(&a).failure();
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid token in") && err.contains("it is 5 characters long"),
        "{err}"
    );

    a.token_file = Some(dir.path().join("missing"));
    let (code, err) = run(&a).failure();
    assert_eq!(code, 2);
    assert!(err.contains("failed to read token file"), "{err}");

    // The one rule every reader applies: a token file others can read is
    // refused, with the fix.
    std::fs::write(&file, format!("{mine}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    a.token_file = Some(file.clone());
    let (code, err) = run(&a).failure();
    assert_eq!(code, 2);
    assert!(err.contains("chmod 600"), "{err}");
}

#[test]
fn a_generated_token_must_be_handed_back() {
    let dir = TempDir::new("labctl-noback");
    let (mut a, _) = args(&dir, &fixture_lab());
    a.output = Some(dir.path().join("s.yaml"));
    let r = run(&a);
    let (code, err) = r.failure();
    assert_eq!(code, 2);
    assert!(err.contains("pass `--token-out FILE` or `--json`"), "{err}");
    assert!(!dir.path().join("s.yaml").exists(), "nothing written");
    assert_eq!(r.stdout, "");
}

/// No usable agent is an input problem like the others: 2 (1 means "a check
/// failed" everywhere else).
#[test]
fn a_dynamic_agent_is_refused_with_a_hint() {
    let dir = TempDir::new("labctl-dyn");
    let (mut a, _) = args(&dir, &fixture_lab());
    a.json = true;
    a.agent = Some(dir.write("dyn-agent", fake_elf(true, b"")));
    let (code, err) = run(&a).failure();
    assert_eq!(code, 2);
    assert!(err.contains("dynamically linked"), "{err}");
    assert!(
        err.contains("hint: run `packaging/build-agent.sh`"),
        "{err}"
    );
}

/// `--arch` picks the agent and the console; the real arm64 agent renders
/// an arm64 payload (its JSON report says so), and an agent of the other
/// machine is refused, naming both, with how to build the right one.
#[test]
fn arch_picks_the_payload_and_a_mismatched_agent_is_refused() {
    use labctl::secret::ArchArg;
    let dir = TempDir::new("labctl-arch");
    let (mut a, amd64) = args(&dir, &fixture_lab());
    a.json = true;
    a.arch = Some(ArchArg::Arm64);
    let (code, err) = run(&a).failure();
    assert_eq!(code, 2);
    assert!(
        err.contains("it is built for amd64 (x86_64), and the lab VM is arm64 (aarch64)"),
        "{err}"
    );
    assert!(
        err.contains("hint: run `packaging/build-agent.sh --arch arm64`"),
        "{err}"
    );
    assert!(!amd64.is_empty());

    a.agent = Some(dir.write("lab-agent-arm64", crate::support::arm64_agent()));
    let r = run(&a);
    let report = r.report();
    assert_eq!(report.arch, "arm64");
    assert_eq!(report.budget.arch, "arm64");
    assert!(
        r.stderr.contains("\nbudget (arm64): agent "),
        "{}",
        r.stderr
    );
    // Without --arch, the given agent's machine decides.
    a.arch = None;
    assert_eq!(run(&a).report().arch, "arm64");
}

#[test]
fn bad_metadata_and_labs_are_usage_errors() {
    let dir = TempDir::new("labctl-usage");
    type Change = fn(&mut SecretArgs);
    let cases: Vec<(Change, &str)> = vec![
        (
            |a| a.name = "Bad_Name".into(),
            "invalid metadata.name `Bad_Name`",
        ),
        (
            |a| a.namespace = Some("a.b".into()),
            "invalid metadata.namespace",
        ),
        (|a| a.labels = vec!["novalue".into()], "has no `=`"),
        (
            |a| a.labels = vec!["k=1".into(), "k=2".into()],
            "given twice",
        ),
        (
            |a| a.labels = vec!["k=white space".into()],
            "invalid value of label `k`",
        ),
        (
            |a| a.lab_dir = "/nonexistent-lab".into(),
            "hint: a lab is a folder",
        ),
    ];
    for (change, want) in cases {
        let (mut a, _) = args(&dir, &fixture_lab());
        a.json = true;
        change(&mut a);
        let r = run(&a);
        let (code, err) = r.failure();
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(want), "{err:?} lacks {want:?}");
        assert_eq!(r.stdout, "", "stdout is for data only");
    }
}

#[test]
fn over_one_mib_fails_after_printing_the_budget() {
    let dir = TempDir::new("labctl-big");
    let lab = dir.path().join("big-lab");
    std::fs::create_dir_all(lab.join("files")).unwrap();
    std::fs::write(
        lab.join("lab.toml"),
        "name = \"big-lab\"\n[files]\nsource = \"files\"\n",
    )
    .unwrap();
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let noise: Vec<u8> = (0..900 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    std::fs::write(lab.join("files/disk.img"), noise).unwrap();
    let (mut a, _) = args(&dir, &lab);
    a.output = Some(dir.path().join("s.yaml"));
    a.token_out = Some(dir.path().join("token"));
    let r = run(&a);
    let (code, err) = r.failure();
    assert_eq!(code, 2);
    assert!(err.contains("budget (amd64): agent "), "{err}");
    assert!(err.contains("over the 1 MiB Secret limit"), "{err}");
    assert!(err.contains("largest parts: `/opt/lab/disk.img`"), "{err}");
    assert!(!dir.path().join("s.yaml").exists());
    assert!(
        !dir.path().join("token").exists(),
        "no token for a Secret that was not made"
    );
}

#[test]
fn no_autologin_leaves_the_console_alone() {
    let dir = TempDir::new("labctl-noauto");
    let (mut a, _) = args(&dir, &fixture_lab());
    a.no_autologin = true;
    a.user_data_out = Some(dir.path().join("ud"));
    a.json = true;
    run(&a).report();
    let ud = std::fs::read_to_string(dir.path().join("ud")).unwrap();
    assert!(!ud.contains("serial-getty"), "{ud}");
}

/// `--channel`: where the unit's `lab-agent serve` listens; `vsock` alone
/// leaves it no TCP address (the agent's default is not used), and the
/// report says which.
#[test]
fn the_channel_is_the_agent_s_command_line() {
    let dir = TempDir::new("labctl-channel");
    let serve = "ExecStart=/usr/local/bin/lab-agent serve";
    for (channel, listens) in [
        ("both", " --listen 0.0.0.0:8899 --listen vsock:8899\\n"),
        ("vsock", " --listen vsock:8899\\n"),
        ("tcp", "\\n"),
    ] {
        let (mut a, _) = args(&dir, &fixture_lab());
        a.channel = channel.parse().unwrap();
        a.user_data_out = Some(dir.path().join(format!("ud-{channel}")));
        a.json = true;
        assert_eq!(run(&a).report().channel, channel);
        let ud = std::fs::read_to_string(dir.path().join(format!("ud-{channel}"))).unwrap();
        assert!(ud.contains(&format!("{serve}{listens}")), "{channel}: {ud}");
    }
    // The command line's default, and a channel that is none.
    let (a, _) = args(&dir, &fixture_lab());
    let agent = a.agent.unwrap();
    let lab = fixture_lab();
    let base = [
        "secret",
        lab.to_str().unwrap(),
        "--name",
        "x",
        "--json",
        "--agent",
    ];
    let out = lab_agent_tests::local::labctl(base.iter().copied().chain([agent.to_str().unwrap()]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["channel"], "both", "{report}");
    let out = lab_agent_tests::local::labctl(base.iter().copied().chain([
        agent.to_str().unwrap(),
        "--channel",
        "serial",
    ]));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("channel must be \"tcp\", \"vsock\" or \"both\""),
        "{err}"
    );
}

/// A parameter value with every byte a shell, YAML or the env file could
/// trip on.
const HOSTILE: &str = "it's \"quoted\"\nsecond line $HOME `id` $(id) \\ %s = é\t";

/// `labctl secret --vm NAME --param …` for each VM of `examples/two-vm-lab`:
/// each Secret has its own token and its VM's setup, and the guest gets the
/// VM's variables byte for byte (delivered through the real cloud-init and
/// installer); the cloud-config stays valid for cloud-init's schema.
#[test]
fn per_vm_secrets_differ_in_token_and_setup_and_carry_the_params() {
    use lab_agent_proto::guest::{ENV_PATH, SETUP_SCRIPT_PATH, TOKEN_PATH, parse_env_file};
    let lab = crate::support::workspace().join("examples/two-vm-lab");
    let dir = TempDir::new("labctl-vms");
    let mut tokens = Vec::new();
    for vm in ["server", "client"] {
        let (mut a, _) = args(&dir, &lab);
        a.vm = Some(vm.into());
        a.params = vec![format!("GREETING={HOSTILE}"), "n_2=a=b".into()];
        a.json = true;
        a.user_data_out = Some(dir.path().join(format!("{vm}.user-data")));
        let r = run(&a);
        let report = r.report();
        assert_eq!(report.vm.as_deref(), Some(vm));
        let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(json["vm"], vm);
        let g = deliver(report.secret.as_deref().unwrap());
        let (env, env_mode) = g.read(ENV_PATH);
        assert_eq!(env_mode, 0o600, "the env file is root's");
        assert_eq!(
            parse_env_file(&env).unwrap(),
            [
                ("LAB_PARAM_GREETING", HOSTILE),
                ("LAB_PARAM_n_2", "a=b"),
                ("LAB_VM", vm),
                ("LAB_VMS", "server client"),
            ]
        );
        let (setup, _) = g.read(SETUP_SCRIPT_PATH);
        assert_eq!(
            setup,
            std::fs::read(lab.join(format!("setup-{vm}.sh"))).unwrap(),
            "{vm} got another VM's setup"
        );
        let (token, _) = g.read(TOKEN_PATH);
        assert_eq!(String::from_utf8(token).unwrap().trim_end(), report.token);
        tokens.push(report.token.clone());
        // The setup's timeout is the VM's (client 180), else the lab's (300).
        let want = if vm == "client" { "180" } else { "300" };
        let timeout = &g.report["runcmd"].as_array().unwrap().last().unwrap();
        let words: Vec<&str> = timeout
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        assert!(
            words.windows(2).any(|w| w == ["--timeout", want]),
            "{words:?}"
        );
        let ud = std::fs::read_to_string(a.user_data_out.as_ref().unwrap()).unwrap();
        let cloud_config = ud
            .split("\n--")
            .find(|p| p.contains("#cloud-config"))
            .and_then(|p| p.split_once("#cloud-config"))
            .map(|(_, rest)| format!("#cloud-config{rest}"))
            .unwrap();
        let file = dir.write(&format!("{vm}.cloud-config"), &cloud_config);
        let out = crate::support::cloud_init_schema(&file);
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Valid"),
            "{vm}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_ne!(tokens[0], tokens[1], "each VM has its own token");
}

/// What a multi-VM lab asks of `--vm` and `--param`, each an exit 2 that
/// says what to pass; a one-VM lab with no parameters writes no env file.
#[test]
fn vm_and_param_mistakes_are_usage_errors() {
    let two = crate::support::workspace().join("examples/two-vm-lab");
    let dir = TempDir::new("labctl-vm-errors");
    let cases: &[(&Path, Option<&str>, &[&str], &str)] = &[
        (
            &two,
            None,
            &[],
            "lab `two-vm-lab` has several VMs (server, client): say which one this payload is for with `--vm NAME`",
        ),
        (
            &two,
            Some("db"),
            &[],
            "no VM named `db`: its VMs are server, client",
        ),
        (
            &fixture_lab(),
            Some("server"),
            &[],
            "is one VM (it has no [[vms]]): leave out `--vm server`",
        ),
        (&two, Some("server"), &["NOEQUALS"], "has no `=`"),
        (&two, Some("server"), &["A-B=1"], "is not a valid key"),
        (&two, Some("server"), &["A=1", "A=2"], "is given twice"),
    ];
    for (lab, vm, params, want) in cases {
        let (mut a, _) = args(&dir, lab);
        a.json = true;
        a.vm = vm.map(str::to_owned);
        a.params = params.iter().map(|p| p.to_string()).collect();
        let (code, stderr) = run(&a).failure();
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(want), "{vm:?} {params:?}: {stderr}");
    }
    // One VM, no parameters: no env file, and no `vm` in the report.
    let (mut a, _) = args(&dir, &fixture_lab());
    a.json = true;
    let r = run(&a);
    assert!(!r.stdout.contains("\"vm\""), "{}", r.stdout);
    let g = deliver(r.report().secret.as_deref().unwrap());
    assert!(
        !g.written()
            .contains(&lab_agent_proto::guest::ENV_PATH.to_owned())
    );
}
