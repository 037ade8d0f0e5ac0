//! `kubevirt://NAMESPACE/VMI[?port=PORT]`: the agent through KubeVirt's
//! vsock subresource, so a backend reaches a VM that no pod network
//! reaches (the guest's vsock, which no rule, route or interface of the
//! guest's touches).
//!
//! What KubeVirt does, from its source (kubevirt/kubevirt
//! `pkg/virt-api/rest/vsock.go`, `pkg/virt-api/rest/streamer.go`,
//! `pkg/virt-handler/rest/console.go`, `pkg/virt-handler/vsock/dial.go`,
//! `staging/src/kubevirt.io/client-go/kubevirt/typed/core/v1/async.go` and
//! `websocket.go`): a `GET` of
//! `/apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachineinstances/VMI/vsock?port=P&tls=false`
//! upgraded to a WebSocket of subprotocol `plain.kubevirt.io`; the API
//! server authenticates the bearer token and authorises `get` on
//! `virtualmachineinstances/vsock`, virt-api relays the connection's raw
//! bytes to virt-handler's WebSocket on the VM's node, and virt-handler
//! dials the guest's `CID:P` and copies each read as one binary message
//! (fragmented at its 10 KiB write buffer). Refusals before the upgrade
//! are Kubernetes `Status` objects (401, 403, 404 for no such VMI, 400 for
//! a VMI without `autoattachVSOCK` or not running, 500 when virt-handler
//! cannot be reached); a port nothing listens on in the guest is an
//! upgrade followed by a close.
//!
//! `tls=false`: virt-handler would otherwise wrap the guest's port in TLS
//! (KubeVirt's own CA) that the agent does not speak. The API-server leg
//! is TLS, and the agent still checks its bearer token (SECURITY.md).
//!
//! - [`KubeApi`]: where the API server is and how to authenticate: the
//!   pod's in-cluster credentials, or files given.
//! - `upgrade`: the request and the answer, up to the WebSocket.
//! - `ws`: the WebSocket's frames as the byte stream hyper reads.

mod upgrade;
mod ws;

/// A connection through KubeVirt's relay, over TLS to the API server.
pub(crate) type Relay = ws::Relay<tokio_rustls::client::TlsStream<TcpStream>>;

use crate::error::Error;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpStream;

/// Where a pod finds its service account (Kubernetes' in-cluster config).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The largest token or CA file read.
const MAX_CREDENTIAL_FILE: u64 = 1 << 20;

/// A VMI's agent: namespace, name and vsock port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vmi {
    pub namespace: String,
    pub name: String,
    pub port: u32,
}

impl Vmi {
    /// `NAMESPACE/VMI` of a `kubevirt://` URL: both Kubernetes names (so
    /// nothing in them can change the API path).
    pub(crate) fn parse(path: &str, port: u32) -> Result<Vmi, String> {
        let path = path.strip_suffix('/').unwrap_or(path);
        let Some((namespace, name)) = path.split_once('/') else {
            return Err(
                "write `kubevirt://NAMESPACE/VMI`, e.g. `kubevirt://labs/vm-42`".to_owned(),
            );
        };
        let dns = |s: &str, max: usize, what: &str| {
            let ok = !s.is_empty()
                && s.len() <= max
                && s.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                })
                && s.starts_with(|c: char| c.is_ascii_alphanumeric())
                && s.ends_with(|c: char| c.is_ascii_alphanumeric())
                && (what == "VMI name" || !s.contains('.'));
            if ok {
                Ok(s.to_owned())
            } else {
                Err(format!(
                    "`{s}` is not a Kubernetes {what}: lowercase letters, digits and `-`{}, \
                     at most {max} characters",
                    if what == "VMI name" { " or `.`" } else { "" }
                ))
            }
        };
        Ok(Vmi {
            namespace: dns(namespace, 63, "namespace")?,
            name: dns(name, 253, "VMI name")?,
            port,
        })
    }

    /// The subresource's path and query.
    pub(crate) fn path(&self) -> String {
        format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/{}/virtualmachineinstances/{}/vsock?port={}&tls=false",
            self.namespace, self.name, self.port
        )
    }

    /// Connects through the API server `api` to the agent.
    pub(crate) async fn connect(&self, api: &KubeApi) -> io::Result<Relay> {
        upgrade::open(api, self).await
    }
}

