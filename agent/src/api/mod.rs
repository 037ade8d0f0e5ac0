//! One file per endpoint: [`ready`] (`/v1/ready`), [`exec`] (`/v1/exec`,
//! with [`exec_stream`] for `"stream": true`), [`info`] (`/v1/info`),
//! [`setup_log`] (`/v1/setup/log`). Each turns a request into a call on
//! `readiness` or `process` and the answer back into HTTP; [`command`] is
//! an exec's command, shared by the plain and the streamed answer.

pub mod command;
pub mod exec;
pub mod exec_stream;
pub mod info;
pub mod ready;
pub mod setup_log;
