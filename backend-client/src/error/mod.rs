//! The client's error type: one enum a backend can match on, with predicates
//! for the questions it actually asks ("is the VM still coming up?", "did the
//! lab's setup fail?", "is our token wrong?").
//!
//! Every message names the request and the URL ("status 503 when getting
//! http://10.0.0.5:8899/v1/ready: …"); [`Error::hint`] adds the likely cause.
//! Causes (`io::Error`, hyper's errors) are kept as `source()`, not pasted
//! into the message, so a caller printing the chain sees each once.

use hyper::StatusCode;
use lab_agent_proto::text::escape;
use lab_agent_proto::{ErrorCode, ReadyResponse, ReadyState};
use std::fmt;
use std::time::Duration;

/// The cause of a [`Error::Transport`]: hyper's or its pool's error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Anything that can go wrong talking to a lab-agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL given to [`crate::Client::new`] is not one the client can use.
    #[error("invalid agent URL `{url}`: {problem}")]
    InvalidUrl { url: String, problem: String },

    /// The instance id given to pin a client to
    /// ([`crate::ClientBuilder::instance`]) is not one: 32 lowercase hex
    /// digits, as `instance.id` in `/v1/ready` and `/v1/info`.
    #[error(
        "invalid instance id `{}` to pin to: an instance id is {} lowercase hex digits \
         (`instance.id` in the agent's `/v1/ready` or `/v1/info` answer)",
        escape(id),
        lab_agent_proto::lifecycle::INSTANCE_ID_LEN
    )]
    InvalidInstanceId { id: String },

    /// The TCP connection could not be made (refused, no route, reset, DNS).
    #[error("failed to connect when {request}")]
    Connect {
        request: Request,
        #[source]
        source: std::io::Error,
    },

    /// The relay in front of the agent refused the connection: KubeVirt's
    /// vsock subresource or the API server before it answered the upgrade
    /// with `status` (401: the API token; 403: no RBAC `get` on
    /// `virtualmachineinstances/vsock`; 404: no such VMI; 400: a VMI
    /// without `autoattachVSOCK`, or not running; 500: virt-handler not
    /// reached), or, without a status, TLS with the API server failed.
    /// `message` is its own (a Kubernetes `Status`'s), shown escaped.
    #[error(
        "KubeVirt's vsock relay refused the connection{} when {request}: {}",
        status.map(|s| format!(" (status {s})")).unwrap_or_default(),
        escape(message)
    )]
    Relay {
        request: Request,
        status: Option<u16>,
        message: String,
    },

    /// The Kubernetes API credentials for a `kubevirt://` URL cannot be
    /// used: not in a pod, a token or CA file missing or unreadable, a
    /// server URL that is not `https://`.
    #[error("the Kubernetes API credentials cannot be used: {problem}")]
    Kube { problem: String },

    /// The TCP connection was not made within the connect timeout.
    #[error("no connection within {} when {request}", secs(*after))]
    ConnectTimeout { request: Request, after: Duration },

    /// The connection broke before a whole response arrived: closed, reset,
    /// or not HTTP. Under qemu's user networking a port accepts connections
    /// before the guest listens and then closes them, which lands here.
    #[error("connection lost when {request}")]
    Transport {
        request: Request,
        #[source]
        source: BoxError,
    },

    /// The agent went away while a request that may change the guest (an
    /// exec) was on a kept-alive connection: the connection had carried an
    /// earlier call and was closed or reset before any byte of this answer
    /// arrived — the agent restarted, crashed or the VM was reset (or
    /// rebooted) since. `may_have_started` says whether the request was
    /// written whole: then the agent may have read it and started the
    /// command before it went; otherwise it cannot have (the agent reads
    /// the whole body first). Either way the command was not sent again:
    /// whether to re-run it is the caller's decision. A read (`ready`,
    /// `info`, a `GET`) in the same place is sent once more on a fresh
    /// connection instead, within the call's deadline.
    #[error(
        "the agent went away before answering when {request}: {}",
        if *may_have_started {
            "the command may have started (the request was sent whole); it was not sent again"
        } else {
            "the command did not start (the request was cut short)"
        }
    )]
    AgentWentAway {
        request: Request,
        may_have_started: bool,
        #[source]
        source: BoxError,
    },

    /// The agent did not answer within the request timeout.
    #[error("no response within {} when {request}", secs(*after))]
    Timeout { request: Request, after: Duration },

    /// A checked call got a status it does not accept. The agent's
    /// `{"error":{…}}` body, when there is one, gives `code` and `message`.
    #[error("status {} when {request}: {}", status.as_u16(), escape(message))]
    Status {
        request: Request,
        status: StatusCode,
        /// The agent's error code, if the body was an `ErrorBody`.
        code: Option<ErrorCode>,
        /// The agent's message, or the start of the raw body, as sent
        /// (the `Display` of the error shows it escaped).
        message: String,
        /// `Retry-After` (seconds) of a 429.
        retry_after: Option<u64>,
    },

    /// The response body was larger than any lab-agent sends for this
    /// request. Reading stopped at `limit` (or did not start, when the
    /// agent `declared` a larger `Content-Length`): something other than
    /// lab-agent answers on the port, or the guest (where the student is
    /// root) is hostile. Not retried.
    #[error("{}", too_large_message(request, *limit, *declared))]
    TooLarge {
        request: Request,
        limit: usize,
        /// The `Content-Length` the answer announced, when it announced one
        /// over the limit (nothing of the body was read).
        declared: Option<u64>,
    },

    /// A 2xx (or a `/v1/ready` 503) whose body is not the JSON expected.
    #[error("unexpected response body (status {}) when {request}", status.as_u16())]
    Decode {
        request: Request,
        status: StatusCode,
        #[source]
        source: serde_json::Error,
    },

    /// The answer is well-formed JSON but says something no lab-agent says:
    /// an exit code outside 0..=255, a signal outside 1..=64, more output
    /// than the request allows, a relative `lab_dir`. `problem` says which
    /// (guest text in it is escaped).
    #[error("the agent's answer breaks the protocol when {request}: {problem}")]
    Protocol { request: Request, problem: String },

    /// The agent sent more interim (1xx) responses before its answer than
    /// the client accepts ([`crate::interim::MAX_INTERIM_RESPONSES`]); a
    /// lab-agent sends none. `count` is the one past the limit: nothing
    /// after it was read, and the connection was closed.
    #[error(
        "the agent sent {count} interim (1xx) responses and no answer when {request} (a call reads at most {})",
        crate::interim::MAX_INTERIM_RESPONSES
    )]
    Interim { request: Request, count: u32 },

    /// `exec` was answered 429 `busy` until its deadline: the command never
    /// started. `attempts` requests were sent over `waited`.
    #[error(
        "the agent was still busy after {attempts} attempts in {} when {request}",
        secs(*waited)
    )]
    Busy {
        request: Request,
        attempts: u32,
        waited: Duration,
        /// The agent's last message, as sent.
        message: String,
    },

    /// `wait_ready` saw the agent report `failed`: the lab's setup failed, or
    /// cloud-init finished without setup having run. The response carries
    /// the reason, the script's exit code and the tail of its log.
    #[error("{}", setup_failed_message(url, ready))]
    SetupFailed {
        url: String,
        ready: Box<ReadyResponse>,
    },

    /// `wait_ready`'s deadline passed before the agent was ready.
    #[error("{}", wait_timeout_message(url, *waited, last, *in_state))]
    WaitTimeout {
        url: String,
        waited: Duration,
        /// What the agent last said, or why it could not be reached.
        last: LastSeen,
        /// How long the agent had been in the last state it reported (from
        /// the first answer in it to the deadline): the phase the VM was
        /// stuck in, and for how long. `None` when it never answered.
        in_state: Option<Duration>,
    },
    /// The client is pinned to an instance ([`crate::ClientBuilder::instance`])
    /// and another one answered: the VM was reset onto a fresh disk (a
    /// containerDisk restarted), and the student's work inside it is gone.
    /// Grading it would mark every step the student did as failed. `found`
    /// is the guest's word, shown escaped; `first_boot_at` is known from a
    /// `/v1/ready` or `/v1/info` answer, not from an exec's. An agent that
    /// knows `instance_id` in exec requests refuses a pinned exec of
    /// another instance (409) before running anything; an older one is
    /// caught on its answer, after the command ran.
    #[error("{}", instance_changed_message(url, expected, found, first_boot_at.as_deref(), *pinned_by))]
    InstanceChanged {
        url: String,
        /// The instance id the client is pinned to.
        expected: String,
        /// The instance id the agent answered with.
        found: String,
        /// When `found` first booted (RFC 3339, the guest's clock), if said.
        first_boot_at: Option<String>,
        /// Where `expected` came from.
        pinned_by: PinnedBy,
    },

    /// The client is pinned to an instance but the answer names none: an
    /// agent older than instance identity, or one that could not keep its
    /// state dir. Which life of the VM answered cannot be told, so a pinned
    /// client does not take the answer as the instance pinned ("unknown" is
    /// never "unchanged").
    #[error(
        "the agent at {url} did not say which instance of the VM it is, so it cannot be \
         verified as the instance {expected} pinned"
    )]
    InstanceUnknown { url: String, expected: String },

    /// `grade` (or `grade_all`) found the VM not ready and ran nothing: a
    /// check run while setup is still going would read as the student's
    /// failure. `ready` is the agent's answer (state, reason, setup).
    #[error("{}", not_ready_message(url, ready))]
    NotReady {
        url: String,
        ready: Box<ReadyResponse>,
    },
}

