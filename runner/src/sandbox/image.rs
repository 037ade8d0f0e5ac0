//! A guest image as the sandbox's root (`--sandbox-image IMAGE`): the
//! sandbox of [`super`], with the overlay's lower layer the image's root
//! file system instead of this machine's disks, so a lab meets the guest's
//! own users, packages and `/etc` at sandbox speed.
//!
//! The image is a raw disk image (a partition table, the root file system
//! in the largest ext2/3/4 partition, as cloud images and the VM tests'
//! `disk.raw` are) or such a file system alone (`rootfs.raw`); a qcow2 or
//! a compressed image is refused with the command that converts it
//! ([`Image::probe`], before anything starts).
//!
//! How it is mounted, read-only, and never left behind: the kernel mounts
//! a file system only from a block device, and the only ones a file can be
//! without a user-space file system (FUSE's `fuse2fs`, not part of a
//! Debian or Ubuntu install) are loop devices. The keeper, in its private
//! mount namespace, attaches the image to a free loop device read-only
//! and with autoclear (`LOOP_CONFIGURE`, `LO_FLAGS_READ_ONLY |
//! LO_FLAGS_AUTOCLEAR`; the file opened read-only), mounts it `ro,noload`
//! (no journal replay: nothing is ever written to the image) and closes
//! the device: from then on only the mount holds it, and the mount lives
//! only in the keeper's and init's namespaces, so when the last of their
//! processes ends (the try ends, `--stop`, a `kill -9` of everything) the
//! kernel drops the mount and autoclear detaches the loop device. Nothing
//! is mounted on the machine, and `losetup -a` lists the device only while
//! the sandbox lives.

use crate::Error;
use nix::libc;
use nix::mount::{MsFlags, mount};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A sector of a partition table: every table here counts 512 bytes.
const SECTOR: u64 = 512;

/// The guest image a sandbox's root is made from, probed: where its root
/// file system is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The image file, absolute.
    pub path: PathBuf,
    /// The root file system's first byte in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub size: u64,
    /// Its partition's number (1-based), `None` for a file system image.
    pub partition: Option<u32>,
}

impl Image {
    /// Finds the root file system in `path`: the image itself when it is
    /// an ext2/3/4 file system, else its largest ext2/3/4 partition (MBR or
    /// GPT). Refuses what the sandbox cannot mount, saying what would do.
    pub fn probe(path: &Path) -> Result<Image, Error> {
        let shown = path.display();
        let abs = std::path::absolute(path)
            .map_err(|e| Error::usage(format!("failed to resolve `{shown}`")).with_source(e))?;
        let mut file = File::open(&abs).map_err(|e| {
            Error::usage(format!("failed to open the sandbox image `{shown}`")).with_source(e)
        })?;
        let len = file
            .metadata()
            .map_err(|e| Error::usage(format!("failed to read `{shown}`")).with_source(e))?
            .len();
        let head = read_at(&mut file, 0, 4096);
        if let Some(format) = not_raw(&head) {
            let raw = abs.with_extension("raw");
            return Err(Error::usage(format!(
                "`{shown}` is {format}: the sandbox mounts a raw image (a disk image, or its root \
                 file system alone)"
            ))
            .hint(match format {
                f if f.starts_with("compressed") => {
                    "unpack it first (`xz -d`, `gunzip`, `zstd -d`; a Debian cloud image's \
                     `.tar.xz` holds `disk.raw`)"
                        .to_owned()
                }
                _ => format!(
                    "convert it once with `qemu-img convert -O raw {} {}` and give that (`--vm` \
                     boots the image as it is)",
                    abs.display(),
                    raw.display()
                ),
            }));
        }
        if fs_at(&mut file, 0) == Some("ext") {
            return Ok(Image {
                path: abs,
                offset: 0,
                size: len,
                partition: None,
            });
        }
        let parts = partitions(&mut file, &head);
        let mut others = Vec::new();
        let mut best: Option<(u32, u64, u64)> = None;
        for (n, offset, size) in parts {
            if offset.saturating_add(size) > len {
                continue;
            }
            match fs_at(&mut file, offset) {
                Some("ext") if best.is_none_or(|(_, _, s)| size > s) => {
                    best = Some((n, offset, size))
                }
                Some("ext") | None => {}
                Some(other) => others.push(format!("partition {n} holds {other}")),
            }
        }
        match best {
            Some((n, offset, size)) => Ok(Image {
                path: abs,
                offset,
                size,
                partition: Some(n),
            }),
            None => Err(Error::usage(format!(
                "`{shown}` holds no ext2/3/4 file system the sandbox can mount{}",
                if others.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", others.join(", "))
                }
            ))
            .hint(
                "give a raw disk image whose root is ext2/3/4 (Debian's and Ubuntu's cloud \
                 images are), or its root file system alone; other guests: `--vm IMAGE` boots them",
            )),
        }
    }

    /// `` `disk.raw` partition 1 (ext4, 3.0 GiB) `` for messages.
    pub fn describe(&self) -> String {
        let part = self
            .partition
            .map_or(String::new(), |n| format!(" partition {n}"));
        format!(
            "`{}`{part} ({:.1} GiB)",
            self.path.display(),
            self.size as f64 / (1u64 << 30) as f64
        )
    }
}

