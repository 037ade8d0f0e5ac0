//! The agent's disk (`labctl agent-disk`): the static agents on a
//! read-only disk that KubeVirt attaches to every lab VM, made once per
//! cluster, so that each VM's Secret carries only the SHA-256 of the agent
//! it must run (`--agent-from disk`, [`crate::AgentSource::Disk`]) instead
//! of the agent itself.
//!
//! KubeVirt presents it to the guest in one of two ways, and the guest's
//! installer ([`crate::installer`]) reads both the same way:
//! - a **containerDisk** volume on a disk with `serial: lab-agent`: a virtio
//!   disk the guest sees as `/dev/disk/by-id/virtio-lab-agent`, holding
//!   [`AgentDisk::image`] ([`oci::archive`] makes the container image);
//! - a **ConfigMap** volume with `volumeLabel: LAB-AGENT`: KubeVirt writes
//!   the ConfigMap's keys into an ISO 9660 image labelled so
//!   (kubevirt/kubevirt `pkg/config/config.go`, `defaultCreateIsoImage`:
//!   `xorrisofs -volid LABEL -joliet -rock`), which the guest sees as
//!   `/dev/disk/by-label/LAB-AGENT` ([`AgentDisk::configmap`] makes it).
//!
//! So the raw image is ISO 9660 too ([`iso`]), labelled `LAB-AGENT`, with
//! the ConfigMap's file names: one reader in the guest (`mount -r -t
//! iso9660`, which every cloud image can do, as NoCloud's `cidata` seed is
//! ISO 9660), whichever volume the VM has. Each agent is stored gzip'd
//! (`amd64.gz`, `arm64.gz`): a ConfigMap holds at most 1 MiB, and both
//! agents, ~0.9 MB each, fit only compressed. The pin is the SHA-256 of the
//! agent as it runs, after `gzip -d`.

pub mod iso;
pub mod oci;
pub mod tar;

use crate::arch::Arch;
use crate::budget::SECRET_LIMIT;
use crate::error::Error;
use crate::pin::{AgentPin, sha256_hex};
use crate::secret::SecretMeta;
use crate::secret::yaml_head;
use crate::spec::check_agent_arch;
use crate::yaml::quoted;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::write::GzEncoder;
use std::io::Write as _;

/// The disk's serial in a KubeVirt `disks:` entry; the guest sees
/// `/dev/disk/by-id/virtio-lab-agent` (udev's name for a virtio disk's serial).
pub const SERIAL: &str = "lab-agent";
/// The file system label (ISO 9660 volume id): a ConfigMap volume's
/// `volumeLabel`, and the raw image's own.
pub const LABEL: &str = "LAB-AGENT";
/// The artefacts `labctl agent-disk` writes, in its output folder.
pub const IMAGE_FILE: &str = "lab-agent.img";
pub const CONTAINERDISK_FILE: &str = "lab-agent.containerdisk.tar";
pub const CONFIGMAP_FILE: &str = "lab-agent.configmap.yaml";
pub const SUMS_FILE: &str = "SHA256SUMS";

/// Kubernetes' limit on a ConfigMap's data (the same 1 MiB as a Secret's).
pub const CONFIGMAP_LIMIT: usize = SECRET_LIMIT;

/// The file of `arch`'s agent on the disk (and its ConfigMap key).
pub fn file_name(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "amd64.gz",
        Arch::Arm64 => "arm64.gz",
    }
}

/// One architecture's agent on the disk.
#[derive(Debug, Clone)]
pub struct DiskAgent {
    pub arch: Arch,
    /// What a payload for this architecture pins.
    pub pin: AgentPin,
    /// The agent, gzip'd as the disk stores it.
    pub gz: Vec<u8>,
}

/// The agents of one disk, one per architecture, in [`Arch`] order.
#[derive(Debug, Clone)]
pub struct AgentDisk {
    agents: Vec<DiskAgent>,
}

