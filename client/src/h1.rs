//! One request with its body in memory, whole answer wanted, over a kept-alive HTTP/1.1 connection
//! written and read here: the head and body in one write, the answer read into one buffer and
//! decoded by the project's one answer reader ([`protocol::http1`]). This is the path of every JSON
//! call ([`crate::Direct`] sends streams through hyper): side by side on loopback, a spawn through
//! hyper's client took about 45 us more than the same exchange written by hand on the same runtime.
//! Answers are bounded ([`MAX_HEAD`], [`MAX_BODY`]).

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use protocol::http1::{AnswerError, AnswerReader, Event, Framing, Limits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes of an answer's status line and headers.
pub const MAX_HEAD: usize = 64 * 1024;
/// Bytes of an answer's body: the largest answers of a shim at its defaults are under 3 MiB (the
/// Go client's `DefaultMaxAnswerBytes` says how they add up); this leaves room for shims configured
/// for many more processes. Every [`crate::Transport`] reads JSON answers within it.
pub const MAX_BODY: usize = 64 << 20;
/// Bytes of an error answer's body kept: the shim's are well under 1 KiB. A longer one is cut
/// there and its connection closed.
pub const MAX_ERROR_BODY: usize = 64 << 10;

/// The reader's bounds: the default ones (64 headers, 4 KiB chunk lines, 64 trailer lines) with
/// this client's head and body.
const LIMITS: Limits = Limits {
    head: MAX_HEAD,
    body: MAX_BODY as u64,
    ..Limits::DEFAULT
};

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
    /// The answer is not HTTP/1.1 as the reader understands it, or too large.
    #[error("bad answer: {0}")]
    Bad(#[from] AnswerError),
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
/// writes like one) and reads the whole answer with [`protocol::http1::AnswerReader`]; `buf` is the
/// connection's read buffer, empty between answers.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    buf: &mut Vec<u8>,
    request: &[u8],
    head_only: bool,
) -> Result<Answer, H1Error> {
    // A TLS stream may keep the request's last records buffered after `write_all` (when the
    // socket would block): only a flush sends them, or both sides wait for ever.
    let sent = async {
        conn.write_all(request).await?;
        conn.flush().await
    };
    sent.await.map_err(|source| H1Error::Io {
        source,
        answered: false,
    })?;
    buf.clear();
    let mut reader = AnswerReader::new(LIMITS, head_only);
    // `buf[at..]` is read but not yet used; `answered`: whether any byte of the answer came.
    let (mut at, mut answered) = (0, false);
    let (mut status, mut body) = (StatusCode::OK, Vec::new());
    loop {
        let (used, event) = reader.read(&buf[at..], usize::MAX)?;
        at += used;
        match event {
            Event::Head(head) => {
                status = StatusCode::from_u16(head.status)
                    .map_err(|_| AnswerError::Status(head.status))?;
                // Room for the promised body, within reason until its bytes come.
                if let Framing::Length(n) = head.framing {
                    body.reserve_exact(n.min(1 << 20) as usize);
                }
            }
            Event::Body(bytes)
                if !status.is_success() && body.len() + bytes.len() > MAX_ERROR_BODY =>
            {
                body.extend_from_slice(&bytes[..MAX_ERROR_BODY - body.len()]);
                return Ok(Answer {
                    status,
                    body: body.into(),
                    reusable: false,
                });
            }
            Event::Body(bytes) => body.extend_from_slice(bytes),
            Event::End { reusable } => {
                return Ok(Answer {
                    status,
                    body: body.into(),
                    reusable: reusable && at == buf.len(),
                });
            }
            Event::Need => {
                if fill(conn, buf, &mut at, &mut answered).await? {
                    continue;
                }
                reader.eof().map_err(|_| H1Error::Io {
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                    answered,
                })?;
                return Ok(Answer {
                    status,
                    body: body.into(),
                    reusable: false,
                });
            }
        }
    }
}

/// Reads more into `buf`; `false` at the end of the stream. What was used (`buf[..at]`) is dropped
/// first once it is more than a read's worth, so the buffer holds what is not yet used (a chunked
/// body's framing and its trailers included).
async fn fill<S: AsyncRead + Unpin>(
    conn: &mut S,
    buf: &mut Vec<u8>,
    at: &mut usize,
    answered: &mut bool,
) -> Result<bool, H1Error> {
    if *at > 8192 {
        buf.drain(..*at);
        *at = 0;
    }
    if buf.len() == buf.capacity() {
        buf.reserve(8192);
    }
    let n = conn.read_buf(buf).await.map_err(|source| H1Error::Io {
        source,
        answered: *answered,
    })?;
    *answered |= n > 0;
    Ok(n > 0)
}

#[cfg(test)]
mod tests;
