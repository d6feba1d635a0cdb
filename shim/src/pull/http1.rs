//! The one HTTP/1.1 request a pull makes, blocking on the pull's own thread: `GET` with a few
//! headers, the answer read by the project's answer reader (`protocol::http1`, on `httparse`, which
//! the server side already links) out of a buffer that also serves the extraction's small reads.
//! No pool, no redirects, no async state machine: a few kilobytes of binary instead of a general
//! client.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::Duration;

use protocol::http1::{AnswerError, AnswerReader, Event, Limits};

/// The answer reader's bounds: the default ones with a head of at most 16 KiB.
const LIMITS: Limits = Limits {
    head: 16 << 10,
    ..Limits::DEFAULT
};

/// Bytes read from the socket at once, and held for the extraction (which reads 512 at a time).
const BUFFER: usize = 256 << 10;

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A response: its status, the headers a pull reads, and the body still to read (as `Read`: an
/// error, never a clean end, if the connection ends before a delimited body does).
#[derive(Debug)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// `ETag`.
    pub etag: Option<String>,
    /// `X-Stepshim-Stream-Length`.
    pub stream_length: Option<u64>,
    conn: Conn,
    reader: AnswerReader,
    /// Bytes received; `buf[at..end]` not yet used.
    buf: Box<[u8]>,
    at: usize,
    end: usize,
}

/// The connection: TCP, or TLS over it (PROTOCOL.md 1.1) for an `https://` source.
enum Conn {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<stepshim_tls::rustls::StreamOwned<stepshim_tls::rustls::ClientConnection, TcpStream>>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Conn")
    }
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(t) => t,
            #[cfg(feature = "tls")]
            Conn::Tls(s) => &s.sock,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(t) => t.read(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(t) => t.write(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(t) => t.flush(),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// How a pull reaches its source: plain TCP, or TLS with this client configuration (the pin).
#[derive(Debug, Clone)]
pub enum Wire {
    /// `http://`.
    Plain,
    /// `https://`, the source's key pinned.
    #[cfg(feature = "tls")]
    Tls(Arc<stepshim_tls::rustls::ClientConfig>),
}

/// Whether `e` is a refusal of the source's TLS identity (not the pinned key), which no retry
/// can mend.
pub fn is_refusal(e: &io::Error) -> bool {
    #[cfg(feature = "tls")]
    if let Some(stepshim_tls::rustls::Error::InvalidCertificate(_)) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<stepshim_tls::rustls::Error>())
    {
        return true;
    }
    let _ = e;
    false
}

/// Connects to `addr`, sends `GET target` with `headers` and reads the response head; every read
/// and write may take at most `idle`. `on_connect` gets a handle that can shut the socket down
/// (to cancel a pull blocked in a read).
pub fn get(
    addr: SocketAddr,
    wire: &Wire,
    authority: &str,
    target: &str,
    headers: &[(&str, &str)],
    idle: Duration,
    on_connect: impl FnOnce(&TcpStream),
) -> io::Result<Response> {
    let tcp = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    on_connect(&tcp);
    tcp.set_read_timeout(Some(idle))?;
    tcp.set_write_timeout(Some(idle))?;
    let _ = tcp.set_nodelay(true);
    let mut conn = match wire {
        Wire::Plain => Conn::Plain(tcp),
        #[cfg(feature = "tls")]
        Wire::Tls(config) => {
            let client = stepshim_tls::rustls::ClientConnection::new(
                config.clone(),
                stepshim_tls::server_name(),
            )
            .map_err(io::Error::other)?;
            Conn::Tls(Box::new(stepshim_tls::rustls::StreamOwned::new(
                client, tcp,
            )))
        }
    };
    let mut head = format!("GET {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.flush()?;
    let mut r = Response {
        status: 0,
        etag: None,
        stream_length: None,
        conn,
        reader: AnswerReader::new(LIMITS, false),
        buf: vec![0; BUFFER].into_boxed_slice(),
        at: 0,
        end: 0,
    };
    loop {
        let (used, event) = r.next(0)?;
        if let Event::Head(head) = event {
            let value = |name| head.header(name).and_then(|v| std::str::from_utf8(v).ok());
            let status = head.status;
            let etag = value("etag").map(str::to_owned);
            let length =
                value(protocol::artifacts::STREAM_LENGTH_HEADER).and_then(|v| v.parse().ok());
            (r.status, r.etag, r.stream_length) = (status, etag, length);
            r.at += used;
            return Ok(r);
        }
        r.at += used;
        if !r.fill()? {
            return Err(text(AnswerError::Cut));
        }
    }
}

/// A reader's error as an I/O error, by its reason: its formatting would cost the binary more than
/// it tells.
fn text(e: AnswerError) -> io::Error {
    io::Error::other(e.reason())
}

impl Response {
    /// The whole (small) body, e.g. an error's JSON, at most 64 KiB.
    pub fn small_body(self) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = self.take(64 << 10).read_to_end(&mut out);
        out
    }

    /// The reader's next event from the bytes not yet used (body bytes: at most `max`).
    fn next(&mut self, max: usize) -> io::Result<(usize, Event<'_>)> {
        let input = &self.buf[self.at..self.end];
        self.reader.read(input, max).map_err(text)
    }

    /// Reads more after the bytes not yet used (moved to the front); `false` at the stream's end.
    fn fill(&mut self) -> io::Result<bool> {
        self.buf.copy_within(self.at..self.end, 0);
        (self.end, self.at) = (self.end - self.at, 0);
        let n = self.conn.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n > 0)
    }
}

impl Read for Response {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            let (used, event) = self.next(out.len())?;
            match event {
                Event::Body(bytes) => {
                    let n = bytes.len();
                    out[..n].copy_from_slice(bytes);
                    self.at += used;
                    return Ok(n);
                }
                Event::Need => self.at += used,
                // The end (the reader yields one head per answer).
                _ => return Ok(0),
            }
            if !self.fill()? {
                self.reader.eof().map_err(text)?;
                return Ok(0);
            }
        }
    }
}

impl Drop for Response {
    fn drop(&mut self) {
        let _ = self.conn.tcp().shutdown(Shutdown::Both);
    }
}
