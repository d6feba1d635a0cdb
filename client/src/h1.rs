//! One request with its body in memory, whole answer wanted, over a kept-alive HTTP/1.1 connection
//! written and read here: the head and body in one write, the answer read into one buffer. This is
//! the path of every JSON call ([`crate::Direct`] sends streams through hyper): side by side on
//! loopback, a spawn through hyper's client took about 45 us more than the same exchange written by
//! hand on the same runtime (issue 13). Only what an answer of the shim needs is understood: a
//! `Content-Length` or chunked body, none for 1xx, 204 and 304, else a body that ends with the
//! connection. Answers are bounded ([`MAX_HEAD`], [`MAX_BODY`]).

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes of an answer's status line and headers.
pub const MAX_HEAD: usize = 64 * 1024;
/// Bytes of an answer's body (a process list of thousands is a few MiB).
pub const MAX_BODY: usize = 64 << 20;
/// Headers of an answer.
const MAX_HEADERS: usize = 64;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    /// The connection failed or closed; `answered` says whether any byte of the answer came.
    #[error("{source}")]
    Io {
        /// The I/O error (`UnexpectedEof` for a close).
        source: std::io::Error,
        /// Whether the answer had begun.
        answered: bool,
    },
    /// The answer is not HTTP/1.1 as this reader understands it, or too large.
    #[error("bad answer: {0}")]
    Bad(String),
}

/// A whole answer.
#[derive(Debug)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// Its body.
    pub body: Bytes,
    /// Whether the connection can carry another request.
    pub reusable: bool,
}

/// The request's bytes: line, `host`, the given headers, `content-length`, then the body.
pub fn encode(
    method: &Method,
    target: &str,
    host: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + target.len() + body.len());
    for part in [
        method.as_str(),
        " ",
        target,
        " HTTP/1.1\r\nhost: ",
        host,
        "\r\n",
    ] {
        out.extend_from_slice(part.as_bytes());
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

/// Sends `request` (from [`encode`]) on `conn` (a TCP connection, or anything that reads and
/// writes like one) and reads the whole answer; `buf` is the connection's read buffer, empty
/// between answers.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    buf: &mut Vec<u8>,
    request: &[u8],
    head_only: bool,
) -> Result<Answer, H1Error> {
    let io = |answered| move |source| H1Error::Io { source, answered };
    conn.write_all(request).await.map_err(io(false))?;
    buf.clear();
    let mut r = Reader {
        conn,
        buf,
        at: 0,
        answered: false,
    };
    loop {
        let (status, framing, close) = r.head().await?;
        if status.is_informational() {
            continue;
        }
        let no_body =
            head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        let (body, delimited) = match framing {
            _ if no_body => (Bytes::new(), true),
            Framing::Length(n) => (r.exact(n).await?, true),
            Framing::Chunked => (r.chunked().await?, true),
            Framing::Close => (r.until_close().await?, false),
        };
        let leftover = r.at < r.buf.len();
        return Ok(Answer {
            status,
            body,
            reusable: delimited && !close && !leftover,
        });
    }
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// Reads one answer out of a connection: `buf[at..]` is read but not yet used.
struct Reader<'a, S> {
    conn: &'a mut S,
    buf: &'a mut Vec<u8>,
    at: usize,
    /// Whether any byte of the answer came.
    answered: bool,
}

/// Trailer lines after a chunked body.
const MAX_TRAILERS: usize = 64;

