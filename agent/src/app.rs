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
    /// `--max-execs` permits; exhausted means 429, never a queue, so a
    /// runaway backend sees back-pressure instead of piling up shells.
    pub exec_slots: Arc<Semaphore>,
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
