//! Waiting for readiness: one agent ([`Client::wait_ready`]) or many at
//! once, all together ([`wait_all`], with progress reports for a live
//! display) or each as it ends ([`wait_each`], a [`Stream`]).
//!
//! A VM's port is closed for its first seconds, and under qemu's user
//! networking a connection may be accepted and then closed, or left
//! unanswered, before the guest listens, so "connected" means nothing: only
//! an answer from the agent counts. Until one comes, refused/reset/closed/
//! timed-out attempts and a 503 from something in between are "not up
//! yet", retried with a bounded backoff, and no attempt waits longer than
//! the connect timeout and 3 s more. Once the agent answers, long-polls (`/v1/ready?wait=`) make a
//! terminal state known as soon as the agent knows it. `failed` and 401 end
//! the wait at once.

use crate::client::Client;
use crate::error::{Error, LastSeen};
use futures_core::Stream;
use hyper::StatusCode;
use lab_agent_proto::{ReadyResponse, ReadyState};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// First pause after a failed attempt; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Until the agent first answers, how long an attempt may wait for its
/// answer beyond the connect timeout. A port forward (qemu's user
/// networking, a proxy) accepts the connection before the guest listens,
/// and a request sent then may never be answered; a new attempt on a new
/// connection reaches the agent as soon as it listens. An agent answers
/// `/v1/ready` in milliseconds, even beside a fork bomb in its guest: with
/// the whole request timeout (30 s) instead, `labctl wait` once saw a
/// failed setup only after `labctl try` had stopped that VM.
const FIRST_ANSWER: Duration = Duration::from_secs(3);

/// Where a wait stands, reported after every attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Time since the wait began.
    pub elapsed: Duration,
    /// The agent's state, or `None` while it does not answer.
    pub state: Option<ReadyState>,
    /// The agent's reason, or why it could not be reached
    /// ("connection refused").
    pub reason: String,
    /// Attempts made so far (requests sent, answered or not).
    pub attempts: u32,
    /// The agent's whole answer, or `None` while it does not answer: what
    /// a display shows beyond the state (the cloud-init stage running,
    /// setup's last log line). Shared, as every report is cloned.
    pub answer: Option<Arc<ReadyResponse>>,
}

impl Client {
    /// Waits until the agent is `ready` or `deadline` passes.
    ///
    /// Returns the ready response, or at once [`Error::SetupFailed`] when
    /// the agent reports `failed` and a 401 when the token is refused. Other
    /// errors the agent answers with (a 404, a body that is not JSON) also
    /// end the wait: retrying would not change them.
    pub async fn wait_ready(&self, deadline: Instant) -> Result<ReadyResponse, Error> {
        self.wait_ready_with(deadline, |_| {}).await
    }

