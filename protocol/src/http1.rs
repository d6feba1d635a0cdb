//! The one HTTP/1.1 answer reader of the project, with no I/O: [`AnswerReader`] is fed the bytes a
//! connection delivered, in any split, and yields the answer's head (status and headers, parsed by
//! `httparse`), then its body bytes as framed by `Content-Length`, chunked coding (trailers read and
//! dropped) or the connection's end, then its end and whether the connection can carry another
//! request. Interim (1xx) answers are skipped; answers to `HEAD` and 204 and 304 answers have no
//! body. Every part is bounded ([`Limits`]) and the outcome never depends on how the input was split:
//! a head or line is judged only within its limit.
//!
//! The callers own the connection and the buffer: the Rust client's JSON calls, the shim's pull
//! client, and the tests' raw requests.

mod error;

pub use error::AnswerError;

/// Header slots for one head: the most [`Limits::headers`] can allow.
pub const MAX_HEADERS: usize = 64;

/// Bounds on what an answer may make its reader hold or wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of a status line with its headers and blank line.
    pub head: usize,
    /// Headers of one head (at most [`MAX_HEADERS`]).
    pub headers: usize,
    /// Bytes of a chunk-size line or a trailer line, without its CRLF.
    pub line: usize,
    /// Trailer lines after a chunked body.
    pub trailers: usize,
    /// Bytes of a body, all its chunks together.
    pub body: u64,
}

impl Limits {
    /// 64 KiB of head, 64 headers, 4 KiB lines, 64 trailer lines, no bound on the body.
    pub const DEFAULT: Limits = Limits {
        head: 64 << 10,
        headers: MAX_HEADERS,
        line: 4096,
        trailers: 64,
        body: u64::MAX,
    };
}

impl Default for Limits {
    /// [`Limits::DEFAULT`].
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// How the body of an answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: an answer to `HEAD`, or a 204 or 304.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked coding (the last of its `Transfer-Encoding`).
    Chunked,
    /// Everything until the connection closes (no length, or a coding other than chunked last).
    Close,
}

/// A final answer's status line and headers, borrowed from the input.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    /// The status code (200 to 999).
    pub status: u16,
    /// How the body ends.
    pub framing: Framing,
    /// Whether the answer says `Connection: close`.
    pub close: bool,
    /// The head's bytes as received from its status line (empty lines before it are skipped) up to
    /// and including its blank line.
    pub raw: &'a [u8],
}

impl<'a> Head<'a> {
    /// The first header called `name` (any case), its value without surrounding whitespace.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        // A loop, not `headers()`: the shim looks headers up, and this is the smaller code.
        for line in self.raw.split(|&b| b == b'\n').skip(1) {
            if let Some(colon) = line.iter().position(|&b| b == b':')
                && line[..colon].eq_ignore_ascii_case(name.as_bytes())
            {
                return Some(line[colon + 1..].trim_ascii());
            }
        }
        None
    }

    /// Every header in order: its name as received and its value without surrounding whitespace.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + use<'a> {
        // After the status line, each line is a name, a colon and a value (`httparse` checked
        // them); the blank line has no colon.
        self.raw.split(|&b| b == b'\n').skip(1).filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let name = std::str::from_utf8(&line[..colon]).ok()?;
            Some((name, line[colon + 1..].trim_ascii()))
        })
    }
}

/// What the input gave.
#[derive(Debug)]
pub enum Event<'a> {
    /// Nothing more can be told without more input (or [`AnswerReader::eof`] if the connection
    /// ended).
    Need,
    /// The final answer's head.
    Head(Head<'a>),
    /// Body bytes, never empty.
    Body(&'a [u8]),
    /// The answer is whole; `reusable`: its end was delimited and it did not say `Connection:
    /// close`, so the next answer can follow on the connection.
    End {
        /// Whether the connection can carry another request.
        reusable: bool,
    },
}

/// Where the reader is in one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    /// `Content-Length` bytes still to come.
    Length(u64),
    /// A chunk-size line next.
    Size,
    /// Bytes of the current chunk still to come.
    Chunk(u64),
    /// The CRLF after a chunk's data next.
    ChunkEnd,
    /// Trailer lines so far.
    Trailers(usize),
    UntilClose,
    /// Whole; whether reusable.
    Done(bool),
}

