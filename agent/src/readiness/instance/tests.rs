use super::*;
use std::os::unix::fs::symlink;

fn known(id: &str) -> CloudInitId {
    CloudInitId::Known(id.into())
}

/// A guest tree with no trace of an earlier life: what a never-booted
/// image shows at the first boot of cloud-init instance `this-vm`.
fn fresh_traces(dir: &Path) -> Traces {
    fresh_traces_of(dir, "this-vm")
}

fn fresh_traces_of(dir: &Path, instance: &str) -> Traces {
    let t = Traces {
        cloud_lib: dir.join("var-lib-cloud"),
        machine_id: dir.join("machine-id"),
        ssh_dir: dir.join("ssh"),
    };
    std::fs::create_dir_all(t.cloud_lib.join("instances").join(instance)).unwrap();
    std::fs::create_dir_all(&t.ssh_dir).unwrap();
    // Written now, in this boot (as systemd commits it at first boot).
    std::fs::write(&t.machine_id, "0123456789abcdef0123456789abcdef\n").unwrap();
    t
}

fn observe(state: &Path, ci: &CloudInitId, traces: &Traces) -> Life {
    observe_boot(state, ci, traces).unwrap()
}

fn rewrite(state: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = state.join(INSTANCE_JSON);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

#[test]
fn made_once_then_kept_within_a_boot() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces(dir.path());
    let state = dir.path().join("state");
    let first = observe(&state, &known("this-vm"), &traces);
    assert!(is_instance_id(&first.instance.id), "{first:?}");
    assert_eq!(first.instance.boots, 1);
    assert_eq!(Some(first.instance.boot_id.clone()), current_boot_id());
    assert_eq!(first.disk, Disk::default(), "a never-booted disk");
    assert_eq!(observe(&state, &known("this-vm"), &traces), first);
}

#[test]
fn another_boot_id_counts_a_boot_and_keeps_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces(dir.path());
    let state = dir.path().join("state");
    let first = observe(&state, &known("this-vm"), &traces);
    rewrite(&state, |v| {
        v["boot_id"] = "an-earlier-boot".into();
        v["boots"] = 4.into();
    });
    let now = observe(&state, &known("this-vm"), &traces);
    assert_eq!(
        (now.instance.id.as_str(), now.instance.boots),
        (first.instance.id.as_str(), 5)
    );
    assert_eq!(now.instance.first_boot_at, first.instance.first_boot_at);
}

/// The boot's wall-clock start is taken by the first agent of the boot and
/// kept: a restarted agent says the same millisecond, whatever its own
/// reading of the two clocks (which can round the other way); a record
/// without it (an older agent's) gets it; another boot takes it anew.
#[test]
fn the_boot_time_is_taken_once_per_boot() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces(dir.path());
    let state = dir.path().join("state");
    let first = observe(&state, &known("this-vm"), &traces);
    let measured = first.boot_at_ms.expect("a new record has the boot time");
    assert!(measured.abs_diff(crate::readiness::timeline::boot_epoch_ms()) <= 1);
    rewrite(&state, |v| v["boot_at_ms"] = (measured - 7).into());
    assert_eq!(
        observe(&state, &known("this-vm"), &traces).boot_at_ms,
        Some(measured - 7)
    );
    rewrite(&state, |v| {
        v.as_object_mut().unwrap().remove("boot_at_ms");
    });
    let adopted = observe(&state, &known("this-vm"), &traces).boot_at_ms;
    assert!(
        adopted.is_some_and(|ms| ms.abs_diff(measured) <= 1),
        "{adopted:?}"
    );
    rewrite(&state, |v| {
        v["boot_id"] = "an-earlier-boot".into();
        v["boot_at_ms"] = 1.into();
    });
    let next = observe(&state, &known("this-vm"), &traces).boot_at_ms;
    assert!(
        next.is_some_and(|ms| ms.abs_diff(measured) <= 1),
        "{next:?}"
    );
}