    /// [`Client::wait_ready`], calling `on_progress` after every attempt.
    pub async fn wait_ready_with(
        &self,
        deadline: Instant,
        mut on_progress: impl FnMut(&Progress),
    ) -> Result<ReadyResponse, Error> {
        let start = Instant::now();
        let mut backoff = MIN_BACKOFF;
        let mut attempts = 0;
        let mut last = LastSeen::Nothing;
        // When the agent first reported the state it is in now: on the
        // deadline, how long the VM has been stuck in that phase.
        let mut state_since: Option<(ReadyState, Instant)> = None;
        loop {
            let now = Instant::now();
            if now >= deadline && attempts > 0 {
                return Err(Error::WaitTimeout {
                    url: self.url().to_owned(),
                    waited: now - start,
                    last,
                    in_state: state_since.map(|(_, since)| now - since),
                });
            }
            let remaining = deadline.saturating_duration_since(now);
            let answered = matches!(last, LastSeen::State(_));
            // Long-poll only once the agent has answered: before that, a
            // long-poll on a half-open forwarded port would just sit there.
            let wait = if answered {
                self.long_poll().min(remaining)
            } else {
                Duration::ZERO
            };
            // Never overrun the deadline by more than a moment.
            let mut bound = remaining.max(Duration::from_millis(100)) + Duration::from_millis(500);
            if !answered {
                bound = bound.min(self.connect_timeout() + FIRST_ANSWER);
            }
            attempts += 1;
            let sent = Instant::now();
            let attempt = tokio::time::timeout(bound, self.ready_wait(wait)).await;
            let progress = |state, reason: String, answer| Progress {
                elapsed: start.elapsed(),
                state,
                reason,
                attempts,
                answer,
            };
            match attempt {
                Ok(Ok(r)) => {
                    let answer = Arc::new(r);
                    on_progress(&progress(
                        Some(answer.state),
                        reason_of(&answer),
                        Some(answer.clone()),
                    ));
                    // Copied only when the caller kept the report (`wait_all`
                    // sends it on to its display).
                    let r = Arc::try_unwrap(answer).unwrap_or_else(|a| (*a).clone());
                    match r.state {
                        ReadyState::Ready => return Ok(r),
                        ReadyState::Failed => {
                            return Err(Error::SetupFailed {
                                url: self.url().to_owned(),
                                ready: Box::new(r),
                            });
                        }
                        _ => {}
                    }
                    if state_since.is_none_or(|(s, _)| s != r.state) {
                        // Seen now; it may have begun a little earlier, so the
                        // time reported is never more than it was in it.
                        state_since = Some((r.state, Instant::now()));
                    }
                    last = LastSeen::State(Box::new(r));
                    backoff = MIN_BACKOFF;
                    // An agent that answers a long-poll at once (older, or
                    // one that reports every change) must not be hammered.
                    let took = sent.elapsed();
                    if took < wait / 2 || wait.is_zero() {
                        sleep_until_before(MIN_BACKOFF.max(Duration::from_millis(200)), deadline)
                            .await;
                    }
                }
                Ok(Err(e)) if not_up_yet(&e) => {
                    let brief = e.brief();
                    on_progress(&progress(None, brief.clone(), None));
                    tracing::debug!(url = self.url(), error = %e, "agent not up yet");
                    // A state seen earlier is kept: the agent may restart.
                    if !matches!(last, LastSeen::State(_)) {
                        last = LastSeen::Unreachable(brief);
                    }
                    sleep_until_before(backoff, deadline).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Ok(Err(e)) => return Err(e),
                Err(_elapsed) => {
                    if !answered {
                        let brief = format!("no response within {}s", bound.as_secs());
                        on_progress(&progress(None, brief.clone(), None));
                        last = LastSeen::Unreachable(brief);
                    }
                }
            }
        }
    }
}

/// How one agent's wait ended, in [`wait_all`].
#[derive(Debug)]
pub struct WaitOutcome {
    pub url: String,
    pub result: Result<ReadyResponse, Error>,
}

/// Waits for several agents at once (one lab session, several VMs) until
/// each is ready, has failed, or `deadline` passes; returns each one's
/// outcome, in the order of `clients`. `on_progress` gets the index of the
/// client and its progress.
///
/// Every VM is waited for to the end even when another fails, so that the
/// caller can report all of them; a caller that wants to give up on the
/// first failure can wait on each [`Client`] itself.
pub async fn wait_all(
    clients: &[Client],
    deadline: Instant,
    mut on_progress: impl FnMut(usize, &Progress),
) -> Vec<WaitOutcome> {
    // Boxed: a ready answer is large, and a progress event is sent often.
    enum Event {
        Progress(usize, Progress),
        Done(usize, Box<Result<ReadyResponse, Error>>),
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        let client = client.clone();
        let tx = tx.clone();
        tasks.spawn(async move {
            let progress_tx = tx.clone();
            let result = client
                .wait_ready_with(deadline, move |p| {
                    let _ = progress_tx.send(Event::Progress(i, p.clone()));
                })
                .await;
            let _ = tx.send(Event::Done(i, Box::new(result)));
        });
    }
    drop(tx);
    let mut results: Vec<Option<Result<ReadyResponse, Error>>> =
        clients.iter().map(|_| None).collect();
    // Every task sends `Done` before it ends and holds a sender until then,
    // so the channel closes exactly when all are done.
    while let Some(event) = rx.recv().await {
        match event {
            Event::Progress(i, p) => on_progress(i, &p),
            Event::Done(i, r) => results[i] = Some(*r),
        }
    }
    // Dropping the set would abort tasks; they have all finished by now.
    while tasks.join_next().await.is_some() {}
    clients
        .iter()
        .zip(results)
        .map(|(c, r)| WaitOutcome {
            url: c.url().to_owned(),
            result: r.expect("every wait task reports its result"),
        })
        .collect()
}

/// Waits for several agents at once (a platform's fleet, each VM handed to
/// its student on its own) and yields each one's outcome as soon as it is
/// known — ready, failed, unreachable to the end — with its index in
/// `clients`: a VM that is ready is never held back by a slower or dead
/// one, as [`wait_all`]'s answer is. Every wait starts now and ends by
/// `deadline`; the stream ends after the last. Dropping it ends the waits
/// still running. Must be called within a tokio runtime (the waits are
/// spawned on it).
///
/// ```no_run
/// # async fn f(clients: Vec<lab_agent_client::Client>) {
/// let deadline = std::time::Instant::now() + std::time::Duration::from_secs(150);
/// let mut each = lab_agent_client::wait_each(&clients, deadline);
/// while let Some((i, outcome)) = each.next().await {
///     match outcome.result {
///         Ok(ready) => { /* hand VM `i` to its student */ }
///         Err(e) => { /* VM `i` failed: e.is_setup_failed(), e.is_timeout(), … */ }
///     }
/// }
/// # }
/// ```
pub fn wait_each(clients: &[Client], deadline: Instant) -> WaitEach {
    let mut tasks = JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        let client = client.clone();
        tasks.spawn(async move {
            let result = client.wait_ready(deadline).await;
            let url = client.url().to_owned();
            (i, WaitOutcome { url, result })
        });
    }
    WaitEach { tasks }
}

