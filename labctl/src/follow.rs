//! `labctl wait --follow`: each VM's setup log as it grows, followed from
//! offset 0 with `GET /v1/setup/log?offset=N&wait=SECS` long-polls
//! ([`Client::setup_log`]), one task per VM.
//!
//! - Only whole lines are shown (a partial line waits for its `\n`, or the
//!   end of the log, or [`MAX_LINE`]), so the lines of several VMs and the
//!   live progress display never cut into each other. Each line is the
//!   guest's text escaped as `labctl exec` escapes a command's output for a
//!   terminal (`lab_agent_proto::text::escape_lines`: `\r`, `\x1b` shown,
//!   not obeyed) — always, a pipe included: the log is shown to a person,
//!   and a program that wants its bytes has the client's `setup_log`.
//! - With several VMs each line starts with its VM's URL (`URL: `), as the
//!   progress lines do.
//! - A log shorter than the offset asked for was replaced (a new setup
//!   run): the agent answers from 0 and says so; a note says it too.
//! - Bounded by the wait's deadline: every call, every backoff. An agent
//!   not up yet is retried (as the wait retries it); one that cannot be
//!   followed (401, an agent without the endpoint, a hostile answer) ends
//!   the follow with a note, and the wait reports the rest.
//! - Once the wait has ended, a VM that is ready or whose setup failed is
//!   drained (no long-poll: the setup is over; an agent gone by then is
//!   not retried) so its last lines come before the verdict; any other is
//!   abandoned.

use lab_agent_client::{Client, Error};
use lab_agent_proto::{MAX_READY_WAIT_SECS, SetupState};
use std::io::Write;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A line without `\n` longer than this is shown as it is: a log is held
/// to this much per VM, whatever the guest writes.
pub const MAX_LINE: usize = 64 * 1024;

/// Retries of an agent that does not answer, doubling up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The least time between two answers with nothing new.
const MIN_EMPTY_GAP: Duration = Duration::from_millis(200);

/// What the wait tells a follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The wait goes on: long-poll.
    No,
    /// The wait has ended and the setup is over: read what is left, then end.
    Drain,
    /// The wait has ended otherwise: end now.
    Abort,
}

/// What a follower sends the printer.
#[derive(Debug)]
pub enum Msg {
    /// Whole lines of the log, escaped and prefixed, each ending in `\n`.
    Log(String),
    /// labctl's own note about a VM's log (for stderr).
    Note(String),
}

/// The followers of a wait's VMs and where their lines go.
#[derive(Debug)]
pub struct Follow {
    rx: mpsc::Receiver<Msg>,
    stops: Vec<watch::Sender<Stop>>,
    tasks: JoinSet<(usize, bool)>,
    vms: usize,
    /// The log to stderr (`--json`: stdout is the JSON's), else stdout.
    to_stderr: bool,
}

impl Follow {
    /// Starts one follower per client; must run inside the runtime.
    pub fn start(clients: &[Client], deadline: Instant, to_stderr: bool) -> Follow {
        // A few messages in flight: a follower waits for the printer
        // rather than reading ahead of it.
        let (tx, rx) = mpsc::channel(4);
        let several = clients.len() > 1;
        let mut tasks = JoinSet::new();
        let mut stops = Vec::new();
        for (i, client) in clients.iter().enumerate() {
            let (stop_tx, stop_rx) = watch::channel(Stop::No);
            stops.push(stop_tx);
            let prefix = if several {
                format!("{}: ", client.url())
            } else {
                String::new()
            };
            let follower = Follower {
                client: client.clone(),
                lines: LogLines::new(prefix),
                deadline,
                stop: stop_rx,
                tx: tx.clone(),
            };
            tasks.spawn(async move { (i, follower.run().await) });
        }
        Follow {
            rx,
            stops,
            tasks,
            vms: clients.len(),
            to_stderr,
        }
    }

    /// The next message; `None` once every follower has ended.
    pub async fn recv(&mut self) -> Option<Msg> {
        self.rx.recv().await
    }

    /// Tells follower `i` how the wait ended for its VM.
    pub fn stop(&self, i: usize, how: Stop) {
        let _ = self.stops[i].send(how);
    }

