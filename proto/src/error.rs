//! The error body: `{"error":{"code":"…","message":"…"}}`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Machine-readable error codes. Each maps to exactly one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Unauthorized,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    Busy,
    /// An exec meant for another instance of the VM (its `instance_id`):
    /// nothing was run.
    InstanceChanged,
    Internal,
}

impl ErrorCode {
    /// The HTTP status the agent answers with for this code.
    pub const fn status(self) -> u16 {
        match self {
            ErrorCode::Unauthorized => 401,
            ErrorCode::BadRequest => 400,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::Busy => 429,
            ErrorCode::InstanceChanged => 409,
            ErrorCode::Internal => 500,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Busy => "busy",
            ErrorCode::InstanceChanged => "instance_changed",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    /// With `instance_changed`: the instance that answered (none when the
    /// agent knows no instance id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// The body of every non-2xx response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code,
                message: message.into(),
                instance_id: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_the_spec_names_them() {
        let all = [
            (ErrorCode::Unauthorized, "unauthorized", 401),
            (ErrorCode::BadRequest, "bad_request", 400),
            (ErrorCode::NotFound, "not_found", 404),
            (ErrorCode::MethodNotAllowed, "method_not_allowed", 405),
            (ErrorCode::PayloadTooLarge, "payload_too_large", 413),
            (ErrorCode::Busy, "busy", 429),
            (ErrorCode::InstanceChanged, "instance_changed", 409),
            (ErrorCode::Internal, "internal", 500),
        ];
        for (code, name, status) in all {
            assert_eq!(serde_json::to_string(&code).unwrap(), format!("\"{name}\""));
            assert_eq!(code.as_str(), name);
            assert_eq!(code.status(), status);
        }
    }

    #[test]
    fn body_shape() {
        let body = ErrorBody::new(ErrorCode::Busy, "too many");
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"error":{"code":"busy","message":"too many"}}"#
        );
    }
}
