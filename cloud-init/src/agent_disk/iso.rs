//! A minimal ISO 9660 image: one volume, files in the root directory only,
//! no extensions. That is all the agent's disk needs, and what every Linux
//! guest mounts without a package (`mount -t iso9660`, the `isofs` module
//! that NoCloud's `cidata` seed already needs).
//!
//! The layout (2048-byte sectors; ECMA-119 names the fields):
//! sectors 0–15 system area (zeros), 16 the primary volume descriptor,
//! 17 the set terminator, 18/19 the little- and big-endian path tables
//! (the root alone), 20 the root directory, then each file's data from a
//! sector boundary. Dates are fixed, so the same files give the same bytes
//! (a reproducible image, a stable digest for its container image).
//!
//! File names are ISO 9660 "d-characters" (`A-Z 0-9 _`, one `.`): Linux
//! shows them in lower case without the `;1` version (its default
//! `map=normal`), so `AMD64.GZ;1` reads as `amd64.gz` — the same name a
//! ConfigMap key `amd64.gz` gets through KubeVirt's `xorrisofs -rock`.

const SECTOR: usize = 2048;
/// The first sector after the system area.
const PVD: usize = 16;
const L_PATH_TABLE: u32 = 18;
const M_PATH_TABLE: u32 = 19;
const ROOT_DIR: u32 = 20;
/// `19700101000000` with no hundredths, at UTC: a fixed time, ECMA-119 §8.4.26.1.
const VOLUME_DATE: &[u8; 17] = b"1970010100000000\0";

/// One file of the root directory.
#[derive(Debug, Clone, Copy)]
pub struct File<'a> {
    /// As Linux shows it: lower-case letters, digits, `_`, at most one `.`
    /// (see the module docs); [`build`] checks it.
    pub name: &'a str,
    pub data: &'a [u8],
}

/// Why an image could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsoError {
    #[error(
        "file name `{0}` cannot be written to ISO 9660: use 1 to 30 lower-case letters, digits \
         or `_`, with at most one `.`"
    )]
    Name(String),
    #[error("volume label `{0}` cannot be written to ISO 9660: use 1 to 32 of `A-Z 0-9 _ -`")]
    Label(String),
    #[error("the root directory cannot hold {0} files in one sector")]
    TooManyFiles(usize),
    #[error("a file of {0} bytes is over ISO 9660's 4 GiB extent")]
    TooLarge(usize),
}

/// The image of a volume labelled `label` holding `files` in its root.
pub fn build(label: &str, files: &[File<'_>]) -> Result<Vec<u8>, IsoError> {
    let label_ok = (1..=32).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !label_ok {
        return Err(IsoError::Label(label.to_owned()));
    }
    // ECMA-119 §9.3: records sorted by their identifier.
    let mut entries = files
        .iter()
        .map(|f| Ok((identifier(f.name)?, f.data)))
        .collect::<Result<Vec<_>, IsoError>>()?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));

    // Where each file's data starts: after the root directory's sector.
    let mut next = ROOT_DIR + 1;
    let mut placed = Vec::with_capacity(entries.len());
    for (id, data) in &entries {
        let len = u32::try_from(data.len()).map_err(|_| IsoError::TooLarge(data.len()))?;
        placed.push((id.as_slice(), next, len));
        next += len.div_ceil(SECTOR as u32);
    }
    let total_sectors = next;

    let mut root = Vec::with_capacity(SECTOR);
    root.extend(record(&[0], ROOT_DIR, SECTOR as u32, true));
    root.extend(record(&[1], ROOT_DIR, SECTOR as u32, true));
    for (id, lba, len) in &placed {
        root.extend(record(id, *lba, *len, false));
    }
    if root.len() > SECTOR {
        return Err(IsoError::TooManyFiles(files.len()));
    }

    let mut img = vec![0u8; total_sectors as usize * SECTOR];
    let at = |sector: u32| sector as usize * SECTOR;
    img[PVD * SECTOR..(PVD + 1) * SECTOR]
        .copy_from_slice(&primary_descriptor(label, total_sectors));
    let term = &mut img[(PVD + 1) * SECTOR..];
    term[0] = 255;
    term[1..6].copy_from_slice(b"CD001");
    term[6] = 1;
    let (l_table, m_table) = path_tables();
    img[at(L_PATH_TABLE)..][..l_table.len()].copy_from_slice(&l_table);
    img[at(M_PATH_TABLE)..][..m_table.len()].copy_from_slice(&m_table);
    img[at(ROOT_DIR)..][..root.len()].copy_from_slice(&root);
    for ((_, data), (_, lba, _)) in entries.iter().zip(&placed) {
        img[at(*lba)..][..data.len()].copy_from_slice(data);
    }
    Ok(img)
}

