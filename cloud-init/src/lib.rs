//! Renders what a lab VM receives on its first boot: the user-data that
//! installs and starts `lab-agent` (a MIME message: a small `#cloud-config`
//! and an installer script), and the Kubernetes Secret that carries it to
//! KubeVirt (`cloudInitNoCloud.secretRef`).
//!
//! # Layout
//! - [`arch`]: [`Arch`], the machine a payload is for (amd64, arm64): its
//!   agent's ELF machine, its serial console.
//! - [`spec`]: [`PayloadSpec`], what one VM's user-data is made of, and the
//!   rules its inputs keep ([`PayloadSpec::check`]).
//! - [`payload`]: spec → user-data ([`render_user_data`]): checks the spec
//!   and puts the parts together.
//! - [`mod@unit`]: the agent's systemd unit as the guest gets it, and the serial
//!   autologin drop-in.
//! - [`cloud_config`]: the `#cloud-config` part: `bootcmd`, `write_files`
//!   (token, unit, serial autologin), `runcmd`. Fixed size.
//! - [`installer`]: the `sh` part that writes the agent, the lab's files and
//!   the setup script, once per instance, atomically.
//! - [`mime`]: the multipart envelope; [`shell`]: ASCII shell words.
//! - [`secret`]: user-data → Secret manifest, YAML or JSON ([`render_secret`]);
//!   enforces the 1 MiB limit.
//! - [`budget`]: where the bytes go (agent / lab files / rest / total).
//! - [`pin`]: [`AgentPin`], the SHA-256 a payload without the agent pins.
//! - [`agent_disk`]: the agents on a read-only disk KubeVirt attaches to
//!   every VM (`labctl agent-disk`): the raw image, its containerDisk
//!   archive, its ConfigMap.
//! - [`manifest`]: every object of a lab's VM or session beside its
//!   Secret: the `VirtualMachine`, the NetworkPolicy, the headless Service,
//!   from one [`manifest::ManifestSpec`] checked whole ([`manifest::plan`]);
//!   the golden PVC's judgement ([`manifest::golden_unusable_reason`]).
//! - [`k8s_names`]: Kubernetes name, namespace and label syntax.
//! - [`yaml`]: the escaping that keeps any file name or content from
//!   breaking the YAML.
//! - [`error`]: the one error type.
//!
//! The edge, behind the feature `fs` (off by default): [`lab_payload`]
//! renders a lab folder (reads its files and setup script, then the pure
//! functions above), [`lab_manifest`] a lab's every object (a payload per
//! VM through [`lab_payload`], then [`manifest`]), [`agent_bin`] finds and checks the static agent,
//! [`token`] makes per-VM tokens. `labctl` and the Python package render
//! through it; it holds no CLI and no qemu code.
//!
//! # Invariants
//! - No I/O outside the `fs` edge: rendering is a pure function of its
//!   input, so the same input gives byte-identical output.
//! - The user-data is ASCII. In the cloud-config every string value is a
//!   double-quoted, escaped scalar; in the installer every file is readable
//!   text only when it is plain ASCII, else base64 (gzip first when smaller).
//! - The cloud-config part does not grow with the lab: the agent and every
//!   lab byte go into the installer, which cloud-init never YAML-parses.
//! - The systemd unit exists once, in `packaging/lab-agent.service`.

#[cfg(feature = "fs")]
pub mod agent_bin;
pub mod agent_disk;
pub mod arch;
pub mod budget;
pub mod cloud_config;
pub mod error;
pub mod installer;
pub mod k8s_names;
#[cfg(feature = "fs")]
pub mod lab_manifest;
#[cfg(feature = "fs")]
pub mod lab_payload;
pub mod manifest;
pub mod mime;
pub mod payload;
pub mod pin;
pub mod secret;
pub mod shell;
pub mod spec;
#[cfg(feature = "fs")]
pub mod token;
pub mod unit;
pub mod yaml;

pub use arch::{Arch, UnknownArch};
pub use budget::{Budget, Part, SECRET_LIMIT};
pub use error::{Error, TooLarge};
pub use payload::{UserData, render_user_data};
pub use pin::AgentPin;
pub use secret::{Format, SecretMeta, render_secret};
pub use spec::{AgentFrom, AgentSource, Channel, PayloadSpec, SetupScript};
