//! Async client for lab-agent: what a backend links.
//!
//! A backend holds one [`Client`] per lab VM: it waits for the VM to be
//! ready ([`Client::wait_ready`], or [`wait_all`] for a multi-VM lab), runs
//! commands ([`Client::exec`]) and grades the lab ([`Client::grade`], or
//! [`grade_all`] for a class of VMs).
//! Errors are one [`Error`] enum with predicates to branch on
//! ([`Error::is_setup_failed`], [`Error::is_unauthorized`], …).
//!
//! ```no_run
//! # async fn demo(lab: lab_agent_proto::lab::Lab) -> Result<(), lab_agent_client::Error> {
//! use lab_agent_client::Client;
//! use std::time::{Duration, Instant};
//!
//! let vm = Client::new("http://10.0.0.5:8899", "token-from-the-secret")?;
//! match vm.wait_ready(Instant::now() + Duration::from_secs(600)).await {
//!     Ok(_) => {}
//!     Err(e) if e.is_setup_failed() => {
//!         let log = e.ready_response().and_then(|r| r.setup.log_tail.clone());
//!         // tell the student the lab is broken, show the author `log`
//!         return Err(e);
//!     }
//!     Err(e) => return Err(e),
//! }
//! let lab_dir = vm.info().await?.lab_dir;
//! let lab_dir = lab_dir.as_deref().unwrap_or(lab_agent_proto::lab::GUEST_LAB_DIR);
//! let report = vm.grade(&lab, lab_dir).await?;
//! if report.has_errors() {
//!     // a check could not run (`status: error`): the lab is broken, not the
//!     // student's work; do not record this grade
//! }
//! println!("score {}/{}", report.score, report.max_score);
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`client`]: [`Client`], its builder and connection pool; `ready`,
//!   `exec`, `info`, unchecked requests.
//! - [`wait`]: `wait_ready`, [`wait_all`], [`Progress`]; [`activity`]:
//!   what a VM is doing while waited for, for a person ([`Activity`]).
//! - [`grade`]: `gradable` (a VM that is not ready is not graded),
//!   `reported_lab_dir`, `grade`, [`GradeReport`], each check's
//!   [`CheckStatus`]; [`grade_all`] for many VMs with a concurrency bound.
//! - [`session`]: [`Session`], the VMs of a lab of several (`[[vms]]`),
//!   waited for (failing fast, naming the VM) and graded as one report
//!   whose checks carry their `vm`.
//! - [`error`]: the [`Error`] enum.
//! - [`json`]: a grade report and wait outcomes as JSON for programs (the
//!   report's field order kept, guest text escaped), errors by kind.
//! - [`follow`]: setup logs followed as they grow ([`Follow`]: whole lines,
//!   escaped, a replaced log, bounded by a wait's deadline).
//! - [`transport`]: the URL forms (`http://`, `vsock://`, `vsock+unix://`,
//!   `kubevirt://` with the feature `kubevirt`) and the connection each
//!   gives hyper; [`KubeApi`] (feature `kubevirt`): the API server a
//!   `kubevirt://` client goes through.
//! - [`timeline`]: where many VMs' preparation time went, request to ready
//!   ([`distribution`]: count, min, median, p90, max of each phase, the
//!   backend's own stamps before the guest's timeline; [`Answers`]: the
//!   timelines in logged `/v1/ready` answers; [`timeline::svg`]: a picture).
//! - `interim`: the connection under hyper, cut at the interim (1xx)
//!   response past the limit.
//! - `reuse`: what each connection carried, so a call whose kept-alive
//!   connection died under it knows whether the agent went away between
//!   calls (a read is sent again on a fresh connection; an exec fails with
//!   [`Error::AgentWentAway`], saying whether it may have started).
//!
//! The wire types are `lab-agent-proto`'s, re-exported as [`proto`]; this
//! crate defines none of its own. The `labctl` command line is a package
//! of its own, so nothing here pulls in a CLI, the payload generator or
//! process control.

pub mod activity;
pub mod client;
pub mod error;
pub mod follow;
pub mod grade;
mod interim;
pub mod json;
mod reuse;
pub mod session;
pub mod stream;
pub mod timeline;
pub mod transport;
pub mod wait;

pub use activity::Activity;
pub use client::{Client, ClientBuilder, Dialer, Dialing, RawResponse};
pub use error::{Error, PinnedBy};
pub use follow::Follow;
pub use grade::{CheckResult, CheckStatus, Gradable, GradeOutcome, GradeReport, grade_all};
pub use lab_agent_proto as proto;
pub use session::{Session, SessionError};
pub use stream::{ExecStream, SetupLog};
pub use timeline::{
    Answers, AnswersError, BackendTimes, Distribution, Phase, PhaseStats, Preparation,
    distribution, phases_of,
};
#[cfg(feature = "kubevirt")]
pub use transport::kubevirt::KubeApi;
pub use wait::{Progress, WaitEach, WaitOutcome, wait_all, wait_each};
