//! The VM's life in every answer: which instance (a reboot keeps it, a
//! fresh disk does not), this boot's timeline, the root disk.

use crate::support::*;
use serde_json::{Value, json};
use std::os::unix::fs::symlink;
use std::time::{SystemTime, UNIX_EPOCH};

fn instance_of(agent: &Agent) -> Value {
    past_the_readiness_cache();
    let ready = agent.get("/v1/ready").json();
    let info = agent.get("/v1/info").json();
    assert_eq!(ready["instance"], info["instance"], "{ready}\n{info}");
    ready["instance"].clone()
}

fn is_id(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == 32
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

#[test]
fn one_instance_per_disk_counted_per_boot() {
    let agent = Agent::local("instance");
    let first = instance_of(&agent);
    assert!(is_id(&first["id"]), "{first}");
    assert_eq!(first["boots"], 1);
    assert_eq!(first["boot_id"], boot_id());
    assert!(
        first["first_boot_at"].as_str().unwrap().ends_with('Z'),
        "{first}"
    );

    // Every exec answer says which life of the VM ran it.
    let r = agent.run(json!({"command": "true"}));
    assert_eq!(
        (&r["instance_id"], &r["boot_id"]),
        (&first["id"], &first["boot_id"])
    );

    // The agent restarted within the boot (a crash, `systemctl restart`):
    // the same instance, no boot counted.
    let agent = agent.kill_and_restart();
    assert_eq!(instance_of(&agent), first);

    // A reboot: the record says another boot; the id stays, a boot counts.
    let path = agent.state_dir().join("instance.json");
    let mut earlier = first.clone();
    earlier["boot_id"] = json!("00000000-0000-0000-0000-000000000000");
    earlier["boots"] = json!(2);
    std::fs::write(&path, earlier.to_string()).unwrap();
    let agent = agent.kill_and_restart();
    let rebooted = instance_of(&agent);
    assert_eq!(
        (&rebooted["id"], &rebooted["boots"]),
        (&first["id"], &json!(3))
    );
    assert_eq!(rebooted["first_boot_at"], first["first_boot_at"]);

    // A fresh disk (the write layer is gone): a new instance.
    std::fs::remove_file(&path).unwrap();
    let agent = agent.kill_and_restart();
    let reset = instance_of(&agent);
    assert!(is_id(&reset["id"]) && reset["id"] != first["id"], "{reset}");
    assert_eq!(reset["boots"], 1);
}

/// An exec meant for one life of the VM (`instance_id`) runs on that life
/// only: on another (the disk was reset) the agent answers 409
/// `instance_changed` naming the instance it is, and runs nothing, streamed
/// or not; a malformed id is a 400.
#[test]
fn an_exec_pinned_to_another_instance_runs_nothing() {
    let agent = Agent::local("instance-pin");
    let first = instance_of(&agent);
    let marker = agent.dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let r = agent.run(json!({"command": "echo here", "instance_id": first["id"]}));
    assert_eq!(r["stdout"], "here\n");
    assert_eq!(r["instance_id"], first["id"]);

    std::fs::remove_file(agent.state_dir().join("instance.json")).unwrap();
    let agent = agent.kill_and_restart();
    let reset = instance_of(&agent);
    assert_ne!(reset["id"], first["id"]);
    for stream in [false, true] {
        let r = agent.exec(json!({"command": touch, "instance_id": first["id"], "stream": stream}));
        let msg = r.error(409, "instance_changed");
        assert!(
            msg.contains(&format!(
                "this VM is instance {}",
                reset["id"].as_str().unwrap()
            )) && msg.contains(first["id"].as_str().unwrap())
                && msg.contains("nothing was run"),
            "{msg}"
        );
        assert_eq!(
            r.json()["error"]["instance_id"],
            reset["id"],
            "{}",
            r.text()
        );
    }
    assert!(!marker.exists(), "the command ran on the reset VM");
    let msg = agent
        .exec(json!({"command": touch, "instance_id": "not-an-id"}))
        .error(400, "bad_request");
    assert!(
        msg.contains("`not-an-id` is not 32 lowercase hex digits"),
        "{msg}"
    );
    assert!(!marker.exists());
    let r = agent.run(json!({"command": touch, "instance_id": reset["id"]}));
    assert_eq!(r["exit_code"], 0);
    assert!(marker.exists());
}

/// A record that cannot be trusted is never followed or written through;
/// the disk gets a new identity (what a lost record means), and the agent
/// says so in its log.
#[test]
fn an_untrusted_instance_record_is_replaced() {
    let agent = Agent::local("instance-bad");
    let first = instance_of(&agent);
    let path = agent.state_dir().join("instance.json");

    std::fs::write(&path, "{ not json").unwrap();
    let agent = agent.kill_and_restart();
    let after_corrupt = instance_of(&agent);
    assert!(is_id(&after_corrupt["id"]) && after_corrupt["id"] != first["id"]);
    assert!(agent.log().contains("cannot be trusted"), "{}", agent.log());

    let target = agent.dir.join("planted.json");
    let mut planted = after_corrupt.clone();
    planted["boots"] = json!(99);
    std::fs::write(&target, planted.to_string()).unwrap();
    std::fs::remove_file(&path).unwrap();
    symlink(&target, &path).unwrap();
    let agent = agent.kill_and_restart();
    let after_link = instance_of(&agent);
    assert_ne!(after_link["id"], after_corrupt["id"]);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        planted.to_string()
    );
    assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());

    if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let agent = agent.kill_and_restart();
        let after_foreign = instance_of(&agent);
        assert_ne!(after_foreign["id"], after_link["id"]);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
    }
}

