//! Following VMs' setup logs as they grow, from offset 0, with
//! `GET /v1/setup/log?offset=N&wait=SECS` long-polls ([`Client::setup_log`]),
//! one task per VM: what `labctl wait --follow` prints, and what a backend
//! streaming a setup to its author would do.
//!
//! - Only whole lines are yielded (a partial line waits for its `\n`, or
//!   the end of the log, or [`MAX_LINE`]), so the lines of several VMs
//!   never cut into each other. Each line is the guest's text escaped
//!   (`lab_agent_proto::text::escape_lines`: `\r`, `\x1b` shown, not
//!   obeyed): the log is shown to a person, and a program that wants its
//!   bytes has [`Client::setup_log`].
//! - With several VMs each line starts with its VM's URL (`URL: `).
//! - A log shorter than the offset asked for was replaced (a new setup
//!   run): the agent answers from 0 and says so; [`Event::Replaced`] says
//!   it too.
//! - Bounded by the wait's deadline: every call, every backoff. An agent
//!   not up yet is retried (as a wait retries it); one that cannot be
//!   followed (401, an agent without the endpoint, a hostile answer) ends
//!   its follower with [`Event::Unfollowable`] (not for a 401: that is the
//!   wait's to report).
//! - [`wait_following`] waits for the VMs while following them. Once the
//!   wait has ended ([`Follow::stop_after`]), a VM that is ready or whose
//!   setup failed is drained (no long-poll: the setup is over; an
//!   agent gone by then is not retried) so its last lines come before the
//!   verdict; any other is abandoned.
//! - Memory is bounded: a few messages in flight, [`MAX_LINE`] held per VM.

use crate::{Client, Error, Progress, WaitOutcome, wait_all};
use lab_agent_proto::{MAX_READY_WAIT_SECS, SetupState};
use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A line without `\n` longer than this is yielded as it is: a log is held
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

impl Stop {
    /// How a follower stops once its VM's wait ended with `outcome`: the
    /// rest of a log whose setup is over (ready, or failed) is read.
    pub fn after(outcome: &WaitOutcome) -> Stop {
        let over = outcome
            .result
            .as_ref()
            .map_or_else(Error::is_setup_failed, |_| true);
        if over { Stop::Drain } else { Stop::Abort }
    }
}

/// What the followers yield.
#[derive(Debug)]
pub enum Event {
    /// Whole lines of a log, escaped and prefixed, each ending in `\n`.
    Lines(String),
    /// VM `vm`'s log was replaced (a new setup run): followed from its start.
    Replaced { vm: usize },
    /// VM `vm`'s log cannot be followed (not sent for a 401): its follower
    /// has ended; the wait's verdict stands on its own.
    Unfollowable { vm: usize, error: Error },
}

/// The followers of a wait's VMs.
#[derive(Debug)]
pub struct Follow {
    rx: mpsc::Receiver<Event>,
    stops: Vec<watch::Sender<Stop>>,
    tasks: JoinSet<(usize, bool)>,
    prefixes: Vec<String>,
}

impl Follow {
    /// Starts one follower per client, until `deadline`; must run inside
    /// a tokio runtime.
    pub fn start(clients: &[Client], deadline: Instant) -> Follow {
        // A few messages in flight: a follower waits for its reader
        // rather than reading ahead of it.
        let (tx, rx) = mpsc::channel(4);
        let several = clients.len() > 1;
        let mut tasks = JoinSet::new();
        let mut stops = Vec::new();
        let mut prefixes = Vec::new();
        for (vm, client) in clients.iter().enumerate() {
            let (stop_tx, stop_rx) = watch::channel(Stop::No);
            stops.push(stop_tx);
            let prefix = if several {
                format!("{}: ", client.url())
            } else {
                String::new()
            };
            prefixes.push(prefix.clone());
            let follower = Follower {
                vm,
                client: client.clone(),
                lines: LogLines::new(prefix),
                deadline,
                stop: stop_rx,
                tx: tx.clone(),
            };
            tasks.spawn(async move { (vm, follower.run().await) });
        }
        Follow {
            rx,
            stops,
            tasks,
            prefixes,
        }
    }

    /// The next event; `None` once every follower has ended.
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// What VM `vm`'s lines start with: `URL: ` with several VMs, else
    /// nothing.
    pub fn prefix(&self, vm: usize) -> &str {
        &self.prefixes[vm]
    }

    /// Tells VM `vm`'s follower how the wait ended for its VM.
    pub fn stop(&self, vm: usize, how: Stop) {
        let _ = self.stops[vm].send(how);
    }

    /// Tells each follower how the wait ended for its VM ([`Stop::after`]).
    pub fn stop_after(&self, outcomes: &[WaitOutcome]) {
        for (vm, outcome) in outcomes.iter().enumerate() {
            self.stop(vm, Stop::after(outcome));
        }
    }