impl fmt::Display for Vmi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kubevirt://{}/{}?port={}",
            self.namespace, self.name, self.port
        )
    }
}

/// The Kubernetes API server a `kubevirt://` client goes through, and its
/// credentials. The token is read from its file at every connection, as
/// Kubernetes' own clients do: a projected service-account token is
/// rotated in place (hourly by default).
#[derive(Clone)]
pub struct KubeApi {
    /// `host:port` as the `Host` header and the TCP connect take it.
    authority: String,
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    token_file: PathBuf,
    tls: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeApi")
            .field("server", &self.authority)
            .field("token_file", &self.token_file)
            .finish_non_exhaustive()
    }
}

impl KubeApi {
    /// The pod's own credentials: `KUBERNETES_SERVICE_HOST` and `_PORT`,
    /// and the service account's `token` and `ca.crt` under
    /// [`SERVICE_ACCOUNT_DIR`].
    pub fn in_cluster() -> Result<KubeApi, Error> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST")
            .ok()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Error::Kube {
                problem: "`KUBERNETES_SERVICE_HOST` is not set: this is not a pod".to_owned(),
            })?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let dir = Path::new(SERVICE_ACCOUNT_DIR);
        KubeApi::from_files(
            &format!("https://{host}:{port}"),
            dir.join("token"),
            &dir.join("ca.crt"),
        )
    }

    /// The API server at `server` (`https://HOST[:PORT]`), a bearer token
    /// read from `token_file` at each connection, and the CA bundle in
    /// `ca_file` (PEM) that its certificate must chain to.
    pub fn from_files(
        server: &str,
        token_file: impl Into<PathBuf>,
        ca_file: &Path,
    ) -> Result<KubeApi, Error> {
        let token_file = token_file.into();
        read_token(&token_file).map_err(|e| Error::Kube {
            problem: e.to_string(),
        })?;
        let ca = read_limited(ca_file).map_err(|e| Error::Kube {
            problem: format!("cannot read the CA bundle `{}`: {e}", ca_file.display()),
        })?;
        KubeApi::new(server, token_file, &ca).map_err(|problem| Error::Kube {
            problem: format!("{problem} (CA bundle `{}`)", ca_file.display()),
        })
    }

    fn new(server: &str, token_file: PathBuf, ca_pem: &[u8]) -> Result<KubeApi, String> {
        let rest = server
            .strip_prefix("https://")
            .ok_or_else(|| format!("the API server `{server}` is not an `https://` URL"))?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "the API server `{server}` is not `https://HOST[:PORT]`"
            ));
        }
        let (host, port) = split_authority(authority)
            .ok_or_else(|| format!("the API server `{server}` has no valid port"))?;
        let server_name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
            .map_err(|_| format!("`{host}` is not a host name or IP address"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| format!("the CA bundle is not PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("a certificate of the CA bundle is unusable: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the CA bundle holds no certificate".to_owned());
        }
        // ring, not aws-lc-rs: no C library to build into every backend
        // and the wheel. rustls 0.23.48 deprecates ring's provider for
        // lacking post-quantum key exchange; this leg's key exchange is
        // classical (X25519, P-256), see SECURITY.md.
        #[allow(deprecated)]
        let provider = rustls::crypto::ring::default_provider();
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(KubeApi {
            authority: format!("{host}:{port}"),
            host: host.trim_matches(['[', ']']).to_owned(),
            port,
            server_name,
            token_file,
            tls: Arc::new(tls),
        })
    }

    /// `https://HOST:PORT`.
    pub fn server(&self) -> String {
        format!("https://{}", self.authority)
    }

    async fn tcp(&self) -> io::Result<TcpStream> {
        let s = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot reach the Kubernetes API server {} ({e})",
                        self.server()
                    ),
                )
            })?;
        s.set_nodelay(true)?;
        Ok(s)
    }
}