/// What `head` shows the file is when it is not raw: a format qemu-img
/// converts, or a compressed file.
fn not_raw(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    Some(match () {
        _ if at(0, b"QFI\xfb") => "a qcow2 image",
        _ if at(0, b"KDMV") => "a VMDK image",
        _ if at(0, b"vhdxfile") => "a VHDX image",
        _ if at(0x40, b"\x7f\x10\xda\xbe") => "a VDI image",
        _ if at(0, b"\xfd7zXZ\0") => "compressed (xz)",
        _ if at(0, b"\x1f\x8b") => "compressed (gzip)",
        _ if at(0, b"\x28\xb5\x2f\xfd") => "compressed (zstd)",
        _ => return None,
    })
}

/// `len` bytes at `offset` (fewer at the end of the file, none on error).
fn read_at(file: &mut File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(len);
    if file.seek(SeekFrom::Start(offset)).is_ok() {
        let _ = file.take(len as u64).read_to_end(&mut buf);
    }
    buf
}

/// The kind of file system whose superblock starts at `offset`, by its
/// magic: `ext` (2, 3 or 4: 0xEF53 at 1080), `xfs`, `btrfs`.
fn fs_at(file: &mut File, offset: u64) -> Option<&'static str> {
    if read_at(file, offset + 1080, 2) == [0x53, 0xEF] {
        return Some("ext");
    }
    if read_at(file, offset, 4) == b"XFSB" {
        return Some("xfs");
    }
    if read_at(file, offset + 0x10040, 8) == b"_BHRfS_M" {
        return Some("btrfs");
    }
    None
}

/// The partitions of an MBR or GPT disk: (number, offset, size) in bytes.
fn partitions(file: &mut File, head: &[u8]) -> Vec<(u32, u64, u64)> {
    if head.len() < 512 || head[510..512] != [0x55, 0xAA] {
        return Vec::new();
    }
    let le32 = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
    let le64 = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    let mbr: Vec<(u32, u8, u64, u64)> = (0..4)
        .map(|i| {
            let e = &head[446 + 16 * i..446 + 16 * (i + 1)];
            (i as u32 + 1, e[4], le32(e, 8) as u64, le32(e, 12) as u64)
        })
        .filter(|&(_, kind, _, sectors)| kind != 0 && sectors > 0)
        .collect();
    if !mbr.iter().any(|&(_, kind, _, _)| kind == 0xEE) {
        // Extended partitions hold logical ones, not a file system.
        return mbr
            .into_iter()
            .filter(|&(_, kind, _, _)| !matches!(kind, 0x05 | 0x0F | 0x85))
            .map(|(n, _, lba, sectors)| (n, lba * SECTOR, sectors * SECTOR))
            .collect();
    }
    // A protective MBR: the GPT header is at LBA 1.
    let header = read_at(file, SECTOR, 92);
    if header.len() < 92 || &header[..8] != b"EFI PART" {
        return Vec::new();
    }
    let (entries, count, size) = (le64(&header, 72), le32(&header, 80), le32(&header, 84));
    if !(128..=4096).contains(&size) {
        return Vec::new();
    }
    let count = count.min(1024);
    let table = read_at(file, entries * SECTOR, (count * size) as usize);
    table
        .chunks_exact(size as usize)
        .enumerate()
        .filter(|(_, e)| e[..16].iter().any(|b| *b != 0))
        .filter_map(|(i, e)| {
            let (first, last) = (le64(e, 32), le64(e, 40));
            (last >= first).then(|| (i as u32 + 1, first * SECTOR, (last - first + 1) * SECTOR))
        })
        .collect()
}

/// `linux/loop.h`'s `struct loop_info64`.
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

