//! [`ClientBuilder`]: a client's options, and the [`Dialer`] that opens its
//! connections where a plain TCP connect cannot (a sandbox's namespace).

use super::*;

/// A future that opens one connection to the agent.
pub type Dialing = Pin<Box<dyn Future<Output = std::io::Result<TcpStream>> + Send>>;

/// Opens the connections of a [`Client`] in place of a plain TCP connect
/// to the URL's host and port: "bring your own connected stream". The
/// client still applies its connect timeout, `TCP_NODELAY` and everything
/// above the socket. `labctl try` uses it to open its sockets inside the
/// sandbox's network namespace, where the agent listens on loopback.
pub trait Dialer: Send + Sync + 'static {
    /// A connected stream to `host:port` (the URL's).
    fn dial(&self, host: &str, port: u16) -> Dialing;
}

/// Options for a [`Client`]; start with [`Client::builder`].
#[derive(Clone)]
pub struct ClientBuilder {
    connect_timeout: Duration,
    request_timeout: Duration,
    long_poll: Duration,
    dialer: Option<Arc<dyn Dialer>>,
    instance: Option<String>,
    #[cfg(feature = "kubevirt")]
    kube: Option<Arc<crate::KubeApi>>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("long_poll", &self.long_poll)
            .field("dialer", &self.dialer.is_some())
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            long_poll: DEFAULT_LONG_POLL,
            dialer: None,
            instance: None,
            #[cfg(feature = "kubevirt")]
            kube: None,
        }
    }
}

impl ClientBuilder {
    /// The Kubernetes API server (and credentials) a `kubevirt://` URL
    /// goes through; without one, the pod's own ([`crate::KubeApi::in_cluster`]).
    #[cfg(feature = "kubevirt")]
    pub fn kube_api(mut self, api: crate::KubeApi) -> Self {
        self.kube = Some(Arc::new(api));
        self
    }

