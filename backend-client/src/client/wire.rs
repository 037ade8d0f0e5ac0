//! Beneath the calls, on the wire: the connector that counts and guards connections,
//! decoding an answer, `Retry-After`, and the deadline arithmetic.

use super::*;

/// hyper-util's connector (or the caller's [`Dialer`]), counting the
/// connections it makes, each one [`Guarded`] against an interim-response
/// flood.
#[derive(Clone)]
pub(super) struct Counted {
    pub(super) http: HttpConnector,
    pub(super) dialer: Option<Arc<dyn Dialer>>,
    pub(super) connect_timeout: Duration,
    pub(super) opened: Arc<AtomicU64>,
    /// Where a URL other than `http://` leads (vsock, KubeVirt).
    pub(super) remote: Option<Arc<Remote>>,
}

type Connecting = Pin<
    Box<
        dyn Future<
                Output = Result<TokioIo<Guarded<Conn>>, Box<dyn std::error::Error + Send + Sync>>,
            > + Send,
    >,
>;

impl tower_service::Service<Uri> for Counted {
    type Response = TokioIo<Guarded<Conn>>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let opened = self.opened.clone();
        if let Some(remote) = &self.remote {
            let (remote, timeout) = (remote.clone(), self.connect_timeout);
            return Box::pin(async move {
                let conn = tokio::time::timeout(timeout, remote.dial())
                    .await
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
                opened.fetch_add(1, Ordering::Relaxed);
                Ok(TokioIo::new(Guarded::new(conn)))
            });
        }
        if let Some(dialer) = &self.dialer {
            let host = uri.host().unwrap_or_default();
            let dialing = dialer.dial(host, uri.port_u16().unwrap_or(80));
            let timeout = self.connect_timeout;
            return Box::pin(async move {
                let stream = tokio::time::timeout(timeout, dialing)
                    .await
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
                stream.set_nodelay(true)?;
                opened.fetch_add(1, Ordering::Relaxed);
                Ok(TokioIo::new(Guarded::new(Conn::Tcp(stream))))
            });
        }
        let connecting = self.http.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            opened.fetch_add(1, Ordering::Relaxed);
            Ok(TokioIo::new(Guarded::new(Conn::Tcp(io.into_inner()))))
        })
    }
}

pub(crate) fn transport(request: &Request, source: impl Into<crate::error::BoxError>) -> Error {
    Error::Transport {
        request: request.clone(),
        source: source.into(),
    }
}

pub(super) fn decode<T: DeserializeOwned>(
    request: Request,
    resp: &RawResponse,
) -> Result<T, Error> {
    serde_json::from_slice(&resp.body).map_err(|source| Error::Decode {
        request,
        status: resp.status,
        source,
    })
}

pub(crate) fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()
}

/// After a 429 to an exec: when to send it again (its `Retry-After`, 1 to
/// 10 s), or the [`Error::Busy`] that ends the call. A pause that would end
/// past the deadline is not taken: the call would only fail later.
pub(crate) fn busy_resume(
    request: Request,
    resp: &RawResponse,
    attempts: u32,
    start: Instant,
    deadline: Instant,
) -> Result<Instant, Error> {
    let after = retry_after(&resp.headers).unwrap_or(1).clamp(1, 10);
    let resume = Instant::now() + Duration::from_secs(after);
    if attempts > MAX_BUSY_RETRIES || resume >= deadline {
        let message = match status_error(request.clone(), resp) {
            Error::Status { message, .. } => message,
            _ => String::new(),
        };
        return Err(Error::Busy {
            request,
            attempts,
            waited: start.elapsed(),
            message,
        });
    }
    tracing::debug!(url = %request.url, after, "agent busy, retrying");
    Ok(resume)
}

/// A [`Error::Status`] from a response, with the agent's message if its body
/// is an `ErrorBody`, else the start of whatever it sent.
pub(crate) fn status_error(request: Request, resp: &RawResponse) -> Error {
    let (code, message) = match serde_json::from_slice::<ErrorBody>(&resp.body) {
        Ok(b) => (Some(b.error.code), b.error.message),
        Err(_) => {
            let text = String::from_utf8_lossy(&resp.body);
            let text = text.trim();
            let message = if text.is_empty() {
                resp.status
                    .canonical_reason()
                    .unwrap_or("no body")
                    .to_lowercase()
            } else {
                text.chars().take(200).collect()
            };
            (None, message)
        }
    };
    Error::Status {
        request,
        status: resp.status,
        code,
        message,
        retry_after: retry_after(&resp.headers),
    }
}

/// The longest a call's deadline lies ahead: about 30 years, as tokio's own
/// "far future". Longer is the same in practice, and `Instant` cannot hold
/// an arbitrary `Duration` from now (`Duration::MAX` overflows it).
pub(super) const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// `start + timeout`, saturating at [`FAR_FUTURE`]. Saturation, not an
/// error, because the builder's setters take any `Duration` and return
/// `Self` (as `long_poll` clamps rather than refuses), and `Duration::MAX`
/// is the usual way to say "no limit"; a budget that long then never ends a
/// call, instead of panicking in the addition. `exec`'s `timeout_secs`
/// goes through here too: the agent, not this sum, refuses one too large.
pub(crate) fn deadline_after(start: Instant, timeout: Duration) -> Instant {
    start + timeout.min(FAR_FUTURE)
}