    /// Writes a message where it goes, flushed at once. A reader that went
    /// away (`| head`) is not an error.
    pub fn print(&self, msg: &Msg) {
        match msg {
            Msg::Log(text) if !self.to_stderr => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
            Msg::Log(text) => {
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
            Msg::Note(text) => eprintln!("{text}"),
        }
    }

    /// Per VM, whether its log was followed to its end (the setup over and
    /// every byte shown). Followers still running are ended.
    pub async fn finish(mut self) -> Vec<bool> {
        self.tasks.abort_all();
        let mut done = vec![false; self.vms];
        while let Some(joined) = self.tasks.join_next().await {
            if let Ok((i, whole)) = joined {
                done[i] = whole;
            }
        }
        done
    }
}

struct Follower {
    client: Client,
    lines: LogLines,
    deadline: Instant,
    stop: watch::Receiver<Stop>,
    tx: mpsc::Sender<Msg>,
}

impl Follower {
    /// Follows the log until its end (`true`), or until it cannot or must
    /// not go on (`false`).
    async fn run(mut self) -> bool {
        let mut offset = 0;
        let mut backoff = Duration::from_millis(200);
        loop {
            let stop = *self.stop.borrow_and_update();
            if stop == Stop::Abort {
                return false;
            }
            let draining = stop == Stop::Drain;
            let now = Instant::now();
            if now >= self.deadline {
                return false;
            }
            // The agent long-polls at most 60 s, and never past our
            // deadline; the call itself is cut there too (its own budget
            // is the wait plus the client's request timeout).
            let wait = if draining {
                0
            } else {
                (self.deadline - now).as_secs().min(MAX_READY_WAIT_SECS)
            };
            let call = tokio::time::timeout_at(self.deadline, self.client.setup_log(offset, wait));
            let answer = tokio::select! {
                answer = call => answer,
                // The wait ended: drop the long-poll, look again.
                changed = self.stop.changed(), if !draining => {
                    if changed.is_err() {
                        return false;
                    }
                    continue;
                }
            };
            let log = match answer {
                Err(_) => return false,
                Ok(Ok(log)) => log,
                // Draining, the VM was just seen ready or failed: an agent
                // gone now is not waited for until the deadline.
                Ok(Err(e)) if retry(&e) && !draining => {
                    self.pause(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                Ok(Err(e)) => {
                    // A 401 is the wait's to report.
                    if !e.is_unauthorized() {
                        self.note(format!(
                            "note: {}the setup log cannot be followed: {e}",
                            self.lines.prefix
                        ))
                        .await;
                    }
                    return false;
                }
            };
            backoff = Duration::from_millis(200);
            if log.restarted {
                let rest = self.lines.flush();
                self.send(rest).await;
                self.note(format!(
                    "note: {}the setup log was replaced (a new setup run): from its start",
                    self.lines.prefix
                ))
                .await;
            }
            offset = log.next_offset;
            let text = self.lines.push(&log.bytes);
            self.send(text).await;
            let over = !matches!(log.state, SetupState::Pending | SetupState::Running);
            if log.bytes.is_empty() && (over || draining) {
                let rest = self.lines.flush();
                self.send(rest).await;
                return true;
            }
            if log.bytes.is_empty() && !draining {
                // An agent answers nothing new only when its long-poll
                // ended: one that answers at once (not an agent: the
                // student is root) is not asked again in a tight loop.
                self.pause(MIN_EMPTY_GAP).await;
            }
        }
    }

    /// Sleeps `d` (not past the deadline), or until the wait ends.
    async fn pause(&mut self, d: Duration) {
        let until = (Instant::now() + d).min(self.deadline);
        let draining = *self.stop.borrow() != Stop::No;
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            _ = self.stop.changed(), if !draining => {}
        }
    }

    async fn send(&self, text: String) {
        if !text.is_empty() {
            // The printer is gone only when labctl is ending.
            let _ = self.tx.send(Msg::Log(text)).await;
        }
    }

    async fn note(&self, text: String) {
        let _ = self.tx.send(Msg::Note(text)).await;
    }
}

/// An agent not up yet, or busy: try again (as the wait does).
fn retry(e: &Error) -> bool {
    e.is_unreachable() || e.is_busy() || e.status().is_some_and(|s| s.is_server_error())
}

/// A log's bytes cut into whole lines, each escaped and prefixed.
#[derive(Debug)]
pub struct LogLines {
    prefix: String,
    /// The last line's start, until its `\n` comes.
    partial: Vec<u8>,
}

impl LogLines {
    pub fn new(prefix: String) -> LogLines {
        LogLines {
            prefix,
            partial: Vec::new(),
        }
    }

    /// The whole lines `bytes` completes, ready to print.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut out = String::new();
        let mut rest = bytes;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..i]);
            self.line(&mut out);
            rest = &rest[i + 1..];
        }
        self.partial.extend_from_slice(rest);
        // A line that never ends is shown in pieces rather than held.
        while self.partial.len() >= MAX_LINE {
            let tail = self.partial.split_off(MAX_LINE);
            self.line(&mut out);
            self.partial = tail;
        }
        out
    }

    /// The last line, though it has no `\n` (the log ended so).
    pub fn flush(&mut self) -> String {
        let mut out = String::new();
        if !self.partial.is_empty() {
            self.line(&mut out);
        }
        out
    }

    fn line(&mut self, out: &mut String) {
        // A `\n` never falls inside a UTF-8 sequence: only a line cut at
        // MAX_LINE can split a character (shown as U+FFFD).
        let text = String::from_utf8_lossy(&self.partial);
        out.push_str(&self.prefix);
        out.push_str(&lab_agent_proto::text::escape_lines(&text));
        out.push('\n');
        self.partial.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_escaped_and_prefixed() {
        let mut l = LogLines::new("http://a: ".into());
        assert_eq!(l.push(b"step 1\nstep"), "http://a: step 1\n");
        assert_eq!(
            l.push(b" 2\n\x1b]0;owned\x07 10%\r50%\n\n"),
            concat!(
                "http://a: step 2\n",
                "http://a: \\x1b]0;owned\\x07 10%\\r50%\n",
                "http://a: \n"
            )
        );
        assert_eq!(l.push("caf\u{e9}".as_bytes()), "");
        assert_eq!(l.flush(), "http://a: caf\u{e9}\n");
        assert_eq!(l.flush(), "");
    }

    #[test]
    fn a_line_that_never_ends_is_not_held_whole() {
        let mut l = LogLines::new(String::new());
        let shown = l.push(&vec![b'x'; MAX_LINE * 2 + 5]);
        assert_eq!(shown.len(), MAX_LINE * 2 + 2, "two pieces, each a line");
        assert_eq!(l.partial.len(), 5);
    }
}