/// `amd64.gz` → `AMD64.GZ;1`; a name without a dot gets one (`SUMS.;1`),
/// as ECMA-119 §7.5.1 writes a file identifier.
fn identifier(name: &str) -> Result<Vec<u8>, IsoError> {
    let bad = || IsoError::Name(name.to_owned());
    let ok = (1..=30).contains(&name.len())
        && name.matches('.').count() <= 1
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
    if !ok {
        return Err(bad());
    }
    let mut id = name.to_ascii_uppercase().into_bytes();
    if !name.contains('.') {
        id.push(b'.');
    }
    id.extend_from_slice(b";1");
    Ok(id)
}

/// A directory record (ECMA-119 §9.1).
fn record(id: &[u8], lba: u32, len: u32, dir: bool) -> Vec<u8> {
    let size = 33 + id.len() + (id.len() + 1) % 2;
    let mut r = vec![0u8; size];
    r[0] = size as u8;
    r[2..10].copy_from_slice(&both32(lba));
    r[10..18].copy_from_slice(&both32(len));
    // 1970-01-01 00:00:00 UTC: years since 1900, month, day, h, m, s, offset.
    r[18..25].copy_from_slice(&[70, 1, 1, 0, 0, 0, 0]);
    r[25] = if dir { 2 } else { 0 };
    r[28..32].copy_from_slice(&both16(1));
    r[32] = id.len() as u8;
    r[33..33 + id.len()].copy_from_slice(id);
    r
}

/// The primary volume descriptor (ECMA-119 §8.4).
fn primary_descriptor(label: &str, total_sectors: u32) -> [u8; SECTOR] {
    let mut d = [0u8; SECTOR];
    d[0] = 1;
    d[1..6].copy_from_slice(b"CD001");
    d[6] = 1;
    pad(&mut d[8..40], "LINUX");
    pad(&mut d[40..72], label);
    d[80..88].copy_from_slice(&both32(total_sectors));
    d[120..124].copy_from_slice(&both16(1));
    d[124..128].copy_from_slice(&both16(1));
    d[128..132].copy_from_slice(&both16(SECTOR as u16));
    d[132..140].copy_from_slice(&both32(PATH_TABLE_LEN as u32));
    d[140..144].copy_from_slice(&L_PATH_TABLE.to_le_bytes());
    d[148..152].copy_from_slice(&M_PATH_TABLE.to_be_bytes());
    d[156..190].copy_from_slice(&record(&[0], ROOT_DIR, SECTOR as u32, true));
    pad(&mut d[190..318], "");
    pad(&mut d[318..446], "");
    pad(&mut d[446..574], "");
    pad(&mut d[574..702], "LABCTL AGENT-DISK");
    pad(&mut d[702..813], "");
    for field in [813, 830, 864] {
        d[field..field + 17].copy_from_slice(VOLUME_DATE);
    }
    // No expiration: digits zero, offset zero (§8.4.4).
    d[847..863].fill(b'0');
    d[881] = 1;
    d
}

/// One entry, the root: identifier length, extended attribute length,
/// extent, parent (itself, directory number 1), the identifier 0 and a pad.
const PATH_TABLE_LEN: usize = 10;

fn path_tables() -> ([u8; PATH_TABLE_LEN], [u8; PATH_TABLE_LEN]) {
    let mut l = [0u8; PATH_TABLE_LEN];
    l[0] = 1;
    let mut m = l;
    l[2..6].copy_from_slice(&ROOT_DIR.to_le_bytes());
    l[6..8].copy_from_slice(&1u16.to_le_bytes());
    m[2..6].copy_from_slice(&ROOT_DIR.to_be_bytes());
    m[6..8].copy_from_slice(&1u16.to_be_bytes());
    (l, m)
}