/// Where a client's pin (the instance it holds answers to) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinnedBy {
    /// The caller: [`crate::ClientBuilder::instance`] or
    /// [`crate::Client::pinned`] (`labctl … --instance`, Python's
    /// `instance=`), the id the backend recorded when it handed the VM out.
    Caller,
    /// A grade: it holds every check to the instance whose ready answer it
    /// began with, so a reset mid-grade mixes no two lives in one report.
    Grade,
}

impl PinnedBy {
    /// `"caller"` or `"grade"`, as Python's `InstanceChanged.pinned_by`.
    pub fn as_str(self) -> &'static str {
        match self {
            PinnedBy::Caller => "caller",
            PinnedBy::Grade => "grade",
        }
    }
}

/// What a waiter last knew when its deadline passed.
#[derive(Debug, Clone)]
pub enum LastSeen {
    /// Nothing: the deadline passed before the first attempt.
    Nothing,
    /// The agent never answered; the last attempt failed like this.
    Unreachable(String),
    /// The agent answered with this (not ready) state.
    State(Box<ReadyResponse>),
}

/// The request an error happened in: method and full URL, rendered the way
/// the messages read ("getting http://…/v1/ready").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: hyper::Method,
    pub url: String,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.method.as_str() {
            "GET" => "getting",
            "POST" => "posting to",
            "PUT" => "putting",
            "DELETE" => "deleting",
            other => return write!(f, "sending {other} to {}", self.url),
        };
        write!(f, "{verb} {}", self.url)
    }
}

