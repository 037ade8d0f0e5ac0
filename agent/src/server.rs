//! The accept loop: a connection cap, hyper's HTTP/1.1 with a header read
//! timeout, and a graceful shutdown that lets running commands finish within
//! a grace period and then kills their process groups.

use crate::app::App;
use crate::router;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// Open connections at most; further clients wait in the listen backlog
/// until one closes (idle ones close after [`HEADER_READ_TIMEOUT`]).
pub const MAX_CONNECTIONS: usize = 256;
/// A client must send a complete request head within this time, also when a
/// kept-alive connection sits idle: slow or silent clients cannot hold a slot.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Request heads larger than this get 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Serves until `shutdown` resolves, then drains: no new connections, long
/// polls answer at once, running commands get `grace` to finish before
/// their process groups are killed.
pub async fn run(
    listener: TcpListener,
    app: Arc<App>,
    shutting_down: watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    tokio::pin!(shutdown);

    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "failed to accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let svc = service_fn(move |req| router::handle(app.clone(), req));
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), svc));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }

    drop(listener);
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
}
