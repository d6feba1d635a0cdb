//! The one HTTP/1.1 request a pull makes: `GET` with a few headers, the response head parsed with
//! `httparse` (already in the binary for the server side) and a body of `Content-Length` bytes,
//! which is how a shim always answers `GET /v1/files` and its errors. No pool, no chunked
//! decoding, no redirects: a few kilobytes of binary instead of a general client.

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head accepted.
const MAX_HEAD: usize = 16 << 10;

/// Bytes read from the socket at a time.
const READ_BUF: usize = 64 << 10;

/// A response: its status, the headers a pull reads, and the body still to read.
#[derive(Debug)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// `ETag`.
    pub etag: Option<String>,
    /// `X-Stepshim-Stream-Length`.
    pub stream_length: Option<u64>,
    tcp: TcpStream,
    /// Body bytes read with the head.
    early: Bytes,
    /// Body bytes not yet returned.
    left: u64,
}

/// Sends `GET target` with `headers` and reads the response head, each read within `idle`.
pub async fn get(
    mut tcp: TcpStream,
    authority: &str,
    target: &str,
    headers: &[(&str, &str)],
    idle: Duration,
) -> io::Result<Response> {
    let mut head = format!("GET {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    timed(idle, tcp.write_all(head.as_bytes())).await?;
    let mut buf = BytesMut::with_capacity(READ_BUF);
    loop {
        if timed(idle, tcp.read_buf(&mut buf)).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed before the response head",
            ));
        }
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut slots);
        let parsed = resp.parse(&buf).map_err(io::Error::other)?;
        let httparse::Status::Complete(n) = parsed else {
            if buf.len() > MAX_HEAD {
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
        let status = resp.code.unwrap_or(0);
        let etag = find("etag");
        let stream_length =
            find(protocol::artifacts::STREAM_LENGTH_HEADER).and_then(|v| v.parse().ok());
        let early = buf.split_off(n).freeze();
        if early.len() as u64 > length {
            return Err(io::Error::other(
                "the response is longer than its Content-Length",
            ));
        }
        return Ok(Response {
            status,
            etag,
            stream_length,
            tcp,
            left: length - early.len() as u64,
            early,
        });
    }
}

impl Response {
    /// The next body bytes, `None` at its end; an error if the connection ends before it or
    /// nothing comes for `idle`.
    pub async fn chunk(&mut self, idle: Duration) -> io::Result<Option<Bytes>> {
        if !self.early.is_empty() {
            return Ok(Some(std::mem::take(&mut self.early)));
        }
        if self.left == 0 {
            return Ok(None);
        }
        let want = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(READ_BUF);
        let mut buf = BytesMut::with_capacity(want);
        let n = timed(idle, (&mut self.tcp).take(want as u64).read_buf(&mut buf)).await?;
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
        Ok(Some(buf.freeze()))
    }

    /// The whole (small) body, e.g. an error's JSON, at most 64 KiB.
    pub async fn small_body(mut self, idle: Duration) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(b) = self.chunk(idle).await? {
            out.extend_from_slice(&b);
            if out.len() > 64 << 10 {
                break;
            }
        }
        Ok(out)
    }
}

async fn timed<T>(idle: Duration, f: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    tokio::time::timeout(idle, f)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no bytes within the idle timeout"))?
}
