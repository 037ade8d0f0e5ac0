//! `POST /v1/exec` with `"stream": true`: the output as it comes, one
//! `application/x-ndjson` line per read of a pipe, the result last.
//!
//! The command runs in a task of its own that feeds a small bounded queue;
//! the response body sends what the queue gives. So a slow reader fills the
//! queue, the pumps wait on it and stop reading the pipes, and the command
//! blocks writing: memory stays at the queue's size whatever the command
//! prints. The command's timeout and kill rules are `command::drive`'s, as for
//! a plain exec; a client that goes away drops the body, the queue closes,
//! and the task drops the job, which kills the command.

use crate::api::command as exec;
use crate::app::App;
use crate::http::Response;
use crate::http::api_error::ApiError;
use crate::http::body::{Body, FRAME, escape_into};
use crate::http::budget::PER_ANSWER;
use crate::process::identity::Identity;
use hyper::StatusCode;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use lab_agent_proto::ExecRequest;
use lab_agent_proto::exec::STREAM_CONTENT_TYPE;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::{self, Sender};

/// The command's bytes one event carries at most (one read of a pipe).
const READ: usize = FRAME;
/// Lines queued for a client that has not taken them yet.
const QUEUE: usize = 4;
/// The most a streamed exec holds: the queue and one line per pump being
/// sent (each escaped at worst 6× its bytes), and the pumps' read buffers.
/// Reserved from the output budget instead of twice `max_output_bytes`.
pub const STREAM_HELD: u64 = ((QUEUE + 2) * (6 * READ + 16) + 2 * (READ + 4)) as u64;

/// Starts the command and answers 200 at once; the lines follow.
pub fn handle(
    app: &App,
    req: ExecRequest,
    identity: &Identity,
    slot: OwnedSemaphorePermit,
) -> Result<Response, ApiError> {
    let output = exec::reserve(app, STREAM_HELD + PER_ANSWER)?;
    let job = exec::start(app, &req, identity)?;
    // What `finish` needs of the app, which the task cannot borrow.
    let ids = exec::ids(app);
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        tokio::select! {
            _ = run(job, &req, ids, &tx) => {}
            // The client went away (the body was dropped): dropping `run`
            // drops the job, which kills the command. (The request's own
            // line was written with its 200 when the stream began.)
            _ = tx.closed() => tracing::info!("streamed exec abandoned: the client went away"),
        }
        drop(slot);
    });
    let mut body = Body::stream(rx);
    body.hold(output);
    let mut resp = crate::http::response(StatusCode::OK, body);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(STREAM_CONTENT_TYPE));
    Ok(resp)
}

async fn run(mut job: crate::process::Job, req: &ExecRequest, ids: exec::Ids, tx: &Sender<Bytes>) {
    let cap = req.options.max_output_bytes as usize;
    let (mut out, mut err) = (Pumped::default(), Pumped::default());
    let (stdout, stderr) = (job.stdout.take(), job.stderr.take());
    let exit = {
        let pumps = async {
            tokio::join!(
                pump(stdout, "stdout", cap, tx, &mut out),
                pump(stderr, "stderr", cap, tx, &mut err)
            );
        };
        tokio::pin!(pumps);
        exec::drive(&mut job, req, pumps).await
    };
    // Without a result the client reports a broken stream, which is what
    // a failure to wait for the command is.
    let Ok(exit) = exit else { return };
    let mut result = exec::finish(ids, job, exit);
    // Cut by the cap, or by the linger (output still in a pipe when the
    // shell had exited: a background process holding it, or a reader too
    // slow to take the rest).
    result.stdout_truncated = out.truncated || !out.eof;
    result.stderr_truncated = err.truncated || !err.eof;
    let mut line = b"{\"result\":".to_vec();
    line.extend_from_slice(&exec::respond(result).body().to_vec());
    line.extend_from_slice(b"}\n");
    let _ = tx.send(Bytes::from(line)).await;
}

/// What one pump did: bytes sent (against the cap), cut, read to its end.
#[derive(Default)]
struct Pumped {
    sent: usize,
    truncated: bool,
    eof: bool,
}

/// Sends what `pipe` gives as `{"KEY":"…"}` lines, the first `cap` bytes
/// of it, reading on past the cap (and dropping) so the command never
/// blocks on a full pipe for that. Waits for room in the queue before
/// reading more: that is the backpressure.
async fn pump(
    pipe: Option<pipe::Receiver>,
    key: &str,
    cap: usize,
    tx: &Sender<Bytes>,
    st: &mut Pumped,
) {
    let Some(mut pipe) = pipe else {
        st.eof = true;
        return;
    };
    // A character cut by a read waits at the front for the next one.
    let mut buf = vec![0u8; READ + 4];
    let mut keep = 0;
    loop {
        let n = match pipe.read(&mut buf[keep..keep + READ]).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => return,
        };
        let take = n.min(cap - st.sent);
        st.truncated |= take < n;
        st.sent += take;
        let end = keep + take;
        let done = complete(&buf[..end]);
        if done > 0 && tx.send(line(key, &buf[..done])).await.is_err() {
            return;
        }
        buf.copy_within(done..end, 0);
        keep = end - done;
    }
    st.eof = true;
    // An incomplete character at the very end: U+FFFD as the plain answer
    // gives, unless the cap cut it (then dropped, as there too).
    if keep > 0 && !st.truncated {
        let _ = tx.send(line(key, &buf[..keep])).await;
    }
}

/// The length of `b` without an incomplete UTF-8 character at its end
/// (invalid bytes elsewhere count: they become U+FFFD).
fn complete(b: &[u8]) -> usize {
    let mut at = 0;
    loop {
        match std::str::from_utf8(&b[at..]) {
            Ok(_) => return b.len(),
            Err(e) => match e.error_len() {
                Some(bad) => at += e.valid_up_to() + bad,
                None => return at + e.valid_up_to(),
            },
        }
    }
}

/// `{"KEY":"TEXT"}\n`, TEXT escaped as serde_json does.
fn line(key: &str, bytes: &[u8]) -> Bytes {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::with_capacity(text.len() + text.len() / 8 + 16);
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":\"");
    escape_into(text.as_bytes(), &mut out);
    out.extend_from_slice(b"\"}\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_agent_proto::StreamEvent;

    #[test]
    fn an_incomplete_character_waits_and_invalid_bytes_do_not() {
        assert_eq!(complete(b"abc"), 3);
        assert_eq!(complete("a€".as_bytes()), 4);
        assert_eq!(complete(&"a€".as_bytes()[..3]), 1);
        assert_eq!(complete(b"a\xffb"), 3);
        assert_eq!(complete(b"a\xff\xe2\x82"), 2);
        assert_eq!(complete(b""), 0);
    }

    #[test]
    fn lines_are_stream_events() {
        let ev: StreamEvent = serde_json::from_slice(&line("stdout", b"q\"\\\n\x01\xff")).unwrap();
        assert_eq!(ev, StreamEvent::Stdout("q\"\\\n\u{1}\u{fffd}".into()));
        let l = line("stderr", b"x");
        assert_eq!(&l[..], b"{\"stderr\":\"x\"}\n");
    }
}
