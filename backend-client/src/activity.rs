//! What a VM is doing while a wait goes on, for a person watching it
//! ([`Activity`]): its state and reason, the cloud-init stage running, and
//! setup's last log line, from each [`Progress`] report; with the one-line
//! texts `labctl`'s progress display shows, so a backend's display says
//! the same. Every string from the guest is on one line and escaped.

use crate::Progress;
use lab_agent_proto::{ReadyResponse, ReadyState, SetupState};

/// A VM's phase and what it is doing now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    /// `None` until the agent answers.
    pub state: Option<ReadyState>,
    /// The agent's reason, or why it could not be reached.
    pub reason: String,
    /// The cloud-init stage running, from the answer's timeline.
    pub stage: Option<&'static str>,
    /// Setup's last log line while it runs, escaped (the guest's text).
    pub log_line: Option<String>,
}

impl Activity {
    /// Before any report: not reached yet, "connecting".
    pub fn connecting() -> Activity {
        Activity {
            state: None,
            reason: "connecting".to_owned(),
            stage: None,
            log_line: None,
        }
    }

    /// What a progress report says.
    pub fn of(p: &Progress) -> Activity {
        let answer = p.answer.as_deref();
        Activity {
            state: p.state,
            reason: p.reason.clone(),
            stage: answer.and_then(|r| r.timeline.as_ref()?.running_stage()),
            log_line: answer.and_then(last_log_line),
        }
    }

    /// Whether `self` is another phase than `before`: its state, reason or
    /// cloud-init stage changed (a new setup log line is not a new phase).
    pub fn is_new_phase(&self, before: &Activity) -> bool {
        self.state != before.state || self.reason != before.reason || self.stage != before.stage
    }

    /// `state: reason · cloud-init STAGE` (the state alone when the reason
    /// says nothing more; `unreachable` while the agent does not answer).
    pub fn status(&self) -> String {
        let state = self.state_str();
        let mut text = state.to_owned();
        if !self.reason.is_empty() && self.reason != state {
            text.push_str(": ");
            text.push_str(&one_line(&self.reason));
        }
        if let Some(stage) = self.stage {
            text.push_str(" · cloud-init ");
            text.push_str(stage);
        }
        text
    }

    /// The state and what the VM is doing now — setup's last log line
    /// while it runs, else the cloud-init stage running — or, when neither
    /// is known, [`Activity::status`].
    pub fn now(&self) -> String {
        let doing = match (&self.log_line, self.stage) {
            (Some(line), _) => format!("setup: {line}"),
            (None, Some(stage)) => format!("cloud-init {stage}"),
            (None, None) => return self.status(),
        };
        format!("{} · {doing}", self.state_str())
    }

    fn state_str(&self) -> &'static str {
        self.state.map_or("unreachable", |s| s.as_str())
    }
}

/// Setup's last non-blank log line while it runs, on one line and
/// escaped: the guest's bytes (a `\r` progress bar, an escape sequence)
/// are shown, not obeyed.
fn last_log_line(r: &ReadyResponse) -> Option<String> {
    if r.state != ReadyState::SettingUp || r.setup.state != SetupState::Running {
        return None;
    }
    let tail = r.setup.log_tail.as_deref()?;
    // A progress bar redraws with `\r`: its last frame is what shows.
    let line = tail.lines().rev().find(|l| !l.trim().is_empty())?;
    let line = line.rsplit('\r').find(|l| !l.trim().is_empty())?;
    Some(one_line(line.trim()))
}

/// The guest's text on one line, its control characters escaped (a reason
/// comes from whatever answers on the agent's port).
pub fn one_line(s: &str) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    lab_agent_proto::text::escape(&joined).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn answer(json: &str) -> Option<std::sync::Arc<ReadyResponse>> {
        Some(std::sync::Arc::new(serde_json::from_str(json).unwrap()))
    }

    #[test]
    fn state_and_reason_on_one_line() {
        let mut a = Activity::connecting();
        assert_eq!(a.status(), "unreachable: connecting");
        a.state = Some(ReadyState::SettingUp);
        a.reason = "setup is\nrunning".into();
        assert_eq!(a.status(), "setting_up: setup is running");
        assert_eq!(a.now(), a.status());
    }

    /// The phase is the state and the cloud-init stage running: a new
    /// stage is a new phase, a new setup log line is not; what the VM does
    /// now is the log line (escaped), else the stage.
    #[test]
    fn the_stage_and_setups_last_line() {
        let p = Progress {
            elapsed: Duration::from_secs(3),
            state: Some(ReadyState::Booting),
            reason: "waiting for cloud-init to start the lab setup".into(),
            attempts: 1,
            answer: answer(
                r#"{"state":"booting","reason":"waiting for cloud-init to start the lab setup",
                "cloud_init":{"done":false},"setup":{"state":"pending"},
                "timeline":{"cloud_init":{"init-local":{"start_secs":1.9,"finished_secs":2.4},
                                          "init":{"start_secs":2.5}}}}"#,
            ),
        };
        let booting = Activity::of(&p);
        assert_eq!(booting.stage, Some("init"));
        assert_eq!(
            booting.status(),
            "booting: waiting for cloud-init to start the lab setup · cloud-init init"
        );
        assert_eq!(booting.now(), "booting · cloud-init init");

        let setting_up = |log: &str| {
            answer(&format!(
                r#"{{"state":"setting_up","reason":"the setup script is running",
                    "cloud_init":{{"done":false}},
                    "setup":{{"state":"running","log_tail":{log}}},
                    "timeline":{{"cloud_init":{{"init-local":{{"start_secs":1.9,"finished_secs":2.4}},
                        "modules-final":{{"start_secs":9.0}}}}}}}}"#,
                log = serde_json::to_string(log).unwrap()
            ))
        };
        let p = Progress {
            state: Some(ReadyState::SettingUp),
            reason: "the setup script is running".into(),
            answer: setting_up("apt-get update\nGet:1 \x1b]0;owned\x07 10%\r50%\n\n"),
            ..p
        };
        let running = Activity::of(&p);
        assert!(running.is_new_phase(&booting));
        assert_eq!(running.stage, Some("modules-final"));
        assert_eq!(
            running.now(),
            "setting_up · setup: 50%",
            "a progress bar's last frame"
        );
        let again = Activity::of(&Progress {
            answer: setting_up("Get:1 \x1b]0;owned\x07 http://deb"),
            ..p.clone()
        });
        assert!(
            !again.is_new_phase(&running),
            "a new log line is no new phase"
        );
        assert_eq!(
            again.now(),
            "setting_up · setup: Get:1 \\x1b]0;owned\\x07 http://deb"
        );
        // Without a timeline or a log tail: the reason, as before.
        let bare = Activity::of(&Progress {
            answer: answer(
                r#"{"state":"setting_up","reason":"the setup script is running",
                    "cloud_init":{"done":false},"setup":{"state":"running"}}"#,
            ),
            ..p
        });
        assert_eq!(bare.now(), "setting_up: the setup script is running");
    }
}