impl Error {
    /// The agent refused our token (401). Waiting longer will not help.
    pub fn is_unauthorized(&self) -> bool {
        self.status() == Some(StatusCode::UNAUTHORIZED)
    }

    /// The agent reports the lab's setup failed (see [`Error::ready_response`]):
    /// a wait ended on it, or `grade` refused the VM for it.
    pub fn is_setup_failed(&self) -> bool {
        match self {
            Error::SetupFailed { .. } => true,
            Error::NotReady { ready, .. } => ready.state == ReadyState::Failed,
            _ => false,
        }
    }

    /// `grade` refused a VM that is not ready (its state and reason in
    /// [`Error::ready_response`]); nothing was run. A `failed` one is also
    /// [`Error::is_setup_failed`].
    pub fn is_not_ready(&self) -> bool {
        matches!(self, Error::NotReady { .. })
    }

    /// A pinned client met another instance of the VM: it was reset, and
    /// the student's work inside it is gone ([`Error::InstanceChanged`]).
    pub fn is_instance_changed(&self) -> bool {
        matches!(self, Error::InstanceChanged { .. })
    }

    /// A pinned client got an answer that names no instance, so it could
    /// not tell which life of the VM answered ([`Error::InstanceUnknown`]).
    pub fn is_instance_unknown(&self) -> bool {
        matches!(self, Error::InstanceUnknown { .. })
    }

