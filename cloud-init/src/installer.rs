//! The installer part: a POSIX `sh` script carrying the bulk of the payload
//! (the agent, the lab's files, the setup script) in a MIME part that
//! cloud-init never YAML-parses.
//!
//! It travels as `text/x-shellscript-per-instance`: cloud-init writes it to
//! `/var/lib/cloud/scripts/per-instance/` and runs it once per instance in
//! the final stage's `scripts_per_instance`, which comes before
//! `scripts_user` (where `runcmd` starts the agent and runs the setup).
//! After a reboot it does not run again; the files are on disk already.
//!
//! The script needs only POSIX `sh` and its utilities (`od`, `wc`, `uname`
//! …), `base64` and `gzip`, which Debian, Ubuntu, the RHEL family and Alpine
//! (busybox) all have. It is ASCII
//! throughout (see [`crate::shell`]). Each file goes to a temporary name in
//! its folder, is checked (gzip's CRC and the byte count; the agent must also
//! be built for this machine, and run) and is renamed into place, so a file is there whole or not at all and
//! systemd never starts half an agent. A failure is written to
//! `STATE_DIR/install-error`, which `lab-agent setup` turns into a failed
//! setup with that reason, so the backend hears of it through `/v1/ready`.

use crate::agent_disk;
use crate::arch::Arch;
use crate::budget::Part;
use crate::mime::BOUNDARY;
use crate::pin::AgentPin;
use crate::shell;
use crate::spec::{AgentSource, PayloadSpec};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::write::GzEncoder;
use lab_agent_proto::guest::{
    AGENT_PATH, ENV_PATH, INSTALL_ERROR_PATH, SETUP_SCRIPT_PATH, render_env_file,
};
use lab_agent_proto::lab::GUEST_LAB_DIR;
use std::io::Write as _;

/// Ends every file's here-document. No base64 line can equal it (`_` is not
/// in the alphabet), and a text file with such a line travels base64.
const HEREDOC_END: &str = "LAB_AGENT_EOF";

/// Base64 line length: under the 998 characters a MIME line may have, and a
/// multiple of 4. Longer lines than the usual 76 save a newline per 76
/// bytes (1.3 % of the agent).
const B64_LINE: usize = 996;

/// Fewest bytes an encoding must save before a text file loses readability.
const MIN_SAVING: usize = 2048;

/// The rendered script and where its bytes went.
#[derive(Debug, Clone)]
pub struct Installer {
    pub text: String,
    /// The agent's block (command, encoded content, terminator).
    pub agent_bytes: usize,
    /// The setup script's and the lab files' blocks.
    pub lab_bytes: usize,
    /// Every block, in script order.
    pub parts: Vec<Part>,
}

pub fn render(spec: &PayloadSpec) -> Installer {
    let mut s = Installer {
        text: prologue(&spec.lab_name, matches!(spec.agent, AgentSource::Disk(_))),
        agent_bytes: 0,
        lab_bytes: 0,
        parts: Vec::new(),
    };
    // The agent first: without it nothing in the VM can report what else
    // went wrong.
    s.agent_bytes = match &spec.agent {
        AgentSource::Embedded(agent) => s.put(AGENT_PATH, 0o755, agent, Check::Runs),
        AgentSource::Disk(pin) => s.put_from_disk(spec.arch, pin),
    };
    // Before `runcmd` starts the agent and the setup, which read it. Only
    // when there is something in it: a lab of one VM without parameters
    // renders as it always did.
    if !spec.env.is_empty() {
        let env = render_env_file(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        s.lab_bytes += s.put(ENV_PATH, 0o600, &env, Check::Size);
    }
    if let Some(setup) = &spec.setup {
        s.lab_bytes += s.put(SETUP_SCRIPT_PATH, 0o700, &setup.contents, Check::Size);
    }
    for file in &spec.files {
        let path = format!("{GUEST_LAB_DIR}/{}", file.path);
        s.lab_bytes += s.put(&path, file.mode, &file.contents, Check::Size);
    }
    s.text.push_str(&format!(
        "printf 'lab-agent payload: installed the agent{}, {} lab file(s) and {}\\n'\n",
        if let AgentSource::Disk(_) = spec.agent {
            " from its disk"
        } else {
            ""
        },
        spec.files.len(),
        if spec.setup.is_some() {
            "the setup script"
        } else {
            "no setup script"
        }
    ));
    s
}

/// What `put` checks beyond the byte count before the rename.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    Size,
    /// The file is the agent: its ELF machine must be this machine's (the
    /// reason names both when not: a payload for the wrong architecture),
    /// and `FILE version` must succeed (not corrupt), or systemd would
    /// restart a broken binary forever.
    Runs,
}