/// Reads one answer. A new reader for each request: whether it was `HEAD` decides the body.
#[derive(Debug, Clone)]
pub struct AnswerReader {
    limits: Limits,
    head_request: bool,
    state: State,
    /// Body bytes so far.
    body: u64,
    close: bool,
}

impl AnswerReader {
    /// A reader of the answer to a request, `HEAD` or not.
    pub fn new(limits: Limits, head_request: bool) -> Self {
        AnswerReader {
            limits,
            head_request,
            state: State::Head,
            body: 0,
            close: false,
        }
    }

    /// The next event from `input`, the bytes received and not yet used, and how many of them it
    /// used: the caller drops those and calls again with the rest (and more). A [`Event::Body`] is at
    /// most `max` bytes (and at least one). After [`Event::End`], the bytes left belong to what
    /// follows the answer.
    pub fn read<'a>(
        &mut self,
        input: &'a [u8],
        max: usize,
    ) -> Result<(usize, Event<'a>), AnswerError> {
        let (mut used, max) = (0, max.max(1));
        loop {
            let rest = &input[used..];
            let (n, event) = match self.state {
                State::Head => match self.head(rest)? {
                    None => (0, Event::Need),
                    Some((len, head)) if head.status < 200 => (len, Event::Need),
                    Some((len, head)) => (len, Event::Head(head)),
                },
                State::Done(reusable) => (0, Event::End { reusable }),
                State::Length(0) => {
                    self.state = State::Done(!self.close);
                    (
                        0,
                        Event::End {
                            reusable: !self.close,
                        },
                    )
                }
                State::Length(left) | State::Chunk(left) if !rest.is_empty() => {
                    let n = rest.len().min(max).min(left.min(max as u64) as usize);
                    self.state = match self.state {
                        State::Length(_) => State::Length(left - n as u64),
                        _ if n as u64 == left => State::ChunkEnd,
                        _ => State::Chunk(left - n as u64),
                    };
                    (n, Event::Body(&rest[..n]))
                }
                State::UntilClose if !rest.is_empty() => {
                    let n = rest.len().min(max);
                    self.count(n as u64)?;
                    (n, Event::Body(&rest[..n]))
                }
                State::Length(_) | State::Chunk(_) | State::UntilClose => (0, Event::Need),
                State::Size | State::ChunkEnd | State::Trailers(_) => match self.framing(rest)? {
                    Some(n) => (n, Event::Need),
                    None => return Ok((used, Event::Need)),
                },
            };
            used += n;
            // Interim heads and framing lines are used up here; go on with what follows them.
            if !matches!(event, Event::Need) || n == 0 {
                return Ok((used, event));
            }
        }
    }

    /// The connection ended: `Ok` if that ends the answer (a body read until the close, or an
    /// answer already whole), else [`AnswerError::Cut`].
    pub fn eof(&mut self) -> Result<(), AnswerError> {
        match self.state {
            State::UntilClose => {
                self.state = State::Done(false);
                Ok(())
            }
            State::Done(_) => Ok(()),
            _ => Err(AnswerError::Cut),
        }
    }

    /// Adds `n` body bytes to the count, within the limit.
    fn count(&mut self, n: u64) -> Result<(), AnswerError> {
        match self.body.checked_add(n) {
            Some(total) if total <= self.limits.body => {
                self.body = total;
                Ok(())
            }
            _ => Err(AnswerError::BodyTooLarge(self.limits.body)),
        }
    }

    /// A whole head at the start of `rest` and its length, or `None` for more input. A final head
    /// sets the body's state.
    fn head<'a>(&mut self, rest: &'a [u8]) -> Result<Option<(usize, Head<'a>)>, AnswerError> {
        let limit = self.limits.head;
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let slots = &mut slots[..self.limits.headers.min(MAX_HEADERS)];
        let mut resp = httparse::Response::new(slots);
        let len = match resp.parse(&rest[..rest.len().min(limit)]) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if rest.len() < limit => return Ok(None),
            Ok(httparse::Status::Partial) => return Err(AnswerError::HeadTooLarge(limit)),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(AnswerError::TooManyHeaders(self.limits.headers));
            }
            Err(e) => return Err(AnswerError::Malformed(e)),
        };
        if resp.version != Some(1) {
            return Err(AnswerError::Version);
        }
        let status = resp.code.unwrap_or(0);
        if status < 100 {
            return Err(AnswerError::Status(status));
        }
        // `httparse` skips empty lines (CRLF or LF) before the status line.
        let from = rest
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        let mut head = Head {
            status,
            framing: Framing::Close,
            close: false,
            raw: &rest[from..len],
        };
        // Chunked coding last wins over agreeing `Content-Length`s; neither: until the close.
        let mut coded = false;
        for h in resp.headers.iter() {
            let (name, value) = (h.name.as_bytes(), h.value.trim_ascii());
            if name.eq_ignore_ascii_case(b"transfer-encoding") {
                let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
                coded = true;
                head.framing = if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                    Framing::Chunked
                } else {
                    Framing::Close
                };
            } else if name.eq_ignore_ascii_case(b"content-length") {
                let n = number(value, 10).ok_or(AnswerError::ContentLength)?;
                match head.framing {
                    _ if coded => {}
                    Framing::Length(m) if m != n => return Err(AnswerError::ContentLength),
                    _ => head.framing = Framing::Length(n),
                }
            } else if name.eq_ignore_ascii_case(b"connection") {
                head.close |= value
                    .split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
            }
        }
        if status >= 200 {
            self.start(&mut head)?;
        }
        Ok(Some((len, head)))
    }

    /// Sets the body's state from a final head, `Framing::None` when there is no body.
    fn start(&mut self, head: &mut Head<'_>) -> Result<(), AnswerError> {
        if self.head_request || head.status == 204 || head.status == 304 {
            head.framing = Framing::None;
        }
        self.close = head.close;
        self.state = match head.framing {
            Framing::None => State::Length(0),
            Framing::Length(n) => {
                self.count(n)?;
                State::Length(n)
            }
            Framing::Chunked => State::Size,
            Framing::Close => State::UntilClose,
        };
        Ok(())
    }

    /// A chunk-size line, a chunk's CRLF or a trailer line at the start of `rest`: the bytes it
    /// took, or `None` for more input.
    fn framing(&mut self, rest: &[u8]) -> Result<Option<usize>, AnswerError> {
        if self.state == State::ChunkEnd {
            return match rest {
                [b'\r', b'\n', ..] => {
                    self.state = State::Size;
                    Ok(Some(2))
                }
                [] | [b'\r'] => Ok(None),
                _ => Err(AnswerError::Crlf),
            };
        }
        let Some((line, n)) = line(rest, self.limits.line)? else {
            return Ok(None);
        };
        self.state = match self.state {
            State::Size => match chunk_size(line).ok_or(AnswerError::ChunkSize)? {
                0 => State::Trailers(0),
                size => {
                    self.count(size)?;
                    State::Chunk(size)
                }
            },
            _ if line.is_empty() => State::Done(!self.close),
            State::Trailers(t) if t < self.limits.trailers => State::Trailers(t + 1),
            _ => return Err(AnswerError::TooManyTrailers(self.limits.trailers)),
        };
        Ok(Some(n))
    }
}

/// A line ending in CRLF at the start of `rest`, without it, and its length with it; `None` if
/// `rest` ends first. Only the first `limit` + 2 bytes are looked at.
fn line(rest: &[u8], limit: usize) -> Result<Option<(&[u8], usize)>, AnswerError> {
    let window = &rest[..rest.len().min(limit.saturating_add(2))];
    match window.iter().position(|&b| b == b'\n') {
        Some(lf) if lf > 0 && rest[lf - 1] == b'\r' => Ok(Some((&rest[..lf - 1], lf + 1))),
        Some(_) => Err(AnswerError::Crlf),
        None if window.len() == limit.saturating_add(2) => Err(AnswerError::LineTooLong(limit)),
        None => Ok(None),
    }
}

/// A chunk-size line's size: hexadecimal digits, optional whitespace, then `;` extensions.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
    number(digits.trim_ascii(), 16)
}

/// Digits of `radix` (at least one, nothing else) as a number, `None` past `u64::MAX`.
fn number(digits: &[u8], radix: u32) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(u64::from(radix))?
            .checked_add(u64::from(char::from(d).to_digit(radix)?))
    })
}

#[cfg(test)]
mod tests;
