//! The work behind `labctl agent-disk` ([`AgentDiskJob::run`]): the static
//! agents found (as `labctl secret` finds them) or given, the generator's
//! [`AgentDisk`] made of them, and its artefacts written to one folder:
//! the raw image, the containerDisk archive, the ConfigMap and their
//! `SHA256SUMS`, each atomically (a temp file renamed), readable by all
//! (they hold no secret).

use crate::payload::{PayloadError, write_atomic};
use lab_agent_cloudinit::agent_bin::{self, Linkage};
use lab_agent_cloudinit::agent_disk::{
    self, AgentDisk, CONFIGMAP_FILE, CONTAINERDISK_FILE, IMAGE_FILE, SUMS_FILE,
};
use lab_agent_cloudinit::{Arch, SecretMeta};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What to put on the disk and where to write it, checked by the front end.
#[derive(Debug)]
pub struct AgentDiskJob {
    pub output: PathBuf,
    /// `--arch`; `None`: the `agents`' own, else both.
    pub arches: Option<Vec<Arch>>,
    /// `--agent PATH`s, each for the architecture its ELF header names.
    pub agents: Vec<PathBuf>,
    /// The ConfigMap's name (`None`: [`AgentDisk::versioned_name`]) and
    /// namespace.
    pub configmap_name: Option<String>,
    pub namespace: Option<String>,
    pub json: bool,
}

/// What one run wrote, as `labctl agent-disk --json` prints it.
#[derive(Debug, serde::Serialize)]
pub struct AgentDiskReport {
    pub dir: PathBuf,
    pub agents: Vec<AgentReport>,
    /// The artefacts, in `SHA256SUMS`' order.
    pub files: Vec<FileReport>,
    pub configmap_name: String,
}

#[derive(Debug, serde::Serialize)]
pub struct AgentReport {
    pub arch: &'static str,
    pub path: PathBuf,
    pub bytes: u64,
    /// What a payload for this architecture pins (`--agent-from disk`).
    pub sha256: String,
    pub gzip_bytes: usize,
}

#[derive(Debug, serde::Serialize)]
pub struct FileReport {
    pub name: &'static str,
    pub bytes: usize,
    pub sha256: String,
}

impl AgentDiskJob {
    /// Finds the agents, makes the disk, writes it; the data (`--json`) to
    /// `out`, what a person wants to see to `log`.
    pub fn run(
        &self,
        out: &mut dyn Write,
        log: &mut dyn Write,
    ) -> Result<AgentDiskReport, PayloadError> {
        let mut found = Vec::new();
        for path in &self.agents {
            let Some(arch) = agent_bin::arch_of(path)? else {
                return Err(PayloadError::Usage(format!(
                    "`--agent {}` is not an ELF binary of amd64 or arm64",
                    path.display()
                )));
            };
            if found.iter().any(|(a, _)| *a == arch) {
                return Err(PayloadError::Usage(format!(
                    "two `--agent`s for {arch}: give one per architecture"
                )));
            }
            found.push((arch, path.clone()));
        }
        let arches = match &self.arches {
            Some(arches) => arches.clone(),
            None if !found.is_empty() => found.iter().map(|(a, _)| *a).collect(),
            None => vec![Arch::Amd64, Arch::Arm64],
        };
        if let Some((arch, path)) = found.iter().find(|(a, _)| !arches.contains(a)) {
            return Err(PayloadError::Usage(format!(
                "`--agent {}` is for {arch}, which `--arch` leaves out",
                path.display()
            )));
        }
        let mut agents = Vec::new();
        for arch in arches {
            let explicit = found.iter().find(|(a, _)| *a == arch).map(|(_, p)| p);
            let agent = agent_bin::load(explicit.map(PathBuf::as_path), Linkage::Static(arch))?;
            if explicit.is_none()
                && let Some(w) = agent_bin::stale_warning(&agent.path)
            {
                let _ = writeln!(log, "warning: {w}");
            }
            agents.push((arch, agent));
        }
        let disk = AgentDisk::new(agents.iter().map(|(a, agent)| (*a, agent.bytes.clone())))?;
        let meta = SecretMeta {
            name: self
                .configmap_name
                .clone()
                .unwrap_or_else(|| disk.versioned_name()),
            namespace: self.namespace.clone(),
            labels: [("app.kubernetes.io/name".to_owned(), "lab-agent".to_owned())].into(),
            annotations: Default::default(),
        };
        let configmap = disk.configmap(&meta)?;
        let image = disk.image();
        let archive = disk.containerdisk(&image);

        let files: [(&'static str, &[u8]); 3] = [
            (IMAGE_FILE, &image),
            (CONTAINERDISK_FILE, &archive),
            (CONFIGMAP_FILE, configmap.as_bytes()),
        ];
        std::fs::create_dir_all(&self.output).map_err(|source| PayloadError::Write {
            what: "the output folder",
            path: self.output.clone(),
            source,
        })?;
        let sums = agent_disk::sha256sums(&files);
        for (name, bytes) in files.iter().chain([&(SUMS_FILE, sums.as_bytes())]) {
            write_atomic(&self.output.join(name), bytes, "the agent's disk", 0o644)?;
        }

        let report = AgentDiskReport {
            dir: self.output.clone(),
            agents: agents
                .iter()
                .zip(disk.agents())
                .map(|((_, agent), on_disk)| AgentReport {
                    arch: on_disk.arch.name(),
                    path: agent.path.clone(),
                    bytes: on_disk.pin.size,
                    sha256: on_disk.pin.sha256.clone(),
                    gzip_bytes: on_disk.gz.len(),
                })
                .collect(),
            files: files
                .iter()
                .map(|(name, bytes)| FileReport {
                    name,
                    bytes: bytes.len(),
                    sha256: lab_agent_cloudinit::pin::sha256_hex(bytes),
                })
                .collect(),
            configmap_name: meta.name.clone(),
        };
        for a in &report.agents {
            let _ = writeln!(
                log,
                "{}: `{}` ({} bytes, {} gzip'd), sha256 {}",
                a.arch,
                a.path.display(),
                a.bytes,
                a.gzip_bytes,
                a.sha256
            );
        }
        for f in &report.files {
            let _ = writeln!(
                log,
                "wrote `{}` ({} bytes)",
                self.output.join(f.name).display(),
                f.bytes
            );
        }
        let _ = write!(log, "{}", next_steps(&self.output, &meta.name));
        if self.json {
            let mut text = serde_json::to_string_pretty(&report).expect("serialize report");
            text.push('\n');
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|source| PayloadError::Write {
                    what: "the output",
                    path: "<stdout>".into(),
                    source,
                })?;
        }
        Ok(report)
    }
}

/// How the disk reaches a cluster, once.
fn next_steps(dir: &Path, configmap: &str) -> String {
    let dir = dir.display();
    format!(
        "next, once per cluster (then `labctl secret --agent-from disk` for each VM):\n\
         \x20 skopeo copy oci-archive:{dir}/{CONTAINERDISK_FILE} docker://REGISTRY/lab-agent:TAG\n\
         \x20   (the VM: a containerDisk volume of that image, its disk with `serial: {serial}`)\n\
         \x20 or: kubectl create -n NAMESPACE -f {dir}/{CONFIGMAP_FILE}\n\
         \x20   (not `apply`: its last-applied annotation would copy the agents past the 256 KiB \
         annotations allow; the VM: a configMap volume `{configmap}` with `volumeLabel: {label}`)\n",
        serial = agent_disk::SERIAL,
        label = agent_disk::LABEL,
    )
}