impl Installer {
    /// Appends the block that takes the agent from the agent disk: this
    /// machine must be the payload's architecture; the disk's agent for it
    /// is copied out, then `put` checks it against `pin` (SHA-256 first,
    /// so another build is said as such) and that it runs. Returns its size.
    fn put_from_disk(&mut self, arch: Arch, pin: &AgentPin) -> usize {
        let start = self.text.len();
        let machine = arch.uname();
        self.text.push_str(&format!(
            "[ \"$(uname -m)\" = {machine} ] ||\n\
             \tfail \"this VM's payload is for $(name {machine}), and this machine is $(name \"$(uname -m)\"): \
             render this VM's payload for its architecture\"\n\
             disk {file}\n\
             put {path} 0755 {size} z run {sha} <\"$z\"\n\
             rm -f \"$z\"\n\
             z=\n",
            file = agent_disk::file_name(arch),
            path = shell::word(AGENT_PATH),
            size = pin.size,
            sha = pin.sha256,
        ));
        let size = self.text.len() - start;
        self.parts.push(Part {
            name: format!("{AGENT_PATH} (from the agent disk, SHA-256 pinned)"),
            bytes: size,
        });
        size
    }

    /// Appends one `put` block; returns its size.
    fn put(&mut self, path: &str, mode: u32, bytes: &[u8], check: Check) -> usize {
        let start = self.text.len();
        let (encoding, body) = encode(bytes);
        let out = &mut self.text;
        out.push_str(&format!(
            "put {} {mode:04o} {} {encoding}{} <<'{HEREDOC_END}'\n",
            shell::word(path),
            bytes.len(),
            if check == Check::Runs { " run" } else { "" },
        ));
        out.push_str(&body);
        out.push_str(HEREDOC_END);
        out.push('\n');
        let size = self.text.len() - start;
        self.parts.push(Part {
            name: path.to_owned(),
            bytes: size,
        });
        size
    }
}

