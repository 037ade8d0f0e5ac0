//! `--sandbox-image`: the sandbox on the root file system of the Debian 12
//! guest the VM tests build (`disk.raw`: its partition 1; `rootfs.raw`: a
//! file system alone), not on this machine's. The guest's users and
//! packages are the sandbox's (a user and a compiler this machine has are
//! missing there), the lab's writes are changes against the image, and
//! the image is unchanged afterwards, by hash; the loop device it was
//! mounted through lives as long as the sandbox (a kept one too) and no
//! longer, and nothing of it is mounted on the machine.

use super::*;
use lab_agent_tests::local::static_agent_for;
use lab_agent_tests::vm::{Arch, GuestOs, VmImage};
use std::io::{Read, Seek, SeekFrom, Write};

/// A lab that adds a user and lists what it meets.
const LAB: &str = r#"name = "img"
[setup]
script = "setup.sh"
[[checks]]
name = "users"
run = "cut -d: -f1 /etc/passwd"
initially = "pass"
[[checks]]
name = "compiler"
run = "command -v cc"
"#;

/// The BLAKE2 (`b2sum`) of a sparse file's contents: its length, then
/// each 4 KiB block that is not all zeros, with its offset. Holes read as
/// zeros, and which zero ranges the file system reports as holes depends
/// on its page cache (ext4 calls cached pages over unwritten extents
/// data), so zeros are left out wherever they are: the same bytes, the
/// same hash, and a 3 GiB image of ~0.5 GiB of data hashes in seconds.
fn hash(path: &Path) -> String {
    use nix::unistd::{Whence, lseek};
    const BLOCK: usize = 4096;
    let mut file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as i64;
    let mut b2 = Command::new("b2sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("b2sum (coreutils)");
    let mut sink = std::io::BufWriter::new(b2.stdin.take().unwrap());
    writeln!(sink, "{len}").unwrap();
    let (zero, mut chunk) = ([0u8; BLOCK], vec![0u8; 256 * BLOCK]);
    let mut at = 0i64;
    while at < len {
        let Ok(start) = lseek(&file, at, Whence::SeekData) else {
            break;
        };
        let end = lseek(&file, start, Whence::SeekHole).unwrap();
        let mut offset = start - start % BLOCK as i64;
        file.seek(SeekFrom::Start(offset as u64)).unwrap();
        while offset < end {
            let want = (end - offset).min(chunk.len() as i64) as u64;
            let n = (&mut file).take(want).read(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            for (i, block) in chunk[..n].chunks(BLOCK).enumerate() {
                if block != &zero[..block.len()] {
                    writeln!(sink, "{}", offset + (i * BLOCK) as i64).unwrap();
                    sink.write_all(block).unwrap();
                }
            }
            offset += n as i64;
        }
        at = offset.max(end);
    }
    drop(sink);
    let out = b2.wait_with_output().unwrap();
    assert!(out.status.success());
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    format!(
        "{} {mtime:?}",
        stdout(&out).split_whitespace().next().unwrap()
    )
}

/// The loop devices whose backing file is `image`.
fn loops_of(image: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let backing = e.path().join("loop/backing_file");
        let file = std::fs::read_to_string(backing).unwrap_or_default();
        if Path::new(file.trim()) == image {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

fn lines(v: &Value) -> BTreeSet<String> {
    v.as_str().unwrap().lines().map(str::to_owned).collect()
}

/// The report's check `name`.
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

#[test]
#[cfg_attr(
    vm_guest_left_out = "debian-12",
    ignore = "LAB_AGENT_VM_GUESTS leaves out debian-12"
)]
fn the_guest_images_own_files_and_the_image_unchanged() {
    let _shells = sandboxed();
    require_root("`labctl try --sandbox-image`");
    let image = VmImage::ensure(GuestOs::Debian12).unwrap_or_else(|e| panic!("{e}"));
    let agent = static_agent_for(Arch::Amd64).display().to_string();
    let before = (hash(&image.disk), hash(&image.rootfs));
    let lab = lab_folder("sbx-image", LAB);
    lab.write(
        "setup.sh",
        "#!/bin/bash\nset -e\nuseradd --create-home labctl-sbx-img\n",
        0o755,
    );
    // The image's users, read from the file system without mounting it.
    let debugfs = Command::new("debugfs")
        .args(["-R", "cat /etc/passwd"])
        .arg(&image.rootfs)
        .output()
        .expect("debugfs (e2fsprogs)");
    let image_users: BTreeSet<String> = stdout(&debugfs)
        .lines()
        .filter_map(|l| l.split(':').next())
        .map(str::to_owned)
        .collect();
    assert!(image_users.contains("root"), "{}", describe(&debugfs));

    let disk = image.disk.display().to_string();
    let tried = labctl(
        [
            "try",
            lab.path.to_str().unwrap(),
            "--sandbox-image",
            &disk,
            "--agent",
            &agent,
            "--json",
        ]
        .map(String::from),
    );
    // The guest has no compiler: that check fails.
    assert_eq!(tried.status.code(), Some(1), "{}", describe(&tried));
    let err = stderr(&tried);
    assert!(
        err.contains(&format!("the sandbox's root: `{disk}` partition 1 (")),
        "{err}"
    );
    let v = json(&tried);
    let mut expected = image_users.clone();
    expected.insert("labctl-sbx-img".into());
    assert_eq!(lines(&check(&v, "users")["stdout"]), expected);
    assert_eq!(check(&v, "compiler")["exit_code"], 1, "{v}");
    assert_eq!(strings(&v["changes"]["users_added"]), ["labctl-sbx-img"]);

    // On this machine's root: its users and its compiler.
    let host = labctl(try_args(&lab.path, &["--json"]));
    assert_eq!(host.status.code(), Some(0), "{}", describe(&host));
    let h = json(&host);
    let host_users = lines(&check(&h, "users")["stdout"]);
    let only_here: Vec<&String> = host_users.difference(&expected).collect();
    assert!(
        !only_here.is_empty(),
        "this machine has a user the image lacks: {host_users:?}"
    );
    assert!(
        String::from_utf8_lossy(&host.stderr)
            .contains("note: the sandbox is a copy of this machine"),
        "{}",
        describe(&host)
    );

    // `rootfs.raw`, kept: the loop device lives as long as the sandbox.
    let rootfs = image.rootfs.display().to_string();
    let kept = labctl(
        [
            "test",
            lab.path.to_str().unwrap(),
            "--sandbox-image",
            &rootfs,
            "--agent",
            &agent,
            "--keep",
        ]
        .map(String::from),
    );
    let err = stderr(&kept);
    let dir = staged_dir(&err);
    let d = dir.display().to_string();
    let _stop = Stop(dir.clone());
    // `compiler` never passes: its solve is missing, so it is broken.
    assert_eq!(kept.status.code(), Some(1), "{}", describe(&kept));
    assert_eq!(loops_of(&image.rootfs).len(), 1, "{err}");
    let entered = labctl(["try", "--enter", &d, "--", "cat", "/etc/debian_version"]);
    assert!(
        stdout(&entered).starts_with("12."),
        "{}",
        describe(&entered)
    );
    let graded = labctl(["try", "--grade", &d, "--check", "users", "--json"]);
    assert_eq!(graded.status.code(), Some(0), "{}", describe(&graded));
    let stopped = labctl(["try", "--stop", &d]);
    assert_eq!(stopped.status.code(), Some(0), "{}", describe(&stopped));

    let refused = lab.join("image.qcow2");
    std::fs::write(&refused, b"QFI\xfb\0\0\0\x03").unwrap();
    let q = labctl(try_args(
        &lab.path,
        &["--sandbox-image", refused.to_str().unwrap()],
    ));
    assert_eq!(q.status.code(), Some(2), "{}", describe(&q));
    assert!(
        stderr(&q).contains(&format!(
            "hint: convert it once with `qemu-img convert -O raw {} ",
            refused.display()
        )),
        "{}",
        describe(&q)
    );

    // Nothing left: no loop device on either image, no loop mount, the
    // images as they were.
    assert!(
        eventually(Duration::from_secs(5), || loops_of(&image.rootfs)
            .is_empty()
            && loops_of(&image.disk).is_empty()),
        "a loop device outlived its sandbox"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("/dev/loop"), "{mounts}");
    assert_eq!((hash(&image.disk), hash(&image.rootfs)), before);
}

/// Stops a kept sandbox if an assertion fails first.
struct Stop(PathBuf);

impl Drop for Stop {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = labctl([Path::new("try"), Path::new("--stop"), &self.0]);
        }
    }
}
