//! A POSIX ustar archive, as the OCI image spec's layers and its
//! `oci-archive` transport use: regular files and directories with their
//! owner and mode, a fixed mtime, so the same input gives the same bytes.

/// One member of the archive.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// A relative path, at most 100 bytes (no ustar prefix is written);
    /// a directory's ends with `/`.
    pub path: &'a str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// `None`: a directory.
    pub data: Option<&'a [u8]>,
}

const BLOCK: usize = 512;

/// The archive of `entries`, in the order given, with the two zero blocks
/// that end it. Panics on a path over 100 bytes: every caller passes
/// constants.
pub fn archive(entries: &[Entry<'_>]) -> Vec<u8> {
    let size: usize = entries
        .iter()
        .map(|e| BLOCK + e.data.map_or(0, |d| d.len().div_ceil(BLOCK) * BLOCK))
        .sum();
    let mut out = Vec::with_capacity(size + 2 * BLOCK);
    for e in entries {
        out.extend_from_slice(&header(e));
        if let Some(data) = e.data {
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    out
}

fn header(e: &Entry<'_>) -> [u8; BLOCK] {
    assert!(e.path.len() <= 100, "tar path over 100 bytes: {}", e.path);
    let mut h = [0u8; BLOCK];
    h[..e.path.len()].copy_from_slice(e.path.as_bytes());
    octal(&mut h[100..108], u64::from(e.mode));
    octal(&mut h[108..116], u64::from(e.uid));
    octal(&mut h[116..124], u64::from(e.gid));
    octal(&mut h[124..136], e.data.map_or(0, |d| d.len() as u64));
    octal(&mut h[136..148], 0); // mtime: the epoch
    h[156] = if e.data.is_some() { b'0' } else { b'5' };
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // The checksum is taken with its own field as spaces (POSIX).
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    octal(&mut h[148..155], u64::from(sum));
    h
}

/// `value` in octal, zero-padded, NUL-terminated, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    assert!(text.len() == digits, "{value} does not fit a tar field");
    field[..digits].copy_from_slice(text.as_bytes());
    field[digits] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_as_posix_writes_them() {
        let a = archive(&[
            Entry {
                path: "disk/",
                mode: 0o555,
                uid: 107,
                gid: 107,
                data: None,
            },
            Entry {
                path: "disk/x.img",
                mode: 0o440,
                uid: 107,
                gid: 107,
                data: Some(b"abc"),
            },
        ]);
        assert_eq!(
            a.len(),
            5 * BLOCK,
            "two headers, one data block, two zero blocks"
        );
        assert_eq!(&a[..5], b"disk/");
        assert_eq!(&a[100..108], b"0000555\0");
        assert_eq!(&a[108..116], b"0000153\0");
        assert_eq!(a[156], b'5');
        let f = &a[BLOCK..];
        assert_eq!(&f[124..136], b"00000000003\0");
        assert_eq!(f[156], b'0');
        assert_eq!(&f[BLOCK..BLOCK + 3], b"abc");
        // The checksum covers the header with its field as spaces.
        let mut h = f[..BLOCK].to_vec();
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        h[148..156].fill(b' ');
        assert_eq!(stored, h.iter().map(|&b| u32::from(b)).sum::<u32>());
        assert!(a[a.len() - 2 * BLOCK..].iter().all(|&b| b == 0));
    }
}