/// The script's fixed head: what it is, `fail`, `name`, `put`, and with
/// `disk` (`--agent-from disk`) the function that finds the agent disk.
fn prologue(lab_name: &str, disk: bool) -> String {
    // The lab name is checked to be `[A-Za-z0-9._-]`, so it is safe in a
    // comment. Tabs indent, as in the rest of the project's shell.
    let mut out = format!(
        r#"#!/bin/sh
# lab-agent payload for lab {lab_name}, part 2: agent, lab files, setup script.
# Run once by cloud-init before runcmd; a failure's reason goes to $e.
set -u
tmp= mnt= z= e={INSTALL_ERROR_PATH}
fail() {{
	[ -z "$tmp" ] || rm -f -- "$tmp"
	[ -z "$z" ] || rm -f -- "$z"
	[ -z "$mnt" ] || {{ umount "$mnt"; rmdir "$mnt"; }}
	printf 'lab-agent payload: %s\n' "$1" >&2
	mkdir -p "${{e%/*}}" && printf '%s\n' "$1" >"$e.tmp" && mv -f "$e.tmp" "$e"
	exit 1
}}
# name MACHINE: as uname -m says it, with the payload's name for it
name() {{
	case $1 in
	x86_64) echo 'x86_64 (--arch amd64)' ;;
	aarch64) echo 'aarch64 (--arch arm64)' ;;
	*) echo "$1" ;;
	esac
}}
# put PATH MODE BYTES text|b64|gz|z [run [SHA256]]: content on stdin; temp file, checks, rename
put() {{
	umask 022
	mkdir -p -- "${{1%/*}}" || fail "cannot create the folder of $1"
	tmp=${{1%/*}}/.lab-agent-install.$$
	umask 077
	case $4 in
	gz) base64 -d | gzip -dc >"$tmp" ;;
	z) gzip -dc >"$tmp" ;;
	b64) base64 -d >"$tmp" ;;
	*) cat >"$tmp" ;;
	esac || fail "cannot write $1: the content does not decode, or the disk is full"
"#
    );
    if disk {
        // Before the size: another build of the agent has another size, and
        // "n of m bytes written" would blame the disk space.
        out.push_str(
            r#"	if [ -n "${6:-}" ]; then
		h=$(sha256sum <"$tmp") && h=${h%% *}
		[ "$h" = "$6" ] ||
			fail "$src holds another lab-agent (sha256 $h) than this VM's payload pins (sha256 $6): attach the agent disk made from the agent the payload was rendered with (labctl agent-disk), or render the payload for the disk's agent"
	fi
"#,
        );
    }
    out.push_str(
        r#"	n=$(($(wc -c <"$tmp"))) && [ "$n" -eq "$3" ] ||
		fail "cannot write $1: $n of $3 bytes written (is the disk full?)"
	chmod "$2" "$tmp" || fail "cannot set the mode of $1"
	if [ "${5:-}" = run ]; then
		# The ELF header's e_machine (byte 18, little-endian) first: a
		# payload for the wrong architecture is said as such.
		n=$(od -An -tu1 -j18 -N2 "$tmp" | { read -r lo hi && echo $((lo + 256 * hi)); })
		case $n in 62) m=x86_64 ;; 183) m=aarch64 ;; *) m="ELF machine ${n:-?}" ;; esac
		[ "$m" = "$(uname -m)" ] ||
			fail "$1 is built for $(name "$m"), and this machine is $(name "$(uname -m)"): render this VM's payload for its architecture"
		"$tmp" version >/dev/null ||
			fail "$1 does not run on this machine ($(uname -m)); build the agent for it"
	fi
	mv -f -- "$tmp" "$1" || fail "cannot rename $tmp to $1"
	tmp=
}
"#,
    );
    if disk {
        out.push_str(&format!(
            r#"# disk FILE: the agent disk's FILE (this machine's agent, gzip'd) copied to $z;
# $src names the disk. A virtio disk with serial {serial} (a KubeVirt
# containerDisk), else a file system labelled {label} (a ConfigMap volume).
disk() {{
	src= i=0
	while [ -z "$src" ]; do
		for s in /sys/block/*/serial; do
			[ "$(cat "$s" 2>/dev/null)" = {serial} ] && s=${{s%/serial}} && src=/dev/${{s##*/}}
		done
		[ -n "$src" ] || [ ! -b /dev/disk/by-label/{label} ] || src=/dev/disk/by-label/{label}
		[ -n "$src" ] || [ $i -ge 5 ] || {{ i=$((i + 1)) && sleep 1 && continue; }}
		[ -n "$src" ] ||
			fail "no agent disk: this VM's payload takes the agent from a disk with serial {serial} or a volume labelled {label} (labctl agent-disk), and the VM has neither"
	done
	mnt=$(mktemp -d) && mount -r -t iso9660 "$src" "$mnt" ||
		fail "cannot mount the agent disk $src: is it made by labctl agent-disk?"
	src="the agent disk $src"
	z={agent_dir}/.lab-agent-disk.$$
	cp "$mnt/$1" "$z" 2>/dev/null
	i=$? s=$(ls "$mnt" | tr '\n' ' ')
	umount "$mnt" && rmdir "$mnt" && mnt=
	[ $i -eq 0 ] || fail "$src has no $1 (it holds: $s): make it with labctl agent-disk for this VM's architecture"
}}
"#,
            serial = agent_disk::SERIAL,
            label = agent_disk::LABEL,
            agent_dir = AGENT_PATH.rsplit_once('/').map_or("/", |(d, _)| d),
        ));
    }
    out.push_str("rm -f \"$e\"\n");
    out
}

