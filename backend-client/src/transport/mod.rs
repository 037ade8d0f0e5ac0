//! Where an agent is, and the connection to it: the URL forms a [`Client`]
//! takes, and the byte stream each gives hyper. Above the stream every
//! call is the same whatever the channel (one deadline, bounded answers,
//! `interim` and `reuse` on top).
//!
//! - `http://HOST:PORT`: TCP (hyper-util's connector, or the caller's
//!   [`crate::Dialer`]).
//! - `vsock://CID:PORT`: `AF_VSOCK` from this host (`transport/vsock.rs`).
//! - `vsock+unix:///PATH?port=PORT`: hybrid vsock, a host UNIX socket
//!   that relays `CONNECT PORT\n` → `OK …\n` to the guest's port, as
//!   Firecracker, Cloud Hypervisor and vhost-device-vsock expose it
//!   (`transport/hybrid.rs`).
//! - `kubevirt://NAMESPACE/VMI[?port=PORT]`: KubeVirt's vsock subresource
//!   through the API server (`kubevirt`, behind the crate feature of that
//!   name).
//!
//! A vsock port left out is the agent's, 8899.
//!
//! [`Client`]: crate::Client

pub(crate) mod hybrid;
#[cfg(feature = "kubevirt")]
pub mod kubevirt;
pub(crate) mod vsock;

use hyper_util::client::legacy::connect::{Connected, Connection};
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// The vsock port when a URL names none: the agent's.
pub const DEFAULT_VSOCK_PORT: u32 = lab_agent_proto::guest::PORT as u32;

/// A URL that is not TCP: the channel and how to reach the agent on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Channel {
    Vsock {
        cid: u32,
        port: u32,
    },
    Hybrid {
        path: PathBuf,
        port: u32,
    },
    #[cfg(feature = "kubevirt")]
    Kubevirt(kubevirt::Vmi),
}

/// What a URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `http://…`: left to hyper's URI parsing.
    Http,
    /// A channel, and the URL as the client names it.
    Channel { channel: Channel, canonical: String },
}

/// Reads a URL's scheme and what follows; `Err` is the problem, for
/// [`crate::Error::InvalidUrl`].
pub(crate) fn parse(url: &str) -> Result<Target, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(Target::Http);
    };
    let channel = match scheme.to_ascii_lowercase().as_str() {
        "vsock" => {
            let (addr, query) = split_query(rest);
            no_query(query)?;
            let addr = addr.strip_suffix('/').unwrap_or(addr);
            let (cid, port) = match addr.split_once(':') {
                Some((cid, port)) => (cid, Some(port)),
                None => (addr, None),
            };
            let cid = cid.parse::<u32>().map_err(|_| {
                format!(
                    "`{cid}` is not a vsock CID: write `vsock://CID:PORT`, e.g. `vsock://3:8899`"
                )
            })?;
            Channel::Vsock {
                cid,
                port: port.map_or(Ok(DEFAULT_VSOCK_PORT), vsock_port)?,
            }
        }
        "vsock+unix" => {
            let (path, query) = split_query(rest);
            if !path.starts_with('/') || path.len() < 2 {
                return Err(
                    "write the socket's absolute path: `vsock+unix:///PATH?port=PORT`".to_owned(),
                );
            }
            Channel::Hybrid {
                path: PathBuf::from(path),
                port: port_query(query)?,
            }
        }
        #[cfg(feature = "kubevirt")]
        "kubevirt" => {
            let (path, query) = split_query(rest);
            Channel::Kubevirt(kubevirt::Vmi::parse(path, port_query(query)?)?)
        }
        #[cfg(not(feature = "kubevirt"))]
        "kubevirt" => {
            return Err(
                "this build has no KubeVirt transport: build `lab-agent-client` with \
                        its `kubevirt` feature"
                    .to_owned(),
            );
        }
        _ => return Ok(Target::Http),
    };
    Ok(Target::Channel {
        canonical: canonical(&channel),
        channel,
    })
}

fn canonical(channel: &Channel) -> String {
    match channel {
        Channel::Vsock { cid, port } => format!("vsock://{cid}:{port}"),
        Channel::Hybrid { path, port } => format!("vsock+unix://{}?port={port}", path.display()),
        #[cfg(feature = "kubevirt")]
        Channel::Kubevirt(vmi) => vmi.to_string(),
    }
}

fn split_query(rest: &str) -> (&str, Option<&str>) {
    match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    }
}

fn no_query(query: Option<&str>) -> Result<(), String> {
    match query {
        None => Ok(()),
        Some(_) => Err("it has a query string: give only `vsock://CID:PORT`".to_owned()),
    }
}