impl AgentDisk {
    /// A disk of `agents`: each must be an ELF binary of its architecture
    /// (checked as a payload checks it), one per architecture, at least one.
    pub fn new(agents: impl IntoIterator<Item = (Arch, Vec<u8>)>) -> Result<AgentDisk, Error> {
        let mut out: Vec<DiskAgent> = Vec::new();
        for (arch, bytes) in agents {
            check_agent_arch(&bytes, arch)?;
            if out.iter().any(|a| a.arch == arch) {
                return Err(Error::AgentDisk(format!(
                    "two agents for {arch}: give one `--agent` per architecture"
                )));
            }
            out.push(DiskAgent {
                arch,
                pin: AgentPin::of(&bytes),
                gz: gzip(&bytes),
            });
        }
        if out.is_empty() {
            return Err(Error::AgentDisk("no agent to put on the disk".into()));
        }
        out.sort_by_key(|a| a.arch);
        Ok(AgentDisk { agents: out })
    }

    pub fn agents(&self) -> &[DiskAgent] {
        &self.agents
    }

    /// The agent for `arch`, if the disk has one.
    pub fn agent(&self, arch: Arch) -> Option<&DiskAgent> {
        self.agents.iter().find(|a| a.arch == arch)
    }

    /// The raw disk image (`lab-agent.img`): ISO 9660 labelled [`LABEL`].
    pub fn image(&self) -> Vec<u8> {
        let files: Vec<iso::File<'_>> = self
            .agents
            .iter()
            .map(|a| iso::File {
                name: file_name(a.arch),
                data: &a.gz,
            })
            .collect();
        // Constant names and a label that are valid, few files, each far
        // under 4 GiB: nothing here can fail.
        iso::build(LABEL, &files).expect("the agent disk's names and sizes are valid")
    }

    /// The containerDisk image archive (`lab-agent.containerdisk.tar`) of
    /// `image` (this disk's [`AgentDisk::image`]).
    pub fn containerdisk(&self, image: &[u8]) -> Vec<u8> {
        let arches: Vec<&str> = self.agents.iter().map(|a| a.arch.name()).collect();
        oci::archive(image, &arches)
    }

    /// The ConfigMap (`lab-agent.configmap.yaml`): immutable, one
    /// `binaryData` key per agent, named as on the disk. Errors when the
    /// agents are over Kubernetes' 1 MiB, saying what fits.
    pub fn configmap(&self, meta: &SecretMeta) -> Result<String, Error> {
        meta.validate()?;
        let bytes: usize = self.agents.iter().map(|a| a.gz.len()).sum();
        if bytes > CONFIGMAP_LIMIT {
            return Err(Error::AgentDisk(format!(
                "the agents take {bytes} bytes gzip'd, over the {CONFIGMAP_LIMIT} bytes a \
                 ConfigMap holds: make one ConfigMap per architecture (`--arch amd64`, then \
                 `--arch arm64`), or use the containerDisk"
            )));
        }
        let mut meta = meta.clone();
        for a in &self.agents {
            meta.annotations
                .insert(format!("lab-agent/sha256-{}", a.arch), a.pin.sha256.clone());
        }
        let mut out = String::with_capacity(bytes * 4 / 3 + 1024);
        yaml_head(&mut out, "ConfigMap", &meta);
        // Immutable: the kubelet stops watching it, and a VM started later
        // cannot get other bytes under the same name.
        out.push_str("\nimmutable: true\nbinaryData:");
        for a in &self.agents {
            out.push_str("\n  ");
            quoted(&mut out, file_name(a.arch));
            out.push_str(": ");
            quoted(&mut out, &STANDARD.encode(&a.gz));
        }
        out.push('\n');
        Ok(out)
    }

    /// A name for this disk's ConfigMap that changes with its agents:
    /// `lab-agent-` and 12 hex digits of their pins. An immutable ConfigMap
    /// cannot be updated, so a new agent gets a new name beside the old,
    /// and VMs made before keep theirs.
    pub fn versioned_name(&self) -> String {
        let pins: Vec<&str> = self.agents.iter().map(|a| a.pin.sha256.as_str()).collect();
        format!(
            "lab-agent-{}",
            &sha256_hex(pins.join("\n").as_bytes())[..12]
        )
    }
}