impl<S: AsyncRead + Unpin> Reader<'_, S> {
    /// Reads more; `false` at the end of the stream. What was used is dropped first once it is
    /// more than a read's worth, so the buffer holds what is not yet used (a chunked body's
    /// framing and its trailers included).
    async fn fill(&mut self) -> Result<bool, H1Error> {
        if self.at > 8192 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        if self.buf.len() == self.buf.capacity() {
            self.buf.reserve(8192);
        }
        let answered = self.answered;
        let n = self
            .conn
            .read_buf(self.buf)
            .await
            .map_err(|source| H1Error::Io { source, answered })?;
        self.answered |= n > 0;
        Ok(n > 0)
    }

    async fn fill_or_eof(&mut self) -> Result<(), H1Error> {
        if self.fill().await? {
            return Ok(());
        }
        Err(H1Error::Io {
            source: std::io::ErrorKind::UnexpectedEof.into(),
            answered: self.answered,
        })
    }

    /// The next status line and headers: status, body framing, whether the server closes after.
    async fn head(&mut self) -> Result<(StatusCode, Framing, bool), H1Error> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&self.buf[self.at..]) {
                Ok(httparse::Status::Complete(len)) => {
                    let parsed = parse_head(&resp);
                    self.at += len;
                    return parsed;
                }
                Ok(httparse::Status::Partial) if self.buf.len() - self.at < MAX_HEAD => {}
                Ok(httparse::Status::Partial) => return Err(bad("head too large")),
                Err(e) => return Err(bad(&e.to_string())),
            }
            self.fill_or_eof().await?;
        }
    }

    /// Exactly `n` bytes.
    async fn exact(&mut self, n: usize) -> Result<Bytes, H1Error> {
        if n > MAX_BODY {
            return Err(bad("body too large"));
        }
        while self.buf.len() - self.at < n {
            self.fill_or_eof().await?;
        }
        let body = Bytes::copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(body)
    }

    /// One line ending in CRLF, without it.
    async fn line(&mut self) -> Result<Vec<u8>, H1Error> {
        loop {
            if let Some(end) = self.buf[self.at..].windows(2).position(|w| w == b"\r\n") {
                let line = self.buf[self.at..self.at + end].to_vec();
                self.at += end + 2;
                return Ok(line);
            }
            if self.buf.len() - self.at > 4096 {
                return Err(bad("chunk line too long"));
            }
            self.fill_or_eof().await?;
        }
    }

    /// A chunked body, trailers skipped.
    async fn chunked(&mut self) -> Result<Bytes, H1Error> {
        let mut body = Vec::new();
        loop {
            let line = self.line().await?;
            let size = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| l.split(';').next())
                .and_then(|hex| usize::from_str_radix(hex.trim(), 16).ok())
                .ok_or_else(|| bad("bad chunk size"))?;
            if size == 0 {
                for _ in 0..=MAX_TRAILERS {
                    if self.line().await?.is_empty() {
                        return Ok(body.into());
                    }
                }
                return Err(bad("too many trailers"));
            }
            if size > MAX_BODY - body.len() {
                return Err(bad("body too large"));
            }
            body.extend_from_slice(&self.exact(size).await?);
            if !self.line().await?.is_empty() {
                return Err(bad("chunk not followed by CRLF"));
            }
        }
    }

    /// Everything until the connection closes.
    async fn until_close(&mut self) -> Result<Bytes, H1Error> {
        while self.fill().await? {
            if self.buf.len() - self.at > MAX_BODY {
                return Err(bad("body too large"));
            }
        }
        let body = Bytes::copy_from_slice(&self.buf[self.at..]);
        self.at = self.buf.len();
        Ok(body)
    }
}

fn bad(why: &str) -> H1Error {
    H1Error::Bad(why.to_owned())
}

/// Status, framing and `connection: close` of a parsed head.
fn parse_head(resp: &httparse::Response<'_, '_>) -> Result<(StatusCode, Framing, bool), H1Error> {
    if resp.version != Some(1) {
        return Err(bad("not HTTP/1.1"));
    }
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| bad("bad status"))?;
    let (mut framing, mut close) = (Framing::Close, false);
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).map_err(|_| bad("header value not text"))?;
        if h.name.eq_ignore_ascii_case("content-length") && framing != Framing::Chunked {
            let n = value
                .trim()
                .parse()
                .map_err(|_| bad("bad content-length"))?;
            if matches!(framing, Framing::Length(m) if m != n) {
                return Err(bad("conflicting content-length"));
            }
            framing = Framing::Length(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked must be the last coding; anything else is read to the close.
            let last = value.rsplit(',').next().unwrap_or("").trim();
            framing = if last.eq_ignore_ascii_case("chunked") {
                Framing::Chunked
            } else {
                Framing::Close
            };
        } else if h.name.eq_ignore_ascii_case("connection") {
            close |= value
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("close"));
        }
    }
    Ok((status, framing, close))
}

#[cfg(test)]
mod tests;