fn vsock_port(s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .map_err(|_| format!("`{s}` is not a vsock port (0 to 4294967295)"))
}

/// `port=PORT` and nothing else (none: the agent's).
fn port_query(query: Option<&str>) -> Result<u32, String> {
    let mut port = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("port", v)) if port.is_none() => port = Some(vsock_port(v)?),
            _ => {
                return Err(format!(
                    "`{pair}` in the query: only `port=PORT` may be given, once"
                ));
            }
        }
    }
    Ok(port.unwrap_or(DEFAULT_VSOCK_PORT))
}

/// A channel ready to dial: with the API server's credentials for
/// `kubevirt://`.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    pub(crate) channel: Channel,
    #[cfg(feature = "kubevirt")]
    pub(crate) kube: Option<std::sync::Arc<kubevirt::KubeApi>>,
}

impl Remote {
    /// Opens a connection. The caller bounds it in time.
    pub(crate) async fn dial(&self) -> io::Result<Conn> {
        match &self.channel {
            Channel::Vsock { cid, port } => Ok(Conn::Vsock(vsock::connect(*cid, *port).await?)),
            Channel::Hybrid { path, port } => Ok(Conn::Unix(hybrid::connect(path, *port).await?)),
            #[cfg(feature = "kubevirt")]
            Channel::Kubevirt(vmi) => {
                let api = self
                    .kube
                    .as_deref()
                    .expect("the builder gives a kubevirt:// client its API server");
                Ok(Conn::Kubevirt(Box::new(vmi.connect(api).await?)))
            }
        }
    }
}

/// A connection to an agent, whichever the channel: the one stream type
/// hyper is given.
#[derive(Debug)]
pub(crate) enum Conn {
    Tcp(TcpStream),
    Vsock(vsock::VsockStream),
    Unix(UnixStream),
    #[cfg(feature = "kubevirt")]
    Kubevirt(Box<kubevirt::Relay>),
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Conn::Tcp($s) => $e,
            Conn::Vsock($s) => $e,
            Conn::Unix($s) => $e,
            #[cfg(feature = "kubevirt")]
            Conn::Kubevirt($s) => $e,
        }
    };
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(url: &str) -> (Channel, String) {
        match parse(url) {
            Ok(Target::Channel { channel, canonical }) => (channel, canonical),
            other => panic!("{url}: {other:?}"),
        }
    }

    fn problem(url: &str) -> String {
        parse(url).expect_err(url)
    }

    #[test]
    fn vsock_urls() {
        assert_eq!(
            channel("vsock://3:8899"),
            (
                Channel::Vsock { cid: 3, port: 8899 },
                "vsock://3:8899".into()
            )
        );
        assert_eq!(
            channel("VSOCK://42"),
            (
                Channel::Vsock {
                    cid: 42,
                    port: 8899
                },
                "vsock://42:8899".into()
            ),
            "the agent's port when none is given"
        );
        assert!(problem("vsock://x:1").contains("`x` is not a vsock CID"));
        assert!(problem("vsock://3:99999999999").contains("is not a vsock port"));
        assert!(problem("vsock://3:1?port=2").contains("query"));
    }

    #[test]
    fn hybrid_vsock_urls() {
        assert_eq!(
            channel("vsock+unix:///run/vm/v.sock?port=1234"),
            (
                Channel::Hybrid {
                    path: "/run/vm/v.sock".into(),
                    port: 1234
                },
                "vsock+unix:///run/vm/v.sock?port=1234".into()
            )
        );
        assert_eq!(
            channel("vsock+unix:///v.sock").0,
            Channel::Hybrid {
                path: "/v.sock".into(),
                port: 8899
            }
        );
        assert!(problem("vsock+unix://rel/v.sock").contains("absolute path"));
        assert!(problem("vsock+unix:///v.sock?port=1&port=2").contains("once"));
        assert!(problem("vsock+unix:///v.sock?cid=3").contains("`cid=3`"));
        assert!(problem("vsock+unix:///v.sock?port=").contains("not a vsock port"));
    }

    #[test]
    fn anything_else_is_http_s_to_judge() {
        assert_eq!(parse("http://10.0.0.5:8899"), Ok(Target::Http));
        assert_eq!(parse("ftp://x"), Ok(Target::Http));
        assert_eq!(parse("10.0.0.5:8899"), Ok(Target::Http));
    }

    #[cfg(not(feature = "kubevirt"))]
    #[test]
    fn kubevirt_needs_its_feature() {
        assert!(problem("kubevirt://ns/vm").contains("`kubevirt` feature"));
    }
}