/// What a booted golden brings: the record its agent made under another
/// cloud-init instance. Until cloud-init says which instance this boot is
/// (`.instance-id`), the agent answers with the record as it is; once it
/// has, with an id of this VM's own and the evidence, kept across an agent
/// restart and a reboot.
#[test]
fn a_record_of_another_cloud_init_instance_gets_a_new_id() {
    let agent = Agent::builder("instance-golden").start();
    let ci = agent.cloud_init_dir();
    std::fs::create_dir_all(&ci).unwrap();
    std::fs::write(ci.join(".instance-id"), "golden-boot\n").unwrap();
    let agent = agent.kill_and_restart();
    let golden = instance_of(&agent);
    let path = agent.state_dir().join("instance.json");
    let record = std::fs::read_to_string(&path).unwrap();
    assert!(
        record.contains(r#""cloud_init_instance_id":"golden-boot""#),
        "{record}"
    );

    // The disk, booted as another VM: another boot, another instance-id,
    // which cloud-init writes a moment after the agent started.
    let mut earlier: Value = serde_json::from_str(&record).unwrap();
    earlier["boot_id"] = json!("00000000-0000-0000-0000-000000000000");
    std::fs::write(&path, earlier.to_string()).unwrap();
    std::fs::remove_file(ci.join(".instance-id")).unwrap();
    let agent = agent.kill_and_restart();
    let early = instance_of(&agent);
    assert_eq!((&early["id"], &early["boots"]), (&golden["id"], &json!(2)));
    std::fs::write(ci.join(".instance-id"), "student-vm\n").unwrap();
    let clone = instance_of(&agent);
    assert!(
        is_id(&clone["id"]) && clone["id"] != golden["id"],
        "{clone}"
    );
    assert_eq!(clone["boots"], 1);
    let disk = |agent: &Agent| {
        let ready = agent.get("/v1/ready").json();
        let info = agent.get("/v1/info").json();
        assert_eq!(ready["disk"], info["disk"], "{ready}\n{info}");
        ready["disk"].clone()
    };
    let found = disk(&agent);
    assert_eq!(found["booted_before"], true, "{found}");
    let evidence = found["evidence"].as_array().unwrap();
    let want = format!(
        "the agent's record in {} was made under cloud-init instance `golden-boot`, not this VM's `student-vm`: it came with the disk",
        agent.state_dir().display()
    );
    assert_eq!(evidence[0], want.as_str(), "{found}");
    // Every exec answer names the new life.
    assert_eq!(
        agent.run(json!({"command": "true"}))["instance_id"],
        clone["id"]
    );

    // An agent restart and a reboot keep it, and its evidence.
    let agent = agent.kill_and_restart();
    assert_eq!(instance_of(&agent), clone);
    assert_eq!(disk(&agent), found);
    let mut rebooted: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    rebooted["boot_id"] = json!("00000000-0000-0000-0000-000000000001");
    std::fs::write(&path, rebooted.to_string()).unwrap();
    let agent = agent.kill_and_restart();
    let after = instance_of(&agent);
    assert_eq!((&after["id"], &after["boots"]), (&clone["id"], &json!(2)));
    assert_eq!(disk(&agent), found);
}

/// Without cloud-init (`--no-cloud-init`, a lab tried on a machine) the
/// disk is not judged: `booted_before` is false, with no evidence.
#[test]
fn without_cloud_init_the_disk_is_not_judged() {
    let agent = Agent::local("instance-local");
    let v = agent.get("/v1/ready").json();
    assert_eq!(
        v["disk"],
        json!({"booted_before": false, "evidence": []}),
        "{v}"
    );
}

/// `root.written_bytes_total`: this boot's writes plus every earlier
/// boot's of the same life, as the agent kept them in `STATE_DIR/writes`
/// (at start, every minute and at shutdown); another life's record counts
/// nothing.
#[test]
fn written_bytes_total_adds_up_the_boots_of_a_life() {
    let mut agent = Agent::local("writes");
    let root = |agent: &Agent| {
        past_the_readiness_cache();
        agent.get("/v1/ready").json()["root"].clone()
    };
    if root(&agent)["written_bytes"].is_null() {
        // `/` on no block device here (an overlay): nothing to add up.
        assert!(root(&agent)["written_bytes_total"].is_null());
        return;
    }
    let id = instance_of(&agent)["id"].as_str().unwrap().to_owned();
    let path = agent.state_dir().join("writes");
    let kept = || -> Vec<String> {
        let text = std::fs::read_to_string(&path).unwrap();
        text.split_whitespace().map(str::to_owned).collect()
    };
    let k = kept();
    assert_eq!(
        (&k[0], &k[1], &k[2]),
        (&id, &boot_id(), &"0".to_owned()),
        "kept at start: {k:?}"
    );
    let r = root(&agent);
    assert_eq!(
        r["written_bytes_total"], r["written_bytes"],
        "one boot: {r}"
    );

    // Earlier boots of this life: 1 GB before the last one, which wrote
    // 234 MB by its last record.
    std::fs::write(
        &path,
        format!("{id} an-earlier-boot 1000000000 234000000\n"),
    )
    .unwrap();
    agent = agent.kill_and_restart();
    let r = root(&agent);
    let (now, total) = (
        r["written_bytes"].as_u64().unwrap(),
        r["written_bytes_total"].as_u64().unwrap(),
    );
    assert_eq!(total, now + 1_234_000_000, "{r}");
    // SIGTERM keeps this boot's figure: the next start adds it once.
    agent.signal("TERM");
    assert!(agent.wait_exit(20).success());
    let k = kept();
    assert_eq!((&k[1], k[2].as_str()), (&boot_id(), "1234000000"), "{k:?}");
    assert!(k[3].parse::<u64>().unwrap() >= now, "{k:?}");

    // Another life's record (it came with the disk): counts nothing.
    std::fs::write(
        &path,
        "0123456789abcdef0123456789abcdef an-earlier-boot 1000000000 234000000\n",
    )
    .unwrap();
    let agent = agent.kill_and_restart();
    let r = root(&agent);
    assert_eq!(r["written_bytes_total"], r["written_bytes"], "{r}");
}

/// Seconds since boot on this machine, from the test's side.
fn now_since_boot() -> f64 {
    let up = std::fs::read_to_string("/proc/uptime").unwrap();
    up.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn the_timeline_of_this_boot() {
    let agent = Agent::builder("timeline").start();
    let started = now_since_boot();
    // cloud-init's stages, stamped on the wall clock as cloud-init does.
    let wall_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let boot_wall = wall_now - now_since_boot();
    let ci = agent.cloud_init_dir();
    std::fs::create_dir_all(&ci).unwrap();
    let stage = |start: f64, end: Option<f64>| json!({"errors": [], "start": boot_wall + start, "finished": end.map(|e| boot_wall + e)});
    let status = json!({"v1": {
        "datasource": "DataSourceNoCloud", "stage": "modules-final",
        "init-local": stage(1.0, Some(1.5)),
        "init": stage(2.0, Some(3.0)),
        "modules-config": stage(3.5, Some(4.0)),
        "modules-final": stage(started - 1.0, None),
    }});
    std::fs::write(ci.join("status.json"), status.to_string()).unwrap();

    // Setup runs inside the final stage, as runcmd runs it.
    write_file(&agent.dir.join("setup.sh"), "#!/bin/sh\nsleep 0.2\n", 0o755);
    let out = agent_command()
        .args(["setup", "--script"])
        .arg(agent.dir.join("setup.sh"))
        .arg("--state-dir")
        .arg(agent.state_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    past_the_readiness_cache();
    let v = agent.get("/v1/ready").json();
    assert_eq!(v["state"], "waiting_for_cloud_init", "{v}");
    let t = &v["timeline"];
    let secs = |p: &str| {
        t.pointer(p)
            .and_then(Value::as_f64)
            .unwrap_or_else(|| panic!("{p} in {t}"))
    };
    let near = |got: f64, want: f64| assert!((got - want).abs() < 0.1, "{got} vs {want}: {t}");
    near(secs("/cloud_init/init-local/start_secs"), 1.0);
    near(secs("/cloud_init/init/finished_secs"), 3.0);
    assert!(
        t.pointer("/cloud_init/modules-final/finished_secs")
            .is_none(),
        "{t}"
    );
    let (s0, s1) = (secs("/setup/start_secs"), secs("/setup/finished_secs"));
    assert!(
        started - 0.5 < s0 && s0 + 0.2 <= s1 && s1 < now_since_boot() + 0.1,
        "{t}"
    );
    let agent_at = secs("/agent_started_secs");
    assert!(
        agent_at <= started + 0.1 && agent_at > started - 30.0,
        "{t}"
    );
    assert!(t["ready_secs"].is_null(), "{t}");
    assert!(t["boot_at"].as_str().unwrap().ends_with('Z'));

    // The final stage ends, then result.json appears: ready at the end.
    let end = now_since_boot() + 0.05;
    let mut status = status;
    status["v1"]["modules-final"]["finished"] = json!(boot_wall + end);
    std::fs::write(ci.join("status.json"), status.to_string()).unwrap();
    std::fs::write(agent.dir.join("result"), r#"{"v1":{"errors":[]}}"#).unwrap();
    symlink(agent.dir.join("result"), ci.join("result.json")).unwrap();
    past_the_readiness_cache();
    let v = agent.get("/v1/ready?wait=5").json();
    assert_eq!(v["state"], "ready", "{v}");
    let t = &v["timeline"];
    near(t["ready_secs"].as_f64().unwrap(), end);
    near(
        t["cloud_init"]["modules-final"]["finished_secs"]
            .as_f64()
            .unwrap(),
        end,
    );
}

/// `root` is what `df /` says, in `/v1/ready` and `/v1/info`.
#[test]
fn the_root_disk_is_what_df_says() {
    let agent = Agent::local("root-disk");
    let df = std::process::Command::new("df")
        .args(["-B1", "--output=size,avail", "/"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&df.stdout);
    let nums: Vec<u64> = text
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    for path in ["/v1/ready", "/v1/info"] {
        let v = agent.get(path).json();
        let root = &v["root"];
        assert_eq!(root["size_bytes"].as_u64(), Some(nums[0]), "{path}: {v}");
        let free = root["free_bytes"].as_u64().unwrap();
        // Other tests write meanwhile: within 1 GiB of df's figure.
        assert!(free.abs_diff(nums[1]) < 1 << 30, "{free} vs {}", nums[1]);
        if let Some(w) = root.get("written_bytes") {
            assert!(w.as_u64().is_some(), "{v}");
        }
    }
}