/// The disk of a booted golden: the record of the VM it was booted as
/// (another cloud-init instance-id), cloud-init's dir of that instance, a
/// machine-id and a host key from before this boot. A new id, each
/// finding in a sentence, kept for every later boot of this life.
#[test]
fn a_record_of_another_cloud_init_instance_came_with_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces_of(dir.path(), "golden-boot");
    let state = dir.path().join("state");
    let golden = observe(&state, &known("golden-boot"), &traces);
    assert!(!golden.disk.booted_before, "{:?}", golden.disk);
    // The clone's first boot: cloud-init made this instance's dir.
    std::fs::create_dir_all(traces.cloud_lib.join("instances/this-vm")).unwrap();
    // Before any boot of the machine running the test (a day ago was not,
    // on a machine up for more than a day).
    let long_ago = SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_836_800);
    std::fs::File::options()
        .write(true)
        .open(&traces.machine_id)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    let key = traces.ssh_dir.join("ssh_host_ed25519_key");
    std::fs::write(&key, "k").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&key)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();

    let clone = observe(&state, &known("this-vm"), &traces);
    assert_ne!(clone.instance.id, golden.instance.id);
    assert_eq!(clone.instance.boots, 1);
    assert!(clone.disk.booted_before);
    let e = &clone.disk.evidence;
    assert_eq!(e.len(), 4, "{e:#?}");
    assert!(
        e[0].ends_with("was made under cloud-init instance `golden-boot`, not this VM's `this-vm`: it came with the disk"),
        "{e:#?}"
    );
    assert!(
        e[1].starts_with("cloud-init ran on this disk before as `golden-boot` ("),
        "{e:#?}"
    );
    assert!(e[2].contains("machine-id was written at "), "{e:#?}");
    assert!(
        e[3].contains("ssh_host_ed25519_key (an SSH host key) was made at"),
        "{e:#?}"
    );
    // The judgement is the life's: the next boot tells the same.
    rewrite(&state, |v| v["boot_id"] = "an-earlier-boot".into());
    let later = observe(&state, &known("this-vm"), &traces);
    assert_eq!(
        (later.instance.id.as_str(), later.instance.boots),
        (clone.instance.id.as_str(), 2)
    );
    assert_eq!(later.disk, clone.disk);
}

/// Before cloud-init has said which instance this boot is (the agent
/// starts early in a reboot), the record is taken as it is; once it has,
/// a record of this instance stays, another's is replaced.
#[test]
fn nothing_is_judged_until_cloud_init_says() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces(dir.path());
    let state = dir.path().join("state");
    let first = observe(&state, &known("vm-a"), &traces);
    rewrite(&state, |v| v["boot_id"] = "an-earlier-boot".into());
    let early = observe(&state, &CloudInitId::Pending, &traces);
    assert_eq!(
        (early.instance.id.as_str(), early.instance.boots),
        (first.instance.id.as_str(), 2)
    );
    assert_eq!(observe(&state, &known("vm-a"), &traces), early);
    let other = observe(&state, &known("vm-b"), &traces);
    assert_ne!(other.instance.id, first.instance.id);
    assert!(other.disk.booted_before);
}

/// An older agent's record (no cloud-init instance-id in it) is this VM's:
/// it is kept, and bound from now on.
#[test]
fn an_older_agents_record_is_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces(dir.path());
    let state = dir.path().join("state");
    record::prepare_dir(&state).unwrap();
    let old =
        r#"{"id":"0123456789abcdef0123456789abcdef","boots":3,"boot_id":"b","first_boot_at":"t"}"#;
    std::fs::write(state.join(INSTANCE_JSON), old).unwrap();
    let now = observe(&state, &known("vm-a"), &traces);
    assert_eq!(
        (now.instance.id.as_str(), now.instance.boots),
        ("0123456789abcdef0123456789abcdef", 4)
    );
    assert!(!now.disk.booted_before);
    let text = std::fs::read_to_string(state.join(INSTANCE_JSON)).unwrap();
    assert!(
        text.contains(r#""cloud_init_instance_id":"vm-a""#),
        "{text}"
    );
    assert_ne!(
        observe(&state, &known("vm-b"), &traces).instance.id,
        now.instance.id
    );
}