fn pad(field: &mut [u8], text: &str) {
    field.fill(b' ');
    field[..text.len()].copy_from_slice(text.as_bytes());
}

fn both16(v: u16) -> [u8; 4] {
    let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
    [l[0], l[1], b[0], b[1]]
}

fn both32(v: u32) -> [u8; 8] {
    let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
    [l[0], l[1], l[2], l[3], b[0], b[1], b[2], b[3]]
}

/// Reads a file of an image [`build`] made, by its name as Linux shows it;
/// `None` when the image holds no such file. For tests and for `labctl`'s
/// own checks; the guest mounts the image instead.
pub fn read<'a>(img: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let id = identifier(name).ok()?;
    let root = img.get(ROOT_DIR as usize * SECTOR..(ROOT_DIR as usize + 1) * SECTOR)?;
    let mut at = 0;
    while at < root.len() && root[at] != 0 {
        let r = &root[at..at + root[at] as usize];
        let len = r[32] as usize;
        if r[33..33 + len] == id[..] {
            let lba = u32::from_le_bytes(r[2..6].try_into().ok()?) as usize;
            let size = u32::from_le_bytes(r[10..14].try_into().ok()?) as usize;
            return img.get(lba * SECTOR..lba * SECTOR + size);
        }
        at += r[0] as usize;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_linux_shows_them() {
        assert_eq!(identifier("amd64.gz").unwrap(), b"AMD64.GZ;1");
        assert_eq!(identifier("sha256sums").unwrap(), b"SHA256SUMS.;1");
        for bad in ["", "Amd64", "a-b", "a.b.c", ".x", "ü", &"a".repeat(31)] {
            assert!(identifier(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn files_read_back_and_the_layout_holds() {
        let big = vec![7u8; 5000];
        let img = build(
            "LAB-AGENT",
            &[
                File {
                    name: "b.gz",
                    data: &big,
                },
                File {
                    name: "a",
                    data: b"hello\n",
                },
                File {
                    name: "empty",
                    data: b"",
                },
            ],
        )
        .unwrap();
        assert_eq!(&img[PVD * SECTOR + 1..PVD * SECTOR + 6], b"CD001");
        assert_eq!(&img[PVD * SECTOR + 40..PVD * SECTOR + 49], b"LAB-AGENT");
        assert_eq!(img[(PVD + 1) * SECTOR], 255);
        assert_eq!(img.len() % SECTOR, 0);
        // 21 sectors of metadata, then a (1), b.gz (3); empty takes none.
        assert_eq!(img.len(), (21 + 1 + 3) * SECTOR);
        let sectors = u32::from_le_bytes(img[PVD * SECTOR + 80..][..4].try_into().unwrap());
        assert_eq!(sectors as usize * SECTOR, img.len());
        assert_eq!(read(&img, "a"), Some(&b"hello\n"[..]));
        assert_eq!(read(&img, "b.gz"), Some(&big[..]));
        assert_eq!(read(&img, "empty"), Some(&b""[..]));
        assert_eq!(read(&img, "c"), None);
        // The same files give the same bytes.
        let again = build(
            "LAB-AGENT",
            &[
                File {
                    name: "empty",
                    data: b"",
                },
                File {
                    name: "a",
                    data: b"hello\n",
                },
                File {
                    name: "b.gz",
                    data: &big,
                },
            ],
        )
        .unwrap();
        assert_eq!(img, again);
    }

    #[test]
    fn refuses_what_iso_9660_cannot_say() {
        assert_eq!(
            build("lab-agent", &[]).unwrap_err(),
            IsoError::Label("lab-agent".into())
        );
        let many: Vec<String> = (0..80).map(|i| format!("file_number_{i:04}")).collect();
        let files: Vec<File<'_>> = many.iter().map(|n| File { name: n, data: b"" }).collect();
        assert_eq!(build("X", &files).unwrap_err(), IsoError::TooManyFiles(80));
    }
}
