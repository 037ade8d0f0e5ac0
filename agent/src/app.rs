//! The state every request handler shares.

use crate::process::Jobs;
use crate::readiness::Readiness;
use crate::token::Token;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{Semaphore, watch};

#[derive(Debug)]
pub struct App {
    pub token: Token,
    pub readiness: Readiness,
    /// `--max-execs` permits: never more shells than that. Past them an
    /// exec waits briefly in a bounded queue ([`App::exec_queue`]), then
    /// 429, so a runaway backend sees back-pressure instead of piling up
    /// shells, and a burst just past the limit costs a short wait.
    pub exec_slots: Arc<Semaphore>,
    /// Places for execs waiting for a slot (`crate::api::exec::QUEUED_PER_SLOT`
    /// per slot); none free means 429 at once.
    pub exec_queue: Arc<Semaphore>,
    pub max_execs: usize,
    /// Output held by running commands and unsent answers.
    pub output: crate::http::budget::Budget,
    /// Process groups of running commands (and the setup), for shutdown.
    pub jobs: Jobs,
    pub started: Instant,
    /// `--lab-dir`, reported in `/v1/info` so a grader gives the checks the
    /// `LAB_DIR` this agent was started with.
    pub lab_dir: PathBuf,
    /// 401s and refused connections, summarised in the log periodically.
    pub rejections: crate::http::rejections::Rejections,
    /// Flips to `true` once shutdown begins: long-polls answer at once and
    /// new execs are refused.
    pub shutdown: watch::Receiver<bool>,
}

impl App {
    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}
