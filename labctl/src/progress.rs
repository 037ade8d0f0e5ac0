//! The progress display of a wait: on a terminal, one live line per VM
//! (spinner, elapsed time against the deadline, state, and what the VM is
//! doing: setup's last log line, else the cloud-init stage running, else
//! the agent's reason), redrawn in place and cleared at the end; otherwise
//! a plain line each time a VM's phase changes (its state, reason or
//! cloud-init stage: never a line per line of the setup log). Always on
//! stderr. What a VM is doing, and its texts, are the client's
//! ([`Activity`]).
//! [`wait_with_display`] waits with it (`wait`, `grade --wait`; with
//! `wait --follow` each VM's setup log as it grows, the client's
//! [`Follow`], above the live lines), and [`wait_session`] for a started
//! lab's VMs, failing fast (`try`, `test`);
//! [`print_setup_log`] shows a failed setup's log.

use super::common::human_duration;
use lab_agent_client::activity::one_line;
use lab_agent_client::follow::{self, Event, Follow};
use lab_agent_client::{Activity, Client, Error, Progress, Session, SessionError, WaitOutcome};
use lab_agent_proto::ReadyState;
use std::cell::RefCell;
use std::io::Write;
use std::time::{Duration, Instant};

const SPINNER: &[char] = &['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// How often the live display redraws (elapsed time, spinner).
pub const TICK: Duration = Duration::from_millis(125);

#[derive(Debug)]
pub struct WaitDisplay {
    live: bool,
    start: Instant,
    rows: Vec<Row>,
    /// Lines of the live display currently on screen.
    drawn: usize,
    frame: usize,
    /// Show URLs (several VMs) or not (one VM, named once by the caller).
    show_urls: bool,
    /// The whole wait's length, shown against the elapsed time.
    limit: Option<Duration>,
}

#[derive(Debug, Clone)]
struct Row {
    url: String,
    /// Its reason the caller's `not_up` text while the agent is silent.
    activity: Activity,
    /// The reason is the caller's text: show it alone.
    reason_is_status: bool,
}

impl WaitDisplay {
    /// A display for these VMs; live when stderr is a terminal.
    pub fn new(urls: Vec<String>) -> Self {
        Self::with_mode(urls, crate::color::stderr_live())
    }

    pub fn with_mode(urls: Vec<String>, live: bool) -> Self {
        let show_urls = urls.len() > 1;
        WaitDisplay {
            live,
            start: Instant::now(),
            rows: urls
                .into_iter()
                .map(|url| Row {
                    url,
                    activity: Activity::connecting(),
                    reason_is_status: false,
                })
                .collect(),
            drawn: 0,
            frame: 0,
            show_urls,
            limit: None,
        }
    }

    /// Shows the elapsed time against `limit`, the wait's whole length.
    pub fn with_limit(mut self, limit: Duration) -> Self {
        self.limit = Some(limit);
        self
    }

    /// A progress report for VM `i`.
    pub fn update(&mut self, i: usize, p: &Progress) {
        self.update_with(i, p, None);
    }

    /// A progress report for VM `i`; while the agent does not answer,
    /// `not_up` (if any) replaces "unreachable: REASON" (e.g. "booting:
    /// cloud-init: config stage" for a VM `labctl try` boots).
    pub fn update_with(&mut self, i: usize, p: &Progress, not_up: Option<String>) {
        let row = &mut self.rows[i];
        let mut activity = Activity::of(p);
        if let (None, Some(text)) = (p.state, not_up) {
            activity.reason = text;
        }
        let changed = activity.is_new_phase(&row.activity);
        row.reason_is_status = p.state.is_none() && activity.reason != p.reason;
        row.activity = activity;
        if self.live {
            self.redraw();
        } else if changed {
            let line = self.plain_line(i, p.elapsed);
            eprintln!("{line}");
        }
    }

    /// Called every [`TICK`] on a terminal: advance spinner and clock.
    pub fn tick(&mut self) {
        if self.live {
            self.frame = self.frame.wrapping_add(1);
            self.redraw();
        }
    }

    /// Draws the live lines again after [`WaitDisplay::clear`] (other
    /// output was printed above them).
    pub fn resume(&mut self) {
        if self.live {
            self.redraw();
        }
    }

    /// Removes the live lines so the final messages stand alone.
    pub fn clear(&mut self) {
        if self.live && self.drawn > 0 {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\x1b[{}F\x1b[J", self.drawn);
            let _ = err.flush();
            self.drawn = 0;
        }
    }

    /// VM `i`'s line for a log (not a terminal), `elapsed` into the wait.
    pub fn plain_line(&self, i: usize, elapsed: Duration) -> String {
        let row = &self.rows[i];
        let mut line = format!("[{:>6}] ", human_duration(elapsed));
        if self.show_urls {
            line.push_str(&format!("{}: ", row.url));
        }
        line.push_str(&row.status());
        line
    }

    /// VM `i`'s line on a terminal `width` columns wide, as redrawn.
    pub fn live_line(&self, i: usize, width: usize) -> String {
        let row = &self.rows[i];
        let mut line = format!(
            "{} {:>6}",
            SPINNER[self.frame % SPINNER.len()],
            human_duration(self.start.elapsed())
        );
        if let Some(limit) = self.limit {
            line.push_str(" / ");
            line.push_str(&human_duration(limit));
        }
        line.push_str("  ");
        line.push_str(&row.live_status());
        if self.show_urls {
            line = format!("{line}  ({})", row.url);
        }
        truncate(&line, width)
    }

    fn redraw(&mut self) {
        let width = terminal_width();
        let lines: Vec<String> = (0..self.rows.len())
            .map(|i| self.live_line(i, width))
            .collect();
        let mut err = std::io::stderr().lock();
        let mut buf = String::new();
        if self.drawn > 0 {
            buf.push_str(&format!("\x1b[{}F\x1b[J", self.drawn));
        }
        for l in &lines {
            buf.push_str(l);
            buf.push('\n');
        }
        let _ = err.write_all(buf.as_bytes());
        let _ = err.flush();
        self.drawn = lines.len();
    }
}

impl Row {
    /// The caller's text while the agent is silent, else the activity's
    /// status: for a plain line.
    fn status(&self) -> String {
        match self.reason_is_status {
            true => one_line(&self.activity.reason),
            false => self.activity.status(),
        }
    }

    /// The same for the live line, which shows what the VM does now.
    fn live_status(&self) -> String {
        match self.reason_is_status {
            true => one_line(&self.activity.reason),
            false => self.activity.now(),
        }
    }
}

impl Drop for WaitDisplay {
    /// An interrupted wait leaves no half-drawn lines behind.
    fn drop(&mut self) {
        self.clear();
    }
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// `$COLUMNS` when set, else 80: lines longer than the terminal would wrap
/// and break the in-place redraw.
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c: &usize| c >= 20)
        .unwrap_or(80)
        - 1
}

/// Waits for `clients`, showing progress on stderr, and prints a line per
/// VM as it settles (or nothing but progress for one VM that is ready).
/// With `follow` (`wait --follow`), each VM's setup log is printed as it
/// grows, above the live lines, to stdout (or stderr when `Some(true)`:
/// `--json`'s stdout is the JSON's); the VMs whose setup is over are read
/// to the end of their log before the verdict. Also says, per VM, whether
/// its whole log was shown.
pub async fn wait_with_display(
    clients: &[Client],
    deadline: Instant,
    follow: Option<bool>,
) -> (Vec<WaitOutcome>, Vec<bool>) {
    let urls = clients.iter().map(|c| c.url().to_owned()).collect();
    let start = Instant::now();
    let display = WaitDisplay::new(urls).with_limit(deadline.saturating_duration_since(start));
    let display = RefCell::new(display);
    // When each VM was first seen ready: one summary time for all would say
    // "ready after 6.0s" of a VM that was ready at once.
    let mut ready_at: Vec<Option<Duration>> = vec![None; clients.len()];
    let on_progress = |i: usize, p: &Progress| {
        if p.state == Some(ReadyState::Ready) && ready_at[i].is_none() {
            ready_at[i] = Some(p.elapsed);
        }
        display.borrow_mut().update(i, p);
    };
    // A log event is printed above the live lines (cleared, then redrawn
    // below it), so the two never mix.
    let wait = async {
        match follow {
            Some(to_stderr) => {
                let on_event = |f: &Follow, event: Event| {
                    let mut display = display.borrow_mut();
                    display.clear();
                    print_event(f, &event, to_stderr);
                    display.resume();
                };
                follow::wait_following(clients, deadline, on_progress, on_event).await
            }
            None => {
                let outcomes = lab_agent_client::wait_all(clients, deadline, on_progress).await;
                let shown = vec![false; outcomes.len()];
                (outcomes, shown)
            }
        }
    };
    let (outcomes, shown) = ticking(wait, &display).await;
    display.borrow_mut().clear();
    let elapsed = start.elapsed();
    for (o, at) in outcomes.iter().zip(&ready_at) {
        let prefix = if clients.len() > 1 {
            format!("{}: ", o.url)
        } else {
            String::new()
        };
        if o.result.is_ok() {
            eprintln!(
                "{prefix}ready after {}",
                human_duration(at.unwrap_or(elapsed))
            );
        }
    }
    (outcomes, shown)
}

/// Waits for a session's VMs (a lab of one VM: a session of one) as the
/// session does, failing fast, with a row each, labelled `labels`. While a
/// VM's agent does not answer, the text `not_up` returns for it (if any)
/// is shown instead of "unreachable: REASON".
pub async fn wait_session(
    session: &Session,
    deadline: Instant,
    labels: Vec<String>,
    mut not_up: impl FnMut(&str, &Progress) -> Option<String>,
) -> Result<(), SessionError> {
    let names: Vec<&str> = session.vms().map(|(n, _)| n).collect();
    let limit = deadline.saturating_duration_since(Instant::now());
    let display = RefCell::new(WaitDisplay::new(labels).with_limit(limit));
    let wait = session.wait_ready_with(deadline, |vm, p| {
        let text = not_up(vm, p);
        let i = names
            .iter()
            .position(|n| *n == vm)
            .expect("the session's VM");
        display.borrow_mut().update_with(i, p, text);
    });
    let waited = ticking(wait, &display).await;
    display.borrow_mut().clear();
    waited.map(drop)
}

/// Runs `wait`, the display's spinner and clock moving every [`TICK`].
async fn ticking<T>(wait: impl Future<Output = T>, display: &RefCell<WaitDisplay>) -> T {
    let mut tick = tokio::time::interval(TICK);
    tokio::pin!(wait);
    loop {
        tokio::select! {
            done = &mut wait => return done,
            _ = tick.tick() => display.borrow_mut().tick(),
        }
    }
}

/// Writes a log's lines (to stdout, or stderr when `to_stderr`) or
/// labctl's note about it (stderr), flushed at once. A reader that went
/// away (`| head`) is not an error.
fn print_event(follow: &Follow, event: &Event, to_stderr: bool) {
    match event {
        Event::Lines(text) if !to_stderr => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
        Event::Lines(text) => {
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
        }
        Event::Replaced { vm } => eprintln!(
            "note: {}the setup log was replaced (a new setup run): from its start",
            follow.prefix(*vm)
        ),
        Event::Unfollowable { vm, error } => eprintln!(
            "note: {}the setup log cannot be followed: {error}",
            follow.prefix(*vm)
        ),
    }
}

/// For a failed setup: the tail of its log, so the author sees why.
pub fn print_setup_log(e: &Error) {
    let Some(r) = e.ready_response() else { return };
    if r.state != ReadyState::Failed {
        return;
    }
    match r.setup.log_tail.as_deref().map(str::trim_end) {
        Some(tail) if !tail.is_empty() => {
            eprintln!("setup log (last lines):");
            // The guest's bytes: each line with its control characters
            // (a `\r`, an escape sequence) shown, not obeyed.
            for line in tail.lines() {
                eprintln!("  │ {}", lab_agent_proto::text::escape(line));
            }
        }
        _ => eprintln!("setup log: (empty)"),
    }
}