/// `sha256sum`'s output for `files` (name, bytes): `sha256sum -c` checks
/// them in the folder they were written to.
pub fn sha256sums(files: &[(&str, &[u8])]) -> String {
    files
        .iter()
        .map(|(name, bytes)| format!("{}  {name}\n", sha256_hex(bytes)))
        .collect()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::best());
    gz.write_all(bytes).expect("gzip into memory");
    gz.finish().expect("gzip into memory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::GzDecoder;
    use std::io::Read as _;

    fn elf(machine: u16, body: &[u8]) -> Vec<u8> {
        let mut b = b"\x7fELF\x02\x01\x01\x00".to_vec();
        b.extend_from_slice(&[0; 10]);
        b.extend_from_slice(&machine.to_le_bytes());
        b.extend_from_slice(body);
        b
    }

    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        GzDecoder::new(gz).read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn each_agent_on_the_disk_under_its_name_pinned_as_it_runs() {
        let (amd, arm) = (elf(62, &[1; 3000]), elf(183, &[2; 4000]));
        let disk =
            AgentDisk::new([(Arch::Arm64, arm.clone()), (Arch::Amd64, amd.clone())]).unwrap();
        let arches: Vec<Arch> = disk.agents().iter().map(|a| a.arch).collect();
        assert_eq!(arches, [Arch::Amd64, Arch::Arm64]);
        let img = disk.image();
        assert_eq!(gunzip(iso::read(&img, "amd64.gz").unwrap()), amd);
        assert_eq!(gunzip(iso::read(&img, "arm64.gz").unwrap()), arm);
        assert_eq!(disk.agent(Arch::Amd64).unwrap().pin, AgentPin::of(&amd));
        assert_eq!(disk.image(), img, "the same agents make the same image");
        assert!(disk.versioned_name().starts_with("lab-agent-"));
        assert_eq!(disk.versioned_name().len(), "lab-agent-".len() + 12);
    }

    #[test]
    fn refuses_a_wrong_machine_a_second_agent_or_none() {
        let wrong = AgentDisk::new([(Arch::Amd64, elf(183, b""))]).unwrap_err();
        assert!(wrong.to_string().contains("built for arm64"), "{wrong}");
        let twice = AgentDisk::new([(Arch::Amd64, elf(62, b"a")), (Arch::Amd64, elf(62, b"b"))])
            .unwrap_err();
        assert!(
            twice.to_string().contains("two agents for amd64"),
            "{twice}"
        );
        assert!(AgentDisk::new([]).is_err());
    }

    #[test]
    fn the_configmap_is_immutable_binary_data_under_the_limit() {
        let disk = AgentDisk::new([(Arch::Amd64, elf(62, b"agent"))]).unwrap();
        let mut meta = SecretMeta::new("lab-agent-x");
        meta.namespace = Some("labs".into());
        let yaml = disk.configmap(&meta).unwrap();
        assert!(
            yaml.starts_with("apiVersion: v1\nkind: ConfigMap\n"),
            "{yaml}"
        );
        assert!(yaml.contains("\nimmutable: true\nbinaryData:\n  \"amd64.gz\": \""));
        assert!(yaml.contains(&disk.agent(Arch::Amd64).unwrap().pin.sha256));
        assert!(disk.configmap(&SecretMeta::new("Bad_Name")).is_err());
        // Incompressible agents past 1 MiB: refused, saying what fits.
        let mut x = 1u64;
        let noise: Vec<u8> = (0..600_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let big = AgentDisk::new([
            (Arch::Amd64, elf(62, &noise)),
            (Arch::Arm64, elf(183, &noise)),
        ])
        .unwrap();
        let err = big.configmap(&meta).unwrap_err().to_string();
        assert!(err.contains("one ConfigMap per architecture"), "{err}");
    }

    #[test]
    fn sums_as_sha256sum_prints_them() {
        assert_eq!(
            sha256sums(&[("a", b"abc")]),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a\n"
        );
    }
}
