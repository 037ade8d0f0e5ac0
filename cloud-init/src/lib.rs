//! Renders what a lab VM receives on its first boot: the `#cloud-config`
//! user-data that installs and starts `lab-agent`, and the Kubernetes Secret
//! that carries it to KubeVirt (`cloudInitNoCloud.userDataSecretRef`).
//!
//! # Layout
//! - [`payload`]: [`PayloadSpec`] → `#cloud-config` text ([`render_user_data`]):
//!   `bootcmd`, `write_files` (agent, token, unit, lab files, setup script,
//!   serial autologin), `runcmd`.
//! - [`secret`]: user-data → Secret manifest, YAML or JSON ([`render_secret`]);
//!   enforces the 1 MiB limit.
//! - [`budget`]: where the bytes go (agent / lab files / rest / total).
//! - [`k8s_names`]: Kubernetes name, namespace and label syntax.
//! - [`yaml`]: the escaping that keeps any file name or content from
//!   breaking the YAML.
//! - [`error`]: the one error type.
//!
//! # Invariants
//! - No I/O: the caller reads the lab, the agent and the token (and
//!   generates the token); rendering is a pure function of its input, so the
//!   same input gives byte-identical output.
//! - Every string value in the output is a double-quoted, escaped scalar;
//!   bytes that are not UTF-8 travel base64-encoded.
//! - The systemd unit exists once, in `packaging/lab-agent.service`.

pub mod budget;
pub mod error;
pub mod k8s_names;
pub mod payload;
pub mod secret;
pub mod yaml;

pub use budget::{Budget, Part, SECRET_LIMIT};
pub use error::{Error, TooLarge};
pub use payload::{PayloadSpec, SetupScript, UserData, render_user_data};
pub use secret::{Format, SecretMeta, render_secret};