/// The outcomes of [`wait_each`] as they come: a [`Stream`] of
/// `(index, outcome)`, also readable without a stream library through
/// [`WaitEach::next`].
#[derive(Debug)]
pub struct WaitEach {
    tasks: JoinSet<(usize, WaitOutcome)>,
}

impl WaitEach {
    /// The next outcome to come, or `None` when every wait has ended.
    pub async fn next(&mut self) -> Option<(usize, WaitOutcome)> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// How many waits have not ended yet.
    pub fn remaining(&self) -> usize {
        self.tasks.len()
    }
}

impl Stream for WaitEach {
    type Item = (usize, WaitOutcome);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let tasks = &mut self.get_mut().tasks;
        loop {
            return match tasks.poll_join_next(cx) {
                Poll::Ready(Some(Ok(outcome))) => Poll::Ready(Some(outcome)),
                // A wait never panics; if one did, so does its reader.
                Poll::Ready(Some(Err(e))) if e.is_panic() => {
                    std::panic::resume_unwind(e.into_panic())
                }
                // Cancelled: only by a runtime shutting down.
                Poll::Ready(Some(Err(_))) => continue,
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.tasks.len(), Some(self.tasks.len()))
    }
}

/// Errors that mean "the agent is not answering yet": keep waiting.
fn not_up_yet(e: &Error) -> bool {
    // KubeVirt's refusals: some pass (the VMI is coming), some never do.
    if matches!(e, Error::Relay { .. }) {
        return e.relay_may_pass();
    }
    if e.is_unreachable() {
        return true;
    }
    // Something between us and the agent (a proxy, a Service, a port
    // forward) answers for it while it is down; and a busy agent is up.
    // An answer that is the agent's own but wrong (a readiness body that
    // does not parse) is not "not up yet": it ends the wait.
    matches!(e, Error::Status { .. })
        && matches!(
            e.status(),
            Some(
                StatusCode::BAD_GATEWAY
                    | StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::GATEWAY_TIMEOUT
                    | StatusCode::TOO_MANY_REQUESTS
            )
        )
        && e.error_code()
            .is_none_or(|c| c == lab_agent_proto::ErrorCode::Busy)
}

fn reason_of(r: &ReadyResponse) -> String {
    match &r.reason {
        Some(reason) => reason.clone(),
        None => r.state.to_string(),
    }
}

async fn sleep_until_before(pause: Duration, deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    tokio::time::sleep(pause.min(left)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_on_nothing_ends_at_the_deadline_as_unreachable() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Client::new(&format!("http://127.0.0.1:{port}"), "t").unwrap();
        let mut seen = Vec::new();
        let err = c
            .wait_ready_with(Instant::now() + Duration::from_millis(600), |p| {
                seen.push(p.clone())
            })
            .await
            .unwrap_err();
        assert!(err.is_timeout() && err.is_unreachable(), "{err:?}");
        assert!(
            err.to_string()
                .contains("never answered (connection refused)"),
            "{err}"
        );
        assert!(seen.len() >= 2, "retried: {seen:?}");
        assert!(
            seen.iter()
                .all(|p| p.state.is_none() && p.reason == "connection refused")
        );
    }

    /// A port that accepts and closes at once, like qemu's slirp forwarding
    /// before the guest listens, is "not up yet", never "up".
    #[tokio::test]
    async fn accept_then_close_is_not_up() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                drop(s);
            }
        });
        let c = Client::new(&format!("http://127.0.0.1:{port}"), "t").unwrap();
        let err = c
            .wait_ready(Instant::now() + Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(err.is_timeout() && err.is_unreachable(), "{err:?}");
        assert!(
            err.to_string()
                .contains("connection closed before a response"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn wait_all_reports_every_client_in_order() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let clients = vec![
            Client::new(&format!("http://127.0.0.1:{port}"), "t").unwrap(),
            Client::new(&format!("http://127.0.0.1:{port}/second"), "t").unwrap(),
        ];
        let mut indices = std::collections::BTreeSet::new();
        let out = wait_all(
            &clients,
            Instant::now() + Duration::from_millis(300),
            |i, _| {
                indices.insert(i);
            },
        )
        .await;
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].url, format!("http://127.0.0.1:{port}/second"));
        assert!(
            out.iter()
                .all(|o| o.result.as_ref().unwrap_err().is_timeout())
        );
        assert_eq!(indices.into_iter().collect::<Vec<_>>(), vec![0, 1]);
    }
}