    /// Time allowed to establish a connection: TCP; a vsock connect or a
    /// hybrid socket's `CONNECT`; TLS to the API server and KubeVirt's
    /// upgrade for `kubevirt://`.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// Time allowed for a response beyond what the request asks the agent
    /// to spend (a long-poll's `wait`, an exec's `timeout_secs`). Any
    /// length is taken: one too long to add to the clock (`Duration::MAX`)
    /// means no limit of the client's own (see `deadline_after`).
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }

    /// Length of each `/v1/ready?wait=` long-poll in `wait_ready` (1–60 s).
    pub fn long_poll(mut self, t: Duration) -> Self {
        self.long_poll = t.clamp(
            Duration::from_secs(1),
            Duration::from_secs(lab_agent_proto::MAX_READY_WAIT_SECS),
        );
        self
    }

    /// Opens connections through `dialer` instead of a TCP connect of
    /// this process (see [`Dialer`]).
    pub fn dialer(mut self, dialer: Arc<dyn Dialer>) -> Self {
        self.dialer = Some(dialer);
        self
    }

    /// Pins the client to one life of the VM: the `instance.id` the backend
    /// saw when it handed the VM to the student. Every `/v1/ready`,
    /// `/v1/info` and exec answer from another instance is then
    /// [`Error::InstanceChanged`] (the VM was reset: the student's work
    /// inside it is gone), and one that names no instance (an older agent)
    /// is [`Error::InstanceUnknown`]: which life answered cannot be told.
    /// [`Client::grade`] asks `/v1/ready` before it runs anything, so a
    /// pinned grade of another instance runs nothing; a lone
    /// [`Client::exec`] is only checked on its answer, after the command ran.
    /// An id that is not 32 lowercase hex digits fails [`Self::build`]
    /// with [`Error::InvalidInstanceId`].
    pub fn instance(mut self, id: impl Into<String>) -> Self {
        self.instance = Some(id.into());
        self
    }

    /// A client for the agent at `url`, sending `token`: `http://HOST:PORT`,
    /// `vsock://CID:PORT`, `vsock+unix:///PATH?port=PORT` or (feature
    /// `kubevirt`) `kubevirt://NAMESPACE/VMI[?port=PORT]` (see
    /// [`crate::transport`]).
    pub fn build(self, url: &str, token: &str) -> Result<Client, Error> {
        let pin = self.instance.as_deref().map(checked_pin).transpose()?;
        let invalid = |problem: &str| Error::InvalidUrl {
            url: url.to_owned(),
            problem: problem.to_owned(),
        };
        let (base, origin, authority, remote) =
            match transport::parse(url).map_err(|p| invalid(&p))? {
                Target::Http => {
                    let (base, authority) = http_base(url, &invalid)?;
                    (base.clone(), base, authority, None)
                }
                Target::Channel { channel, canonical } => {
                    if self.dialer.is_some() {
                        return Err(invalid(
                            "a dialer opens TCP connections: give an `http://` URL with it",
                        ));
                    }
                    let remote = Remote {
                        #[cfg(feature = "kubevirt")]
                        kube: match (&channel, &self.kube) {
                            (transport::Channel::Kubevirt(_), None) => {
                                Some(Arc::new(crate::KubeApi::in_cluster()?))
                            }
                            (_, kube) => kube.clone(),
                        },
                        channel,
                    };
                    // The agent reads no `Host`; this one names no real host.
                    let authority = "localhost".to_owned();
                    (
                        canonical,
                        format!("http://{authority}"),
                        authority,
                        Some(Arc::new(remote)),
                    )
                }
            };

        let token = token.trim_end();
        if token.is_empty() {
            return Err(invalid("the token is empty"));
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            invalid("the token contains characters that cannot go in an HTTP header")
        })?;
        auth.set_sensitive(true);

        let channel = remote.is_some();
        let opened = Arc::new(AtomicU64::new(0));
        let mut http = HttpConnector::new();
        // Small request/response pairs: don't let Nagle hold them back.
        http.set_nodelay(true);
        http.set_connect_timeout(Some(self.connect_timeout));
        let connector = Counted {
            http,
            dialer: self.dialer.clone(),
            connect_timeout: self.connect_timeout,
            opened: opened.clone(),
            remote,
        };
        let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE)
            .pool_timer(TokioTimer::new())
            .build(connector.clone());
        // No idle connection kept is no pool at all (hyper-util connects
        // for each request).
        let fresh = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);

        Ok(Client {
            inner: Arc::new(Inner {
                channel,
                base,
                origin,
                authority,
                auth,
                connect_timeout: self.connect_timeout,
                request_timeout: self.request_timeout,
                long_poll: self.long_poll,
                pool,
                fresh,
                opened,
                exec_pin_unknown: Default::default(),
            }),
            pin,
            pinned_by: crate::error::PinnedBy::Caller,
        })
    }
}

/// `id` as a pin, when it has an instance id's shape.
pub(super) fn checked_pin(id: &str) -> Result<Arc<str>, Error> {
    if lab_agent_proto::lifecycle::is_instance_id(id) {
        Ok(Arc::from(id))
    } else {
        Err(Error::InvalidInstanceId { id: id.to_owned() })
    }
}

/// An `http://` URL's base (without trailing `/`) and `Host` authority.
fn http_base(url: &str, invalid: &dyn Fn(&str) -> Error) -> Result<(String, String), Error> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(invalid(
                "the agent speaks plain HTTP (the token, not TLS, guards it): use `http://`",
            ));
        }
        Some(other) => {
            return Err(invalid(&format!(
                "scheme `{other}` is not one the client speaks: `http`, `vsock`, \
                     `vsock+unix` or `kubevirt`"
            )));
        }
        None => {
            return Err(invalid(
                "it has no scheme: write `http://HOST:PORT` (or `vsock://CID:PORT`, \
                     `vsock+unix:///PATH?port=PORT`, `kubevirt://NAMESPACE/VMI`)",
            ));
        }
    }
    let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
        return Err(invalid("it has no host"));
    };
    if uri.query().is_some() {
        return Err(invalid("it has a query string: give only the base URL"));
    }
    let authority = match uri.port_u16() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let prefix = uri.path().trim_end_matches('/').to_owned();
    Ok((format!("http://{authority}{prefix}"), authority))
}