/// `host:port`, `[v6]:port` or a host alone (443).
fn split_authority(a: &str) -> Option<(&str, u16)> {
    if let Some(end) = a.find(']') {
        let (host, rest) = a.split_at(end + 1);
        return match rest.strip_prefix(':') {
            Some(p) => Some((host, p.parse().ok()?)),
            None if rest.is_empty() => Some((host, 443)),
            None => None,
        };
    }
    match a.rsplit_once(':') {
        Some((host, p)) => Some((host, p.parse().ok()?)),
        None => Some((a, 443)),
    }
}

fn read_limited(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_CREDENTIAL_FILE)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The bearer token in `path`, trimmed; an error says which file.
pub(crate) fn read_token(path: &Path) -> io::Result<String> {
    let fail = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("cannot read the Kubernetes token `{}`: {e}", path.display()),
        )
    };
    let bytes = read_limited(path).map_err(fail)?;
    let token = String::from_utf8(bytes)
        .map_err(|_| fail(io::Error::new(io::ErrorKind::InvalidData, "not UTF-8")))?;
    let token = token.trim();
    if token.is_empty() || token.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(fail(io::Error::new(
            io::ErrorKind::InvalidData,
            "empty, or not one printable word",
        )));
    }
    Ok(token.to_owned())
}

/// KubeVirt (or the API server before it) refused the connection: its
/// status and `Status` message, or a TLS failure (no status). The
/// connector's error; the client turns it into [`Error::Relay`].
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Refused {
    pub(crate) status: Option<u16>,
    pub(crate) message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmis_are_kubernetes_names() {
        let vmi = Vmi::parse("labs/vm-1.a", 8899).unwrap();
        assert_eq!(vmi.to_string(), "kubevirt://labs/vm-1.a?port=8899");
        assert_eq!(
            vmi.path(),
            "/apis/subresources.kubevirt.io/v1/namespaces/labs/virtualmachineinstances/vm-1.a/vsock?port=8899&tls=false"
        );
        for (bad, want) in [
            ("labs", "kubevirt://NAMESPACE/VMI"),
            ("labs/", "kubevirt://NAMESPACE/VMI"),
            ("/vm", "`` is not a Kubernetes namespace"),
            ("labs//vm", "`/vm` is not a Kubernetes VMI name"),
            ("Labs/vm", "`Labs` is not a Kubernetes namespace"),
            ("labs/vm/x", "`vm/x` is not a Kubernetes VMI name"),
            ("la.bs/vm", "namespace"),
            ("labs/vm?x", "VMI name"),
            ("labs/-vm", "VMI name"),
        ] {
            let e = Vmi::parse(bad, 1).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn api_servers() {
        assert_eq!(split_authority("10.96.0.1:443"), Some(("10.96.0.1", 443)));
        assert_eq!(split_authority("[fd00::1]:6443"), Some(("[fd00::1]", 6443)));
        assert_eq!(split_authority("[fd00::1]"), Some(("[fd00::1]", 443)));
        assert_eq!(split_authority("api.example"), Some(("api.example", 443)));
        assert_eq!(split_authority("api.example:x"), None);
        let e = KubeApi::new("http://10.96.0.1", "/t".into(), b"").unwrap_err();
        assert!(e.contains("`https://`"), "{e}");
        let e = KubeApi::new("https://10.96.0.1/api", "/t".into(), b"").unwrap_err();
        assert!(e.contains("HOST[:PORT]"), "{e}");
        let e = KubeApi::new("https://10.96.0.1", "/t".into(), b"not pem").unwrap_err();
        assert!(e.contains("no certificate"), "{e}");
    }
}
