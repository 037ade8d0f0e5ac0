//! A minimal blocking HTTP/1.1 client: one request buffer, one write, a
//! buffered read of the response. Deliberately thin, so the exec numbers
//! measure the agent and not a client library.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One connection to the agent; kept alive across requests.
#[derive(Debug)]
pub struct Conn {
    reader: BufReader<TcpStream>,
    addr: SocketAddr,
    token: String,
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Conn {
    pub fn connect(addr: SocketAddr, token: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            reader: BufReader::with_capacity(64 * 1024, stream),
            addr,
            token: token.to_owned(),
        })
    }

    /// Sends the request without waiting for the answer (for long-polls
    /// whose answer is timed separately).
    pub fn send(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> io::Result<()> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n",
            self.addr, self.token
        )
        .into_bytes();
        if let Some(b) = body {
            req.extend_from_slice(
                format!(
                    "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    b.len()
                )
                .as_bytes(),
            );
            req.extend_from_slice(b);
        } else {
            req.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&req)
    }

    /// Reads one response (Content-Length or chunked).
    pub fn receive(&mut self) -> io::Result<Response> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| io::Error::other(format!("bad status line {line:?}")))?;
        let mut length = None;
        let mut chunked = false;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let v = v.trim();
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.parse::<usize>().ok();
                } else if k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim_end(), 16)
                    .map_err(|_| io::Error::other(format!("bad chunk size {line:?}")))?;
                let start = body.len();
                body.resize(start + size, 0);
                self.reader.read_exact(&mut body[start..])?;
                line.clear();
                self.reader.read_line(&mut line)?;
                if size == 0 {
                    break;
                }
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            self.reader.read_exact(&mut body)?;
        } else {
            self.reader.read_to_end(&mut body)?;
        }
        Ok(Response { status, body })
    }

    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> io::Result<Response> {
        self.send(method, path, body)?;
        self.receive()
    }
}