    /// A deadline or timeout passed: connecting, waiting for a response, or
    /// waiting for readiness.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            Error::ConnectTimeout { .. }
                | Error::Timeout { .. }
                | Error::WaitTimeout { .. }
                | Error::Busy { .. }
        )
    }

    /// No answer could be had from the agent at all: connection refused,
    /// reset, closed, timed out, the agent went away, or a wait that ended
    /// without one answer.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Error::Connect { .. }
            | Error::ConnectTimeout { .. }
            | Error::Transport { .. }
            | Error::AgentWentAway { .. }
            | Error::Relay { .. }
            | Error::Timeout { .. } => true,
            Error::WaitTimeout { last, .. } => !matches!(last, LastSeen::State(_)),
            _ => false,
        }
    }

    /// KubeVirt's relay refused the connection ([`Error::Relay`]): its
    /// status, if it answered with one.
    pub fn relay_status(&self) -> Option<u16> {
        match self {
            Error::Relay { status, .. } => *status,
            _ => None,
        }
    }

    /// A refusal of KubeVirt's relay that waiting may end: no such VMI
    /// yet (404), a VMI not running yet (400 naming its phase), virt-api
    /// or virt-handler not reached (5xx). Credentials (401, 403), a VMI
    /// without vsock, and TLS failures are not.
    pub(crate) fn relay_may_pass(&self) -> bool {
        match self {
            Error::Relay {
                status: Some(s),
                message,
                ..
            } => {
                matches!(s, 404 | 409 | 500..=599)
                    || (*s == 400
                        && message.contains(
                            "Unable to connect to VirtualMachineInstance because phase is",
                        ))
            }
            _ => false,
        }
    }

    /// The agent restarted, crashed or was reset between two calls, and an
    /// exec met the kept-alive connection to the agent that was
    /// ([`Error::AgentWentAway`]); [`Error::may_have_started`] says whether
    /// the command may have run.
    pub fn is_agent_went_away(&self) -> bool {
        matches!(self, Error::AgentWentAway { .. })
    }

    /// For [`Error::AgentWentAway`]: whether the command may have started
    /// (the request was written whole before the connection died). `None`
    /// for every other error.
    pub fn may_have_started(&self) -> Option<bool> {
        match self {
            Error::AgentWentAway {
                may_have_started, ..
            } => Some(*may_have_started),
            _ => None,
        }
    }

    /// The answer was larger than the request allows ([`Error::TooLarge`]).
    pub fn is_too_large(&self) -> bool {
        matches!(self, Error::TooLarge { .. })
    }

    /// The answer was not the JSON expected ([`Error::Decode`]).
    pub fn is_malformed(&self) -> bool {
        matches!(self, Error::Decode { .. })
    }

    /// The answer broke the protocol: out-of-range values
    /// ([`Error::Protocol`]) or a flood of interim responses
    /// ([`Error::Interim`]).
    pub fn is_protocol_error(&self) -> bool {
        matches!(self, Error::Protocol { .. } | Error::Interim { .. })
    }

    /// The guest answered in a way no lab-agent does: too large, malformed
    /// or against the protocol. Retrying will not help; the VM (where the
    /// student is root) runs something else on the agent's port.
    pub fn is_hostile(&self) -> bool {
        self.is_too_large() || self.is_malformed() || self.is_protocol_error()
    }

    /// `exec` found the agent busy (429) until its deadline.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// The request the error happened in, for errors of one request.
    pub fn request(&self) -> Option<&Request> {
        match self {
            Error::Connect { request, .. }
            | Error::Relay { request, .. }
            | Error::ConnectTimeout { request, .. }
            | Error::Transport { request, .. }
            | Error::AgentWentAway { request, .. }
            | Error::Timeout { request, .. }
            | Error::Status { request, .. }
            | Error::TooLarge { request, .. }
            | Error::Decode { request, .. }
            | Error::Protocol { request, .. }
            | Error::Interim { request, .. }
            | Error::Busy { request, .. } => Some(request),
            _ => None,
        }
    }

    /// The HTTP status of a [`Error::Status`] or [`Error::Decode`].
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Status { status, .. } | Error::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The agent's error code, when it sent an `ErrorBody`.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            Error::Status { code, .. } => *code,
            _ => None,
        }
    }

    /// The agent's last readiness report: the failed one of a
    /// [`Error::SetupFailed`], the one a [`Error::NotReady`] refused, or
    /// the last one seen before a [`Error::WaitTimeout`].
    pub fn ready_response(&self) -> Option<&ReadyResponse> {
        match self {
            Error::SetupFailed { ready, .. } | Error::NotReady { ready, .. } => Some(ready),
            Error::WaitTimeout {
                last: LastSeen::State(ready),
                ..
            } => Some(ready),
            _ => None,
        }
    }

    /// The likely cause and what to try, for a person reading the error.
    pub fn hint(&self) -> Option<String> {
        let hint = match self {
            Error::InvalidUrl { .. } => {
                "give the agent's base URL, e.g. `http://10.0.0.5:8899`".to_owned()
            }
            Error::InvalidInstanceId { .. } => "give the id the backend recorded from the \
                 VM's first ready answer (`labctl wait --json` prints it as `instance.id`)"
                .to_owned(),
            Error::Relay { status, .. } => match status {
                Some(401) => "the API server did not take the token: in a pod, its service \
                     account token (mounted, not expired); else the one `--kube-token-file` gives"
                    .to_owned(),
                Some(403) => "the token's service account may not open the VM's vsock: give it \
                     RBAC `get` on `virtualmachineinstances/vsock` in the API group \
                     `subresources.kubevirt.io`, in the VM's namespace \
                     (`examples/kubevirt/vsock/role.yaml`)"
                    .to_owned(),
                Some(404) => "no such VirtualMachineInstance (yet): check the namespace and \
                     name; a VirtualMachine's VMI appears once it runs"
                    .to_owned(),
                Some(400) => "the VMI needs `spec.domain.devices.autoattachVSOCK: true` (and \
                     KubeVirt's `VSOCK` feature gate), and must be running"
                    .to_owned(),
                Some(101) => "something between this client and KubeVirt answers in its place: \
                     is the server the cluster's API server?"
                    .to_owned(),
                Some(_) => "virt-api or virt-handler could not be reached: look at their \
                     logs (`kubectl -n kubevirt logs`), or retry"
                    .to_owned(),
                None => "give the CA bundle of the cluster's API server (in a pod it is the \
                     service account's `ca.crt`; else `--kube-ca-file`)"
                    .to_owned(),
            },
            Error::Kube { .. } => "in a pod, mount its service account (the default: \
                 `automountServiceAccountToken`); elsewhere give the API server, a token file \
                 and its CA (`labctl --kube-server URL --kube-token-file F --kube-ca-file F`, \
                 `KubeApi::from_files` in a backend)"
                .to_owned(),
            Error::Connect { request, .. } if request.url.contains(" via vsock") => {
                "the guest's vsock does not answer on that port (yet): is the VM running with a \
                 vsock device, and does its agent listen on vsock (`labctl secret --channel \
                 vsock|both`)? A VM's agent starts some seconds into boot; `labctl wait` \
                 retries until it answers"
                    .to_owned()
            }
            Error::Connect { source, .. } => match source.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    "nothing listens there yet: is `lab-agent` running on that address and port? \
                     A VM's agent starts some seconds into boot; `labctl wait` retries until it answers"
                        .to_owned()
                }
                _ => "check the address, and that the network (or a network policy) lets this \
                      host reach the agent's port"
                    .to_owned(),
            },
            Error::ConnectTimeout { .. } => "the address does not answer: check it, and that the \
                 network (or a network policy) lets this host reach the agent's port"
                .to_owned(),
            Error::Transport { request, .. } if request.url.contains(" via kubevirt://") => {
                "KubeVirt relayed the connection but no agent answered on that vsock port: \
                 the VM may still be booting, or its agent does not listen on vsock \
                 (`labctl secret --channel vsock|both`); a relay that closes mid-answer lands \
                 here too"
                    .to_owned()
            }
            Error::Transport { .. } => "the port accepted the connection but no agent answered: \
                 the VM may still be booting (qemu forwards ports before the guest listens), \
                 or something other than lab-agent listens there"
                .to_owned(),
            Error::AgentWentAway {
                may_have_started: true,
                ..
            } => "the agent restarted, crashed or the VM was reset since the last call: \
                 look at what the command does before running it again (it may have run), \
                 and at the agent's `instance` and boot id (`info`) to tell a reboot or a reset"
                .to_owned(),
            Error::AgentWentAway { .. } => "the agent restarted, crashed or the VM was reset \
                 since the last call: the command did not start, so sending it again is safe"
                .to_owned(),
            Error::Timeout { .. } => {
                "the agent or the VM is overloaded or paused: allow more time for the answer \
                 (`labctl grade --timeout SECS`; `ClientBuilder::request_timeout` in a backend)"
                    .to_owned()
            }
            Error::Status { status, code, .. } => match (status.as_u16(), code) {
                (401, _) => "the token does not match the agent's: use the token the VM's \
                     payload was made with (`labctl secret --token-out`)"
                    .to_owned(),
                (429, _) => "the agent runs a limited number of commands at once \
                     (`lab-agent serve --max-execs`): retry later"
                    .to_owned(),
                (404 | 405, _) | (_, None) => "is this a lab-agent, and of a version that speaks \
                     the `/v1` API? `GET /v1/info` tells its version"
                    .to_owned(),
                _ => return None,
            },
            Error::TooLarge { .. } => "a lab-agent never sends this much: is something other \
                 than lab-agent listening there? (the student is root in the VM and may replace it)"
                .to_owned(),
            Error::Decode { .. } => "is this a lab-agent, and of a version that speaks the `/v1` \
                 API? `GET /v1/info` tells its version"
                .to_owned(),
            Error::Protocol { .. } | Error::Interim { .. } => "a lab-agent never answers this: \
                 is something other than lab-agent listening there? (the student is root in the \
                 VM and may replace it)"
                .to_owned(),
            Error::Busy { .. } => "the agent runs a limited number of commands at once \
                 (`lab-agent serve --max-execs`) and stayed busy: retry later, or allow more \
                 time for the answer"
                .to_owned(),
            Error::SetupFailed { .. } => "the setup log above shows why; fix the lab's setup \
                 script and try it locally with `labctl try LAB_DIR`"
                .to_owned(),
            Error::InstanceChanged { .. } => "do not grade this VM as the student's work: \
                 tell the student their VM was reset and give them a fresh start (or grade \
                 the new instance unpinned, knowing it holds none of their work)"
                .to_owned(),
            Error::InstanceUnknown { .. } => "update the VM's lab-agent to one that reports its \
                 `instance` (and check its state dir is writable), or do not pin the client"
                .to_owned(),
            Error::NotReady { ready, .. } if ready.state == ReadyState::Failed => {
                "its setup failed: the setup log shows why; fix the lab and try it with \
                 `labctl try LAB_DIR`"
                    .to_owned()
            }
            Error::NotReady { .. } => {
                "grade once it is ready: wait for it first (`wait_ready`; `labctl grade --wait SECS`)"
                    .to_owned()
            }
            Error::WaitTimeout { last, .. } => match last {
                LastSeen::State(r) if r.state == ReadyState::SettingUp => {
                    "setup is still running: give it more time (the lab's `[readiness] \
                     timeout_secs` is the deadline it was written for), or check \
                     `[setup].timeout_secs`"
                        .to_owned()
                }
                LastSeen::State(r) if r.state == ReadyState::WaitingForCloudInit => {
                    "setup succeeded but cloud-init's final stage has not finished: look at \
                     `/var/log/cloud-init-output.log` in the VM"
                        .to_owned()
                }
                LastSeen::State(_) => "the agent answers but is not ready yet: wait longer".to_owned(),
                _ => "the agent never answered: is the VM running, and did cloud-init start \
                      `lab-agent.service`?"
                    .to_owned(),
            },
        };
        Some(hint)
    }

    /// A few words for a progress line ("connection refused", "status 502").
    pub(crate) fn brief(&self) -> String {
        match self {
            Error::Connect { source, .. } => match source.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
                std::io::ErrorKind::ConnectionReset => "connection reset".to_owned(),
                _ => source.to_string(),
            },
            Error::ConnectTimeout { .. } => "connect timed out".to_owned(),
            Error::Relay {
                status: Some(s), ..
            } => format!("KubeVirt's relay answered {s}"),
            Error::Relay { .. } => "TLS with the API server failed".to_owned(),
            Error::Transport { .. } => "connection closed before a response".to_owned(),
            Error::AgentWentAway { .. } => "the agent went away".to_owned(),
            Error::Timeout { after, .. } => format!("no response within {}", secs(*after)),
            Error::Status {
                status, message, ..
            } => format!("status {}: {}", status.as_u16(), escape(message)),
            other => other.to_string(),
        }
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 || s.fract() == 0.0 {
        format!("{}s", s.round())
    } else {
        format!("{s:.1}s")
    }
}