/// `linux/loop.h`'s `struct loop_config` (`LOOP_CONFIGURE`, Linux ≥ 5.8).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// In the keeper, after its mounts were made private: the image's root
/// file system mounted read-only on `target` through a loop device that
/// goes when the mount does (see the module's comment).
pub(super) fn mount_image(image: &Image, target: &Path) -> Result<(), String> {
    let shown = image.path.display();
    let file = File::open(&image.path).map_err(|e| format!("failed to open `{shown}`: {e}"))?;
    let ctl = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(|e| {
            format!(
                "failed to open `/dev/loop-control` ({e}): the sandbox mounts `{shown}` through \
                 a loop device, which this machine does not offer here (a container?); \
                 `--vm IMAGE` boots the image instead"
            )
        })?;
    let mut info = LoopInfo64 {
        device: 0,
        inode: 0,
        rdevice: 0,
        offset: image.offset,
        sizelimit: image.size,
        number: 0,
        encrypt_type: 0,
        encrypt_key_size: 0,
        flags: LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR,
        file_name: [0; 64],
        crypt_name: [0; 64],
        encrypt_key: [0; 32],
        init: [0; 2],
    };
    // What `losetup -a` shows while the sandbox lives.
    for (d, s) in info
        .file_name
        .iter_mut()
        .zip(image.path.as_os_str().as_bytes().iter().take(63))
    {
        *d = *s;
    }
    let config = LoopConfig {
        fd: file.as_raw_fd() as u32,
        block_size: 0,
        info,
        reserved: [0; 8],
    };
    // Another process may take the free device first: ask again.
    let mut last = String::new();
    for _ in 0..16 {
        // SAFETY: an ioctl without argument on a descriptor we own.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("failed to find a free loop device: {e}"));
        }
        let dev_path = format!("/dev/loop{n}");
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .open(&dev_path)
            .map_err(|e| format!("failed to open `{dev_path}`: {e}"))?;
        let fd = dev.as_raw_fd();
        // SAFETY: the ioctls of `linux/loop.h` with the structs they take,
        // which outlive the calls.
        let configured = unsafe { libc::ioctl(fd, LOOP_CONFIGURE as _, &config) } == 0 || {
            let e = std::io::Error::last_os_error();
            last = format!("`{dev_path}`: {e}");
            // Before Linux 5.8: the file, then its window and flags.
            matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOTTY))
                && unsafe { libc::ioctl(fd, LOOP_SET_FD as _, file.as_raw_fd()) } == 0
                && (unsafe { libc::ioctl(fd, LOOP_SET_STATUS64 as _, &config.info) } == 0 || {
                    last = format!("`{dev_path}`: {}", std::io::Error::last_os_error());
                    unsafe { libc::ioctl(fd, LOOP_CLR_FD as _, 0) };
                    false
                })
        };
        if !configured {
            continue;
        }
        // Read-only, no journal replay, no device nodes of the image's.
        let flags = MsFlags::MS_RDONLY | MsFlags::MS_NODEV;
        let mounted = mount(
            Some(dev_path.as_str()),
            target,
            Some("ext4"),
            flags,
            Some("noload"),
        );
        // Closing the device (and the file) leaves the mount its only
        // holder: autoclear detaches it when the mount goes (or now, if
        // the mount failed).
        drop(dev);
        return mounted.map_err(|e| {
            format!(
                "failed to mount `{shown}`{} read-only from `{dev_path}`: {e}",
                image
                    .partition
                    .map_or(String::new(), |n| format!(" (partition {n})"))
            )
        });
    }
    Err(format!(
        "failed to attach `{shown}` to a loop device (last: {last})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp(name: &str, bytes: &[(u64, &[u8])], len: u64) -> PathBuf {
        let p = std::env::temp_dir().join(format!("labctl-img-{}-{name}", std::process::id()));
        let mut f = File::create(&p).unwrap();
        f.set_len(len).unwrap();
        for (at, b) in bytes {
            f.seek(SeekFrom::Start(*at)).unwrap();
            f.write_all(b).unwrap();
        }
        p
    }

    fn mbr_entry(kind: u8, lba: u32, sectors: u32) -> Vec<u8> {
        let mut e = vec![0u8; 16];
        e[4] = kind;
        e[8..12].copy_from_slice(&lba.to_le_bytes());
        e[12..16].copy_from_slice(&sectors.to_le_bytes());
        e
    }

    #[test]
    fn the_largest_ext_partition_is_the_root() {
        let ext = [0x53u8, 0xEF];
        let (p1, p2) = (2048u64 * SECTOR, 6144u64 * SECTOR);
        let mut table = mbr_entry(0x0c, 2048, 4096);
        table.extend(mbr_entry(0x83, 6144, 8192));
        let disk = temp(
            "mbr",
            &[
                (446, &table),
                (510, &[0x55, 0xAA]),
                (p1 + 1080, &ext),
                (p2 + 1080, &ext),
            ],
            p2 + 8192 * SECTOR,
        );
        let image = Image::probe(&disk).unwrap();
        assert_eq!(
            (image.partition, image.offset, image.size),
            (Some(2), p2, 8192 * SECTOR)
        );
        assert!(image.describe().contains("partition 2"), "{image:?}");
        let fs = temp("fs", &[(1080, &ext)], 1 << 20);
        assert_eq!(Image::probe(&fs).unwrap().partition, None);
        let _ = std::fs::remove_file(disk);
        let _ = std::fs::remove_file(fs);
    }

    #[test]
    fn a_qcow2_is_refused_with_the_command_that_converts_it() {
        let q = temp("q.qcow2", &[(0, b"QFI\xfb\0\0\0\x03")], 4096);
        let e = Image::probe(&q).unwrap_err();
        let (msg, hints) = (e.to_string(), e.hint_lines().join("\n"));
        assert!(msg.contains("is a qcow2 image"), "{msg}");
        assert!(
            hints.contains(&format!(
                "qemu-img convert -O raw {} {}",
                q.display(),
                q.with_extension("raw").display()
            )),
            "{hints}"
        );
        let none = temp("none", &[], 1 << 20);
        let e = Image::probe(&none).unwrap_err().to_string();
        assert!(e.contains("holds no ext2/3/4 file system"), "{e}");
        let _ = std::fs::remove_file(q);
        let _ = std::fs::remove_file(none);
    }
}
