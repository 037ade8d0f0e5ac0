//! `lab-runner`: the lab runner behind `labctl try` and `labctl test`. It starts a lab's
//! agent somewhere a lab author can try it, hands out a client for it, and
//! stops it, leaving the machine as it was. It is never a dependency of
//! `lab-agent-client` or the Python package: a backend that grades VMs
//! links none of this (`tests/tests/crate_boundary.rs`).
//!
//! # Layout
//! - [`sandbox`]: the throwaway copy of this machine a local try runs in
//!   (namespaces, overlays; the keeper process and its init), or of a
//!   guest image's root file system ([`sandbox::Image`]), and its
//!   `NetnsDialer`, the way into its network. A binary that
//!   starts a sandbox runs [`sandbox::keeper_main`] for
//!   [`sandbox::KEEPER_VERB`] (`/proc/self/exe` is the keeper).
//! - [`local`]: [`LocalAgent`], a `lab-agent serve` started with a lab
//!   staged in a temp dir, in a sandbox or on this machine itself (`--host`);
//!   [`local::find_agent`] finds the agent binary to run.
//! - [`session`]: [`LocalSession`], a lab of several VMs (`[[vms]]`) in
//!   the sandbox: one sandbox per VM (its hostname the VM's name), all on
//!   one private switch (`switch.rs`: a bridge in a network namespace of
//!   its own, a veth pair per VM) where the VMs' names resolve.
//! - [`trial`]: a lab tried: the [`trial::Plan`] (flags checked against
//!   each other and the machine, the timeout, the agent), the lab started
//!   there and stopped ([`trial::Tried`]: a local agent or a VM, or for a
//!   session a sandbox or a qemu guest per VM), each VM's
//!   [`trial::Target`] the front end's flow waits on and grades, and
//!   Ctrl-C/SIGTERM watched throughout ([`trial::interruptible`]); each
//!   VM's `--param`s ([`trial::Params`]).
//! - [`kept`]: a sandbox kept after its run (`--keep`): enter it, grade
//!   it again, stop it.
//! - [`changes`]: what a lab changed in the sandbox, from the overlays'
//!   upper dirs.
//! - [`systemd`]: a lab that needs systemd or the network, which the
//!   sandbox does not have: hints that point to a VM.
//! - [`vm`]: [`vm::VmTarget`], a lab's real payload booted by cloud-init in
//!   a qemu guest from a NoCloud seed, as KubeVirt boots it; stopped
//!   ([`vm::Stop`]) or left running ([`vm::LeftRunning`]);
//!   [`vm::VmSession`], a lab of several VMs as guests, one per VM, on a
//!   private network of their own (qemu's multicast on loopback).
//! - [`qemu`]: the project's one qemu driver (command lines, accelerator,
//!   NoCloud seed, QMP, console), for [`vm`] and the VM tests.
//! - [`inspect`]: everything about a lab that can be known without
//!   running it (the model, `bash -n`, the payload's size): checked before
//!   a lab runs, and what `labctl lint` prints.
//! - [`payload`]: a lab rendered into its payload (the generator's
//!   `lab_payload`) and written 0600, atomically: `labctl secret`, `lint`
//!   and [`vm`].
//! - [`secret`]: the work behind `labctl secret` ([`secret::SecretJob`]):
//!   the token read or made, the payload rendered, the files written.
//! - [`agent_disk`]: the work behind `labctl agent-disk`
//!   ([`agent_disk::AgentDiskJob`]): the agents found, the disk's
//!   artefacts written.
//! - [`selftest`]: `labctl test`'s phases on a ready agent (grade, solve,
//!   grade, grade in reverse), the rules each check must keep, and its
//!   report.
//! - [`tempdir`]: the project's one temp-dir helper.
//! - [`Error`]: what failed, its cause and hints, and whose it is to fix
//!   ([`ErrorKind`]).
//!
//! # Invariants
//! - qemu lives only here ([`qemu`]); nothing of the sandbox is mounted in
//!   the host's namespace, and everything a run starts dies with the
//!   process that started it unless the caller keeps it (`--keep`).
//! - Messages go to stderr; stdout is the front end's.

pub mod agent_disk;
pub mod changes;
mod error;
pub mod inspect;
pub mod kept;
pub mod local;
pub mod payload;
pub mod qemu;
pub mod sandbox;
pub mod secret;
pub mod selftest;
pub mod session;
mod switch;
pub mod systemd;
pub mod tempdir;
pub mod trial;
pub mod vm;

pub use error::{Error, ErrorKind};
pub use local::LocalAgent;
pub use session::LocalSession;
