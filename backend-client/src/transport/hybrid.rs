//! `vsock+unix:///PATH?port=PORT`: hybrid vsock, the host side of a
//! guest's vsock as a UNIX socket. Firecracker, Cloud Hypervisor and
//! vhost-device-vsock expose it the same way: the client writes
//! `CONNECT PORT\n`, the relay connects to the guest's port and answers
//! `OK HOSTPORT\n`, then the bytes are the guest's; when nothing listens
//! on that port in the guest the relay closes the socket instead.

use std::io;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// The longest acknowledgement read: `OK ` and a port number, with room.
const MAX_ACK: usize = 64;

/// Connects through the relay at `path` to the guest's `port`.
pub(crate) async fn connect(path: &Path, port: u32) -> io::Result<UnixStream> {
    let mut s = UnixStream::connect(path).await.map_err(|e| {
        let what = match e.kind() {
            io::ErrorKind::NotFound => "no such socket: is the VM running, and is this its vsock socket",
            io::ErrorKind::ConnectionRefused => "nothing accepts on the socket: is the VM's vsock device (its vhost-user backend) running",
            _ => "cannot connect to the socket",
        };
        io::Error::new(e.kind(), format!("{what}? `{}` ({e})", path.display()))
    })?;
    s.write_all(format!("CONNECT {port}\n").as_bytes()).await?;
    // One byte at a time up to the newline: whatever follows it is the
    // agent's, and must not be read here.
    let mut ack = Vec::with_capacity(16);
    loop {
        let mut b = [0u8; 1];
        if s.read(&mut b).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!(
                    "the vsock relay `{}` closed the connection instead of `OK`: nothing \
                     listens on vsock port {port} in the guest (yet)",
                    path.display()
                ),
            ));
        }
        if b[0] == b'\n' {
            break;
        }
        if ack.len() == MAX_ACK {
            return Err(not_a_relay(path, &ack));
        }
        ack.push(b[0]);
    }
    let line = ack.strip_suffix(b"\r").unwrap_or(&ack);
    if line == b"OK" || line.starts_with(b"OK ") {
        Ok(s)
    } else {
        Err(not_a_relay(path, line))
    }
}

fn not_a_relay(path: &Path, said: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "`{}` answered `CONNECT` with \"{}\", not `OK …`: is it a hybrid vsock socket \
             (Firecracker, Cloud Hypervisor, vhost-device-vsock)?",
            path.display(),
            lab_agent_proto::text::escape(&String::from_utf8_lossy(said))
        ),
    )
}