/// The here-document body for `bytes` and its `put` encoding: readable text
/// unless an encoding saves at least a quarter and [`MIN_SAVING`] bytes
/// (large or repetitive files), else the smaller of base64 and gzip +
/// base64.
fn encode(bytes: &[u8]) -> (&'static str, String) {
    let b64 = wrap_base64(bytes);
    // Compression cannot win below a gzip header plus trailer.
    let encoded = match (bytes.len() > 32).then(|| wrap_base64(&gzip_best(bytes))) {
        Some(gz) if gz.len() < b64.len() => ("gz", gz),
        _ => ("b64", b64),
    };
    if heredoc_safe(bytes) {
        let saving = bytes.len().saturating_sub(encoded.1.len());
        if !(encoded.1.len() * 4 < bytes.len() * 3 && saving >= MIN_SAVING) {
            // Checked to be ASCII.
            return ("text", String::from_utf8_lossy(bytes).into_owned());
        }
    }
    encoded
}

/// Whether `bytes` can go verbatim into a quoted here-document of an ASCII
/// MIME part and come out identical: printable ASCII, tabs and newlines
/// only (a CR could be taken for a line break on the way), ending in a
/// newline (a here-document always does), with no line that ends the
/// here-document or could be read as a MIME boundary.
fn heredoc_safe(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return true;
    }
    bytes.ends_with(b"\n")
        && bytes
            .iter()
            .all(|&b| matches!(b, b' '..=b'~' | b'\t' | b'\n'))
        && bytes[..bytes.len() - 1]
            .split(|&b| b == b'\n')
            .all(|line| line != HEREDOC_END.as_bytes() && !is_boundary(line))
}

/// A line a MIME parser would take for the boundary (`--BOUNDARY…`).
fn is_boundary(line: &[u8]) -> bool {
    line.strip_prefix(b"--")
        .is_some_and(|rest| rest.starts_with(BOUNDARY.as_bytes()))
}

fn wrap_base64(bytes: &[u8]) -> String {
    let b64 = STANDARD.encode(bytes);
    let mut out = String::with_capacity(b64.len() + b64.len() / B64_LINE + 1);
    for line in b64.as_bytes().chunks(B64_LINE) {
        // Base64 is ASCII.
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// gzip at miniz's highest level (10: 0.04 % smaller than 9 for the agent,
/// ~0.1 s more per render). The header carries no name and mtime 0, so the
/// output depends only on the input (snapshots stay stable).
fn gzip_best(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::new(10));
    // Writing into a Vec cannot fail.
    gz.write_all(bytes).expect("gzip into memory");
    gz.finish().expect("gzip into memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        (0..n)
            .map(|_| {
                // xorshift64: incompressible enough for deflate.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn text_unless_an_encoding_saves_much() {
        let enc = |b: &[u8]| encode(b).0;
        assert_eq!(enc(b"hello\n"), "text");
        assert_eq!(enc(b""), "text");
        let script = b"#!/bin/sh\nset -eu\n\techo one\necho two\n";
        assert_eq!(enc(script), "text");
        assert_eq!(enc(b"no newline at the end"), "b64");
        assert_eq!(enc(b"crlf\r\n"), "b64");
        assert_eq!(
            enc("ünï\n".as_bytes()),
            "b64",
            "non-ASCII is mangled in a part"
        );
        assert_eq!(enc(b"a\nLAB_AGENT_EOF\nb\n"), "b64");
        assert_eq!(enc(b"a\n--lab-agent-payload--\n"), "b64");
        assert_eq!(enc(b"a\n--lab-agent-payload\n"), "b64");
        let fine = b"LAB_AGENT_EOF is fine mid-line\n---\n--other\n -- lab-agent-payload\n";
        assert_eq!(enc(fine), "text");
        assert_eq!(enc(&[1; 1000]), "gz");
        assert_eq!(enc("the same line again\n".repeat(200).as_bytes()), "gz");
        // Incompressible binary: plain base64 beats gzip's framing.
        assert_eq!(enc(&noise(4096)), "b64");
    }

    #[test]
    fn base64_lines_stay_short_and_decode() {
        let bytes = noise(10_000);
        let (enc, body) = encode(&bytes);
        assert_eq!(enc, "b64");
        assert!(
            body.lines().all(|l| l.len() <= B64_LINE),
            "a line is too long"
        );
        assert!(body.lines().count() > 10);
        let joined: String = body.lines().collect();
        assert_eq!(STANDARD.decode(joined).unwrap(), bytes);
    }
}