fn too_large_message(request: &Request, limit: usize, declared: Option<u64>) -> String {
    match declared {
        Some(n) => format!(
            "response of {n} bytes announced, larger than the {limit} allowed, when {request}"
        ),
        None => format!("response larger than {limit} bytes when {request}"),
    }
}

fn setup_failed_message(url: &str, ready: &ReadyResponse) -> String {
    let mut msg = format!("the lab is not ready at {url}: ");
    match &ready.reason {
        Some(reason) if !reason.is_empty() => msg.push_str(&escape(reason.trim_end_matches('.'))),
        _ => msg.push_str("the agent reports `failed`"),
    }
    if let Some(code) = ready.setup.exit_code {
        if !msg.contains(&format!("exit code {code}")) && !msg.contains(&format!("status {code}")) {
            msg.push_str(&format!(" (setup exit code {code})"));
        }
    }
    msg
}

fn instance_changed_message(
    url: &str,
    expected: &str,
    found: &str,
    first_boot_at: Option<&str>,
    pinned_by: PinnedBy,
) -> String {
    let mut msg = format!("the VM at {url} was reset (instance {}", escape(found));
    if let Some(at) = first_boot_at {
        msg.push_str(", first booted at ");
        msg.push_str(&escape(at));
    }
    msg.push_str(", is not the instance ");
    msg.push_str(expected);
    msg.push_str(match pinned_by {
        PinnedBy::Caller => " the client is pinned to",
        PinnedBy::Grade => " this grade began on",
    });
    msg.push_str("): the student's work inside it is gone");
    msg
}

