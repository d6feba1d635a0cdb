//! Why an HTTP/1.1 answer cannot be read: one variant per reason, its text from [`AnswerError::reason`]
//! with the number that was passed, if any.

use std::fmt;

use thiserror::Error;

/// Why an answer cannot be read. The numbers are the bound that was passed, or the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AnswerError {
    /// The status line or a header is not HTTP syntax (`httparse`'s reason).
    Malformed(httparse::Error),
    /// The answer is not HTTP/1.1 (HTTP/1.0 included: it cannot keep a connection as 1.1 does).
    Version,
    /// The status code is under 100.
    Status(u16),
    /// The head did not end within [`Limits::head`](super::Limits::head) bytes.
    HeadTooLarge(usize),
    /// A head has more than [`Limits::headers`](super::Limits::headers) headers.
    TooManyHeaders(usize),
    /// `Content-Length` is not a decimal number, or two of them disagree.
    ContentLength,
    /// A chunk-size line is not a hexadecimal size (with optional extensions).
    ChunkSize,
    /// A chunk-size or trailer line is longer than [`Limits::line`](super::Limits::line) bytes.
    LineTooLong(usize),
    /// A chunk-size or trailer line ends in a bare LF, or a chunk's data is not followed by CRLF.
    Crlf,
    /// More than [`Limits::trailers`](super::Limits::trailers) trailer lines follow a chunked body.
    TooManyTrailers(usize),
    /// The body is longer than [`Limits::body`](super::Limits::body) bytes.
    BodyTooLarge(u64),
    /// The connection ended before the answer did.
    Cut,
}

impl AnswerError {
    /// What went wrong without its numbers: the start of the error's text, for a caller that would
    /// rather not link the formatting (the shim).
    pub fn reason(&self) -> &'static str {
        match self {
            AnswerError::Malformed(_) => "malformed head",
            AnswerError::Version => "not HTTP/1.1",
            AnswerError::Status(_) => "status under 100",
            AnswerError::HeadTooLarge(_) => "head larger than its limit",
            AnswerError::TooManyHeaders(_) => "more headers than the limit",
            AnswerError::ContentLength => "bad content-length",
            AnswerError::ChunkSize => "bad chunk size",
            AnswerError::LineTooLong(_) => "chunk or trailer line longer than the limit",
            AnswerError::Crlf => "chunk not followed by CRLF",
            AnswerError::TooManyTrailers(_) => "more trailer lines than the limit",
            AnswerError::BodyTooLarge(_) => "body larger than its limit",
            AnswerError::Cut => "the connection closed before the answer's end",
        }
    }
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())?;
        match *self {
            AnswerError::Malformed(e) => write!(f, ": {e}"),
            AnswerError::Status(n) => write!(f, " ({n})"),
            AnswerError::HeadTooLarge(n)
            | AnswerError::TooManyHeaders(n)
            | AnswerError::LineTooLong(n)
            | AnswerError::TooManyTrailers(n) => write!(f, " ({n})"),
            AnswerError::BodyTooLarge(n) => write!(f, " ({n})"),
            _ => Ok(()),
        }
    }
}