/// Without cloud-init (`--no-cloud-init`) the record is bound to the
/// machine-id, and no other trace is judged.
#[test]
fn without_cloud_init_the_machine_id_binds() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces(dir.path());
    std::fs::create_dir_all(traces.cloud_lib.join("instances/someone-else")).unwrap();
    let state = dir.path().join("state");
    let here = observe(&state, &CloudInitId::Unwatched, &traces);
    assert_eq!(here.disk, Disk::default());
    assert_eq!(observe(&state, &CloudInitId::Unwatched, &traces), here);
    std::fs::write(&traces.machine_id, "fedcba9876543210fedcba9876543210\n").unwrap();
    let moved = observe(&state, &CloudInitId::Unwatched, &traces);
    assert_ne!(moved.instance.id, here.instance.id);
    assert_eq!(moved.disk.evidence.len(), 1, "{:?}", moved.disk);
    assert!(moved.disk.evidence[0].contains("machine-id `0123456789abcdef0123456789abcdef`"));
}

#[test]
fn cloud_init_ids_are_read_as_printable_text() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(CloudInitId::read(None), CloudInitId::Unwatched);
    assert_eq!(CloudInitId::read(Some(dir.path())), CloudInitId::Pending);
    std::fs::write(dir.path().join(".instance-id"), "\n").unwrap();
    assert_eq!(CloudInitId::read(Some(dir.path())), CloudInitId::Pending);
    std::fs::write(dir.path().join(".instance-id"), "vm-a.ns\x1b[31m\n").unwrap();
    assert_eq!(CloudInitId::read(Some(dir.path())), known("vm-a.ns?[31m"));
}

#[test]
fn an_untrusted_record_is_replaced_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces(dir.path());
    let state = dir.path().join("state");
    record::prepare_dir(&state).unwrap();
    let path = state.join(INSTANCE_JSON);
    for bad in [
        &b"not json"[..],
        br#"{"id":"XYZ","boots":1,"boot_id":"b","first_boot_at":"t"}"#,
        br#"{"id":"0123456789abcdef0123456789abcdef","boots":0,"boot_id":"b","first_boot_at":"t"}"#,
    ] {
        std::fs::write(&path, bad).unwrap();
        let got = observe(&state, &known("this-vm"), &traces);
        assert!(is_instance_id(&got.instance.id) && got.instance.boots == 1);
        assert!(
            !got.disk.booted_before,
            "a lost record is a reset, not evidence"
        );
    }
    // A symlink to a file that looks right is not read, and its target
    // is not written: the link itself is replaced.
    let elsewhere = dir.path().join("elsewhere.json");
    let planted =
        br#"{"id":"0123456789abcdef0123456789abcdef","boots":9,"boot_id":"b","first_boot_at":"t"}"#;
    std::fs::write(&elsewhere, planted).unwrap();
    std::fs::remove_file(&path).unwrap();
    symlink(&elsewhere, &path).unwrap();
    let got = observe(&state, &known("this-vm"), &traces);
    assert_ne!(got.instance.id, "0123456789abcdef0123456789abcdef");
    assert_eq!(std::fs::read(&elsewhere).unwrap(), planted);
    assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
}

/// `serve` and `setup` start together on a first boot: one id.
#[test]
fn concurrent_first_starts_agree() {
    let dir = tempfile::tempdir().unwrap();
    let traces = fresh_traces(dir.path());
    let state = dir.path().join("state");
    let ids: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| s.spawn(|| observe(&state, &known("this-vm"), &traces).instance.id))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
}