fn not_ready_message(url: &str, ready: &ReadyResponse) -> String {
    let mut msg = format!(
        "the VM at {url} is not ready, so it was not graded: its state is `{}`",
        ready.state
    );
    if let Some(reason) = ready.reason.as_deref().filter(|r| !r.is_empty()) {
        msg.push_str(": ");
        msg.push_str(&escape(reason));
    }
    msg
}

fn wait_timeout_message(
    url: &str,
    waited: Duration,
    last: &LastSeen,
    in_state: Option<Duration>,
) -> String {
    let mut msg = format!("{url} was not ready after {}", secs(waited));
    match last {
        LastSeen::Nothing => {}
        LastSeen::Unreachable(why) => {
            msg.push_str(&format!(": the agent never answered ({})", escape(why)))
        }
        LastSeen::State(r) => {
            msg.push_str(&format!(": stuck in state `{}`", r.state));
            // The phase within it: a slow boot is a cloud-init stage.
            if let Some(stage) = r.timeline.as_ref().and_then(|t| t.running_stage()) {
                msg.push_str(&format!(" (cloud-init stage `{stage}`)"));
            }
            if let Some(d) = in_state {
                msg.push_str(&format!(" for the last {}", secs(d)));
            }
            if let Some(reason) = &r.reason {
                msg.push_str(&format!(" ({})", escape(reason.trim_end_matches('.'))));
            }
        }
    }
    msg
}

#[cfg(test)]
mod tests;
