//! The accept loop: a connection cap (see [`crate::http::conns`] for who makes
//! room when it is reached), hyper's HTTP/1.1 with a header read timeout, and
//! a graceful shutdown that lets running commands finish within a grace
//! period and then kills them (their cgroups, or process groups).

use crate::app::App;
use crate::http::conn_io::ConnIo;
use crate::http::conns::{Admit, Conns};
use crate::http::listen::{Listeners, Stream};
use crate::http::router;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, watch};

/// Open connections at most. A connection beyond it evicts the one idle
/// longest; when none is idle it gets 429 at once (never a queue).
pub const MAX_CONNECTIONS: usize = 256;
/// A client must send a complete request head within this time, also when a
/// kept-alive connection sits idle: slow or silent clients cannot hold a slot.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Request heads larger than this get 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// What hyper buffers per connection, each way: an answer's bytes wait
/// here when the client reads slowly, so it is counted in
/// [`crate::http::budget::PER_ANSWER`]. (It must hold a request head.)
pub const WRITE_BUFFER: usize = MAX_HEADER_BYTES + 8 * 1024;

/// The answer to a connection beyond the cap when every connection is busy.
const REFUSED: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 93\r\n\r\n\
{\"error\":{\"code\":\"busy\",\"message\":\"the agent is at its connection limit; retry in a moment\"}}";

/// Refused connections being answered at once; beyond this they are just
/// closed.
pub const MAX_REFUSALS: usize = 32;

/// Answers 429 and closes, reading what the client sent for a moment so
/// the close does not reset the connection before it reads the answer.
async fn refuse(mut stream: Stream) {
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        stream.write_all(REFUSED).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        for _ in 0..16 {
            if stream.read(&mut sink).await? == 0 {
                break;
            }
        }
        std::io::Result::Ok(())
    })
    .await;
}

/// Serves until `shutdown` resolves, then drains: no new connections, long
/// polls answer at once, running commands get `grace` to finish before
/// they are killed.
pub async fn run(
    mut listener: Listeners,
    app: Arc<App>,
    shutting_down: watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    let conns = Conns::new(MAX_CONNECTIONS);
    let lines = tokio::spawn(router::write_lines());
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES)
        .max_buf_size(WRITE_BUFFER)
        .keep_alive(true);
    tokio::pin!(shutdown);

    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => (stream, peer),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "failed to accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let conn = match conns.admit() {
            Admit::Serve { conn, evicted } => {
                if evicted {
                    // Let the evicted connection close before accepting
                    // more, so open sockets stay near the cap in a flood.
                    tokio::task::yield_now().await;
                }
                Arc::new(conn)
            }
            Admit::Refuse => {
                // Counted and summarised, never one line each: refusals
                // come in floods, from clients without a token.
                app.rejections.refused_connection(peer.host());
                // Closing with the request unread would reset the
                // connection and lose the answer: read a little first,
                // briefly, for a bounded number of refusals at a time.
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(stream).await;
                        drop(permit);
                    });
                }
                continue;
            }
        };
        stream.set_nodelay();
        let app = app.clone();
        let svc = service_fn({
            let conn = conn.clone();
            move |req| {
                let busy = conn.busy();
                let app = app.clone();
                async move {
                    let mut resp = router::handle(app, req, peer).await?;
                    // Busy until the answer is sent to its last byte (the
                    // body is dropped then), not merely produced.
                    resp.body_mut().hold(busy);
                    Ok::<_, std::convert::Infallible>(resp)
                }
            }
        });
        let io = ConnIo::new(stream, conn.clone());
        let served = graceful.watch(http.serve_connection(TokioIo::new(io), svc));
        tokio::spawn(async move {
            tokio::select! {
                r = served => if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                },
                // Idle (no request in progress): dropping it loses nothing.
                _ = conn.evicted() => tracing::debug!("closed the longest-idle connection to make room"),
            }
        });
    }

    drop(listener);
    app.rejections.flush();
    let _ = shutting_down.send(true);
    let running = app.jobs.len();
    tracing::info!(
        running_commands = running,
        grace_secs = grace.as_secs(),
        "shutting down"
    );
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    tokio::select! {
        _ = &mut drained => {}
        _ = tokio::time::sleep(grace) => {
            let killed = app.jobs.kill_all();
            tracing::warn!(killed, "grace period over: killed the remaining commands");
            // Let the killed commands' requests answer before we exit.
            let _ = tokio::time::timeout(Duration::from_secs(3), drained).await;
        }
    }
    lines.abort();
    router::flush_lines();
}