    /// Per VM, whether its log was followed to its end (the setup over and
    /// every byte yielded). Followers still running are ended.
    pub async fn finish(mut self) -> Vec<bool> {
        self.tasks.abort_all();
        let mut done = vec![false; self.prefixes.len()];
        while let Some(joined) = self.tasks.join_next().await {
            if let Ok((vm, whole)) = joined {
                done[vm] = whole;
            }
        }
        done
    }
}

/// Waits for `clients` ([`wait_all`]) while following their setup logs:
/// `on_progress` gets each VM's progress, `on_event` each event of the logs
/// (with the [`Follow`], for [`Follow::prefix`]). Once the wait has ended,
/// each log whose setup is over is read to its end ([`Follow::stop_after`],
/// by `deadline`), so its last lines come before the verdict. Returns each
/// VM's outcome, and whether its whole log was yielded.
pub async fn wait_following(
    clients: &[Client],
    deadline: std::time::Instant,
    on_progress: impl FnMut(usize, &Progress),
    mut on_event: impl FnMut(&Follow, Event),
) -> (Vec<WaitOutcome>, Vec<bool>) {
    let mut follow = Follow::start(clients, deadline.into());
    let outcomes = {
        let mut wait = pin!(wait_all(clients, deadline, on_progress));
        let mut following = true;
        loop {
            match first(&mut wait, following.then(|| follow.recv())).await {
                Either::A(outcomes) => break outcomes,
                Either::B(Some(event)) => on_event(&follow, event),
                Either::B(None) => following = false,
            }
        }
    };
    follow.stop_after(&outcomes);
    let drain = async {
        while let Some(event) = follow.recv().await {
            on_event(&follow, event);
        }
    };
    let _ = tokio::time::timeout_at(deadline.into(), drain).await;
    (outcomes, follow.finish().await)
}

struct Follower {
    vm: usize,
    client: Client,
    lines: LogLines,
    deadline: Instant,
    stop: watch::Receiver<Stop>,
    tx: mpsc::Sender<Event>,
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
            // The wait ended: drop the long-poll, look again.
            let changed = (!draining).then(|| self.stop.changed());
            let answer = match first(call, changed).await {
                Either::A(answer) => answer,
                Either::B(Err(_)) => return false,
                Either::B(Ok(())) => continue,
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
                Ok(Err(error)) => {
                    // A 401 is the wait's to report.
                    if !error.is_unauthorized() {
                        let vm = self.vm;
                        self.send(Event::Unfollowable { vm, error }).await;
                    }
                    return false;
                }
            };
            backoff = Duration::from_millis(200);
            if log.restarted {
                let rest = self.lines.flush();
                self.send_lines(rest).await;
                self.send(Event::Replaced { vm: self.vm }).await;
            }
            offset = log.next_offset;
            let text = self.lines.push(&log.bytes);
            self.send_lines(text).await;
            let over = !matches!(log.state, SetupState::Pending | SetupState::Running);
            if log.bytes.is_empty() && (over || draining) {
                let rest = self.lines.flush();
                self.send_lines(rest).await;
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
        let changed = (!draining).then(|| self.stop.changed());
        first(tokio::time::sleep_until(until), changed).await;
    }

    async fn send_lines(&self, text: String) {
        if !text.is_empty() {
            self.send(Event::Lines(text)).await;
        }
    }

    async fn send(&self, event: Event) {
        // The reader is gone only when its program is ending.
        let _ = self.tx.send(event).await;
    }
}

/// An agent not up yet, or busy: try again (as the wait does).
fn retry(e: &Error) -> bool {
    e.is_unreachable() || e.is_busy() || e.status().is_some_and(|s| s.is_server_error())
}

enum Either<A, B> {
    A(A),
    B(B),
}

/// The first of `a` and `b` (none, never) to finish: `tokio::select!`
/// without the macros, which a backend linking this crate would pay for.
async fn first<A: Future, B: Future>(a: A, b: Option<B>) -> Either<A::Output, B::Output> {
    let mut a = pin!(a);
    let mut b = pin!(b);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Either::A(v));
        }
        match b.as_mut().as_pin_mut().map(|b| b.poll(cx)) {
            Some(Poll::Ready(v)) => Poll::Ready(Either::B(v)),
            _ => Poll::Pending,
        }
    })
    .await
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

    /// The first future to finish wins; a missing one never does.
    #[tokio::test]
    async fn first_of_two() {
        let never = std::future::pending::<()>();
        assert!(matches!(
            first(async { 1 }, Some(never)).await,
            Either::A(1)
        ));
        let never = std::future::pending::<()>();
        assert!(matches!(
            first(never, Some(async { 2 })).await,
            Either::B(2)
        ));
        let none: Option<std::future::Pending<()>> = None;
        assert!(matches!(first(async { 3 }, none).await, Either::A(3)));
    }
}
