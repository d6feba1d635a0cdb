//! The one HTTP/1.1 request a pull makes, blocking on the pull's own thread: `GET` with a few
//! headers, the response head parsed with `httparse` (already in the binary for the server side) and
//! a body of `Content-Length` bytes, which is how a shim always answers `GET /v1/files` and its
//! errors. No pool, no chunked decoding, no redirects, no async state machine: a few kilobytes of
//! binary instead of a general client.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// Largest response head accepted.
const MAX_HEAD: usize = 16 << 10;

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A response: its status, the headers a pull reads, and the body still to read (as `Read`: an
/// error, never a clean end, if the connection ends before `Content-Length` bytes).
#[derive(Debug)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// `ETag`.
    pub etag: Option<String>,
    /// `X-Stepshim-Stream-Length`.
    pub stream_length: Option<u64>,
    tcp: TcpStream,
    /// Body bytes read with the head, from `early_at` on.
    early: Vec<u8>,
    early_at: usize,
    /// Body bytes not yet read from the socket.
    left: u64,
}

/// Connects to `addr`, sends `GET target` with `headers` and reads the response head; every read
/// and write may take at most `idle`. `on_connect` gets a handle that can shut the socket down
/// (to cancel a pull blocked in a read).
pub fn get(
    addr: SocketAddr,
    authority: &str,
    target: &str,
    headers: &[(&str, &str)],
    idle: Duration,
    on_connect: impl FnOnce(&TcpStream),
) -> io::Result<Response> {
    let mut tcp = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    on_connect(&tcp);
    tcp.set_read_timeout(Some(idle))?;
    tcp.set_write_timeout(Some(idle))?;
    let _ = tcp.set_nodelay(true);
    let mut head = format!("GET {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes())?;
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    loop {
        let n = tcp.read(&mut buf[len..])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed before the response head",
            ));
        }
        len += n;
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut slots);
        let httparse::Status::Complete(at) = resp.parse(&buf[..len]).map_err(io::Error::other)?
        else {
            if len == buf.len() {
                return Err(io::Error::other("response head too large"));
            }
            continue;
        };
        let find = |name: &str| {
            resp.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .map(|v| v.trim().to_owned())
        };
        let length = find("content-length")
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| io::Error::other("the response has no Content-Length"))?;
        let early = (len - at) as u64;
        if early > length {
            return Err(io::Error::other(
                "the response is longer than its Content-Length",
            ));
        }
        let status = resp.code.unwrap_or(0);
        let etag = find("etag");
        let stream_length =
            find(protocol::artifacts::STREAM_LENGTH_HEADER).and_then(|v| v.parse().ok());
        return Ok(Response {
            status,
            etag,
            stream_length,
            tcp,
            early_at: at,
            early: {
                buf.truncate(len);
                buf
            },
            left: length - early,
        });
    }
}

impl Response {
    /// The whole (small) body, e.g. an error's JSON, at most 64 KiB.
    pub fn small_body(self) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = self.take(64 << 10).read_to_end(&mut out);
        out
    }
}

impl Read for Response {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.early_at < self.early.len() {
            let n = buf.len().min(self.early.len() - self.early_at);
            buf[..n].copy_from_slice(&self.early[self.early_at..self.early_at + n]);
            self.early_at += n;
            return Ok(n);
        }
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.tcp.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the connection closed {} bytes before the body's end",
                    self.left
                ),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

impl Drop for Response {
    fn drop(&mut self) {
        let _ = self.tcp.shutdown(Shutdown::Both);
    }
}
