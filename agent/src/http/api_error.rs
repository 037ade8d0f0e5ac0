//! Every way a request can fail, and the one place that turns a failure into
//! a status and a JSON body. Adding a variant forces a choice of status here.

use crate::http::{Response, json_response};
use crate::process::SpawnError;
use crate::process::identity::IdentityError;
use hyper::StatusCode;
use lab_agent_proto::{ErrorBody, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing or wrong token. Deliberately says nothing about what exists.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
    #[error("no such endpoint: {0}")]
    NotFound(String),
    #[error("method {method} is not allowed on {path}; use {allowed}")]
    MethodNotAllowed {
        method: String,
        path: String,
        allowed: &'static str,
    },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// Every slot taken and no place in the queue, or no slot came free
    /// while it `waited` in it.
    #[error(
        "{running} commands are already running (the agent's --max-execs) and {}; retry in a moment",
        if *waited { "none ended within 5 s" } else { "as many more as it queues wait for them" }
    )]
    Busy { running: usize, waited: bool },
    /// An exec meant for instance `meant` reached another life of the VM
    /// (or an agent that knows none): nothing was run.
    #[error(
        "this VM is instance {}, not {meant}, which the request is meant for: the VM was reset; nothing was run",
        found.as_deref().unwrap_or("(none: its state dir keeps no id)")
    )]
    InstanceChanged {
        meant: String,
        found: Option<String>,
    },
    #[error(
        "the output the agent holds for running commands and unsent answers would pass its budget of {} MiB (`--output-budget`); retry in a moment, or ask for a smaller max_output_bytes",
        limit / (1024 * 1024)
    )]
    OutputBudget { limit: u64 },
    #[error("the agent is shutting down")]
    ShuttingDown,
    #[error("internal error: {0}")]
    Internal(String),
}

/// A user the request named: no such user, a bad name, or one the agent
/// cannot switch to is the caller's (400); a failed passwd lookup the
/// guest's (500).
impl From<IdentityError> for ApiError {
    fn from(e: IdentityError) -> ApiError {
        ApiError::callers_or_guests(e.is_client_error(), e)
    }
}

/// A command that cannot start because of what the request asked (a
/// missing cwd, values too big for execve) is the caller's (400); any
/// other failure to start the guest's (500).
impl From<SpawnError> for ApiError {
    fn from(e: SpawnError) -> ApiError {
        ApiError::callers_or_guests(e.is_client_error(), e)
    }
}

impl ApiError {
    /// A 400 when the caller asked for what cannot be, else a 500: the
    /// guest failed.
    fn callers_or_guests(callers: bool, e: impl std::fmt::Display) -> ApiError {
        if callers {
            ApiError::BadRequest(e.to_string())
        } else {
            ApiError::Internal(e.to_string())
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Unauthorized => ErrorCode::Unauthorized,
            ApiError::BadRequest(_) => ErrorCode::BadRequest,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::MethodNotAllowed { .. } => ErrorCode::MethodNotAllowed,
            ApiError::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            ApiError::Busy { .. } | ApiError::OutputBudget { .. } | ApiError::ShuttingDown => {
                ErrorCode::Busy
            }
            ApiError::InstanceChanged { .. } => ErrorCode::InstanceChanged,
            ApiError::Internal(_) => ErrorCode::Internal,
        }
    }

    pub fn into_response(self) -> Response {
        let code = self.code();
        let status =
            StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = ErrorBody::new(code, self.to_string());
        if let ApiError::InstanceChanged { found, .. } = &self {
            body.error.instance_id = found.clone();
        }
        let mut resp = json_response(status, &body);
        let headers = resp.headers_mut();
        match &self {
            ApiError::Unauthorized => {
                headers.insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer"),
                );
            }
            ApiError::MethodNotAllowed { allowed, .. } => {
                headers.insert(
                    hyper::header::ALLOW,
                    hyper::header::HeaderValue::from_static(allowed),
                );
            }
            ApiError::Busy { .. } | ApiError::OutputBudget { .. } | ApiError::ShuttingDown => {
                headers.insert(
                    hyper::header::RETRY_AFTER,
                    hyper::header::HeaderValue::from_static("1"),
                );
            }
            ApiError::BadRequest(_)
            | ApiError::InstanceChanged { .. }
            | ApiError::NotFound(_)
            | ApiError::PayloadTooLarge { .. }
            | ApiError::Internal(_) => {}
        }
        resp
    }
}
