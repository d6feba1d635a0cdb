//! The fetch side of a pull, as the `Read` the extraction consumes: `GET /v1/files` on the source shim
//! over one HTTP/1.1 connection at a time (`pull/http1.rs`), resumed after a cut from the bytes
//! already received, with `offset` and the ETag of the first response (PROTOCOL.md 4.8.1), so the
//! extraction reads one continuous stream. The stream's last 1024 bytes (its end-of-archive marker)
//! are returned only once the whole stream arrived and its SHA-256 matches the expected one.
//!
//! It runs on the pull's blocking thread, beside the extraction: no task, no channel. When it asks
//! the source again, and when it gives up, is `fetch/retry.rs`.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use protocol::artifacts::PullSpec;
use protocol::query;
use sha2::{Digest, Sha256};

use super::{Pull, Settings, http1};
use crate::error::Error;

mod retry;

/// Bytes held back from the extraction until the stream is verified: the end-of-archive marker.
const TAIL: u64 = 1024;

/// Where a pull fetches from: the address, `host:port` as sent, the request target, the token.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    addr: SocketAddr,
    wire: http1::Wire,
    authority: String,
    target: String,
    token: String,
}

impl Source {
    /// Checks a pull spec's source: exactly `http://ip:port`, or `https://ip:port` with the
    /// source's pin (no host name, no user information, and nothing after the port: not even `/`).
    pub(crate) fn parse(spec: &PullSpec) -> Result<Source, Error> {
        let bad = |why: &str| Error::BadRequest(format!("source {:?}: {why}", spec.source));
        let (authority, wire) = match spec.source.split_once("://") {
            Some(("http", rest)) if spec.source_pin.is_none() => (rest, http1::Wire::Plain),
            Some(("http", _)) => {
                return Err(Error::BadRequest(
                    "source_pin is only for an https:// source".into(),
                ));
            }
            Some(("https", rest)) => (rest, wire(spec.source_pin.as_deref())?),
            _ => return Err(bad("must start with http:// or https://")),
        };
        if authority
            .bytes()
            .any(|b| matches!(b, b'/' | b'?' | b'#' | b'@'))
        {
            return Err(bad(
                "must be http://IP:PORT: no path (not even /), query, fragment or user information",
            ));
        }
        // An IP literal: no resolver in the shim (pods address each other by IP; a host name
        // would pull musl's DNS client into the binary).
        let addr: SocketAddr = authority
            .parse()
            .map_err(|_| bad("the host must be an IP address with a port (ip:port, [ip6]:port)"))?;
        if !spec.path.starts_with('/') {
            return Err(Error::BadRequest(format!(
                "path {:?} is not absolute",
                spec.path
            )));
        }
        if spec.token.is_empty() || !spec.token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::BadRequest("token must be visible ASCII".into()));
        }
        Ok(Source {
            addr,
            wire,
            authority: authority.to_owned(),
            target: format!(
                "{}{}",
                protocol::routes::FILES,
                query::build(&[(query::PATH, &spec.path)])
            ),
            token: spec.token.clone(),
        })
    }
}

/// The TLS wire to a source pinned by `pin` (PROTOCOL.md 1.1).
#[cfg(feature = "tls")]
fn wire(pin: Option<&str>) -> Result<http1::Wire, Error> {
    let pin: stepshim_tls::Pin = pin
        .ok_or_else(|| Error::BadRequest("an https:// source needs source_pin".into()))?
        .parse()
        .map_err(|_| Error::BadRequest("source_pin must be 64 hex digits".into()))?;
    let config = stepshim_tls::client_config(pin)
        .map_err(|e| Error::BadRequest(format!("source_pin: {e}")))?;
    Ok(http1::Wire::Tls(config))
}

/// A build without TLS pulls only from `http://` sources.
#[cfg(not(feature = "tls"))]
fn wire(_pin: Option<&str>) -> Result<http1::Wire, Error> {
    Err(Error::BadRequest(
        "this stepshim was built without TLS: it pulls only from http:// sources".into(),
    ))
}

/// What one request to the source came to.
enum Attempt {
    /// The source answered the stream: read it.
    Connected,
    /// Nothing another request could change (a refusal, another tree): the pull fails.
    GiveUp(String),
    /// A failure another request may not meet (a cut connection, a source that is not there).
    Retry(String),
    /// The source is there and its transfer slots are all taken (503): waited out, not a retry.
    Busy(String),
}

/// The stream across connections, read by the extraction.
pub(crate) struct Fetch<'a> {
    pull: &'a Pull,
    source: &'a Source,
    s: &'a Settings,
    /// Buffered itself: the extraction reads headers 512 bytes at a time.
    conn: Option<http1::Response>,
    got: u64,
    total: Option<u64>,
    etag: Option<String>,
    sha: Sha256,
    tail: Vec<u8>,
    /// Tail bytes already returned, once verified.
    tail_out: Option<usize>,
    /// Connection attempts in a row without a byte of progress.
    failures: u32,
    /// Since when the source has answered nothing but 503 (busy), if it does.
    busy_since: Option<std::time::Instant>,
    /// Why the fetch gave up (the extraction then fails with this as its read error).
    pub(crate) failure: Option<String>,
}

impl<'a> Fetch<'a> {
    /// A fetch that connects on its first read.
    pub(crate) fn new(pull: &'a Pull, source: &'a Source, s: &'a Settings) -> Self {
        Fetch {
            pull,
            source,
            s,
            conn: None,
            got: 0,
            total: None,
            etag: None,
            sha: Sha256::new(),
            tail: Vec::new(),
            tail_out: None,
            failures: 0,
            busy_since: None,
            failure: None,
        }
    }

    /// Records why the fetch gave up and returns it as a read error.
    fn fail(&mut self, why: String) -> io::Error {
        let e = io::Error::other(why.clone());
        self.failure.get_or_insert(why);
        e
    }

    /// One request to the source, and what came of it.
    fn attempt(&mut self) -> Attempt {
        let mut target = self.source.target.clone();
        if self.got > 0 {
            target.push_str(&format!("&{}={}", query::OFFSET, self.got));
        }
        let bearer = format!("Bearer {}", self.source.token);
        let mut headers = vec![
            ("Authorization", bearer.as_str()),
            (protocol::token::PROXY_HEADER, self.source.token.as_str()),
        ];
        if let Some(etag) = &self.etag {
            headers.push(("If-Match", etag));
        }
        let pull = self.pull;
        let (a, auth) = (self.source.addr, &self.source.authority);
        let wire = &self.source.wire;
        let resp = match http1::get(a, wire, auth, &target, &headers, self.s.idle, |tcp| {
            *pull.socket.lock().unwrap_or_else(|e| e.into_inner()) = tcp.try_clone().ok();
        }) {
            Ok(resp) => resp,
            // Another key answered: retrying cannot change that.
            Err(e) if http1::is_refusal(&e) => {
                self.pull.lock().reached = true;
                return Attempt::GiveUp(format!("refused the source {auth}: {e}"));
            }
            Err(e) => return Attempt::Retry(format!("requesting from {auth}: {e}")),
        };
        self.pull.lock().reached = true;
        if resp.status != 200 {
            let status = resp.status;
            // The error body as sent (JSON with code and message), not parsed: a JSON
            // deserializer for it would cost the binary more than it says.
            let mut body = resp.small_body();
            body.truncate(512);
            let body = String::from_utf8_lossy(&body);
            let why = format!("the source answered {status}: {}", body.trim());
            return if status == 503 {
                Attempt::Busy(why)
            } else {
                Attempt::GiveUp(why)
            };
        }
        let (Some(etag), Some(total)) = (resp.etag.clone(), resp.stream_length) else {
            return Attempt::GiveUp(
                "the source sent no ETag or stream length: it cannot resume".into(),
            );
        };
        if total < TAIL || self.total.is_some_and(|t| t != total) {
            return Attempt::GiveUp(format!("the source's stream length {total} is unusable"));
        }
        if self.etag.as_deref().is_some_and(|e| e != etag) {
            return Attempt::GiveUp("the source's tree changed between two connections".into());
        }
        if self.got > 0 {
            self.pull.lock().resumes += 1;
            self.pull.counters.resumes.fetch_add(1, Ordering::Relaxed);
        }
        self.etag = Some(etag);
        self.total = Some(total);
        self.pull.lock().total = Some(total);
        self.conn = Some(resp);
        Attempt::Connected
    }

    /// Reads stream bytes into `buf` (never past `limit` of the stream), hashing them; a failed
    /// connection is dropped and `Ok(0)` asks the caller to try again.
    fn receive(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(conn) = &mut self.conn else {
            self.connect()?;
            return Ok(0);
        };
        match conn.read(buf) {
            Ok(0) | Err(_) if self.pull.cancelled.load(Ordering::Acquire) => {
                Err(self.fail("cancelled".into()))
            }
            Ok(0) => {
                self.conn = None;
                Ok(0)
            }
            Ok(n) => {
                self.sha.update(&buf[..n]);
                self.got += n as u64;
                self.failures = 0;
                self.pull.lock().bytes = self.got;
                self.pull
                    .counters
                    .bytes
                    .fetch_add(n as u64, Ordering::Relaxed);
                Ok(n)
            }
            Err(e) => {
                crate::debug!(pull = %self.pull.id, cause = %e, "the stream was cut");
                self.conn = None;
                self.failures += 1;
                if self.failures > self.s.retries {
                    return Err(self.fail(format!("the stream was cut: {e}")));
                }
                Ok(0)
            }
        }
    }

    /// Once everything arrived: checks the digest (once) and hands out the held-back tail.
    fn finish(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let at = match self.tail_out {
            Some(at) => at,
            None => {
                self.conn = None;
                let digest: String = std::mem::take(&mut self.sha)
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                if let Some(want) = &self.pull.spec.sha256
                    && !want.eq_ignore_ascii_case(&digest)
                {
                    let why = format!("the stream's SHA-256 is {digest}, not the expected {want}");
                    return Err(self.fail(why));
                }
                self.pull.lock().sha256 = Some(digest);
                0
            }
        };
        let n = buf.len().min(self.tail.len() - at);
        buf[..n].copy_from_slice(&self.tail[at..at + n]);
        self.tail_out = Some(at + n);
        Ok(n)
    }
}

impl Read for Fetch<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // Bounded: each pass either returns, makes progress or counts a failure.
        loop {
            if let Some(total) = self.total {
                let keep_from = total - TAIL;
                if self.got == total {
                    return self.finish(buf);
                }
                if self.got >= keep_from {
                    let mut tmp = [0u8; TAIL as usize];
                    let want = (total - self.got) as usize;
                    let n = self.receive(&mut tmp[..want])?;
                    self.tail.extend_from_slice(&tmp[..n]);
                    continue;
                }
                let want = buf.len().min((keep_from - self.got) as usize);
                let n = self.receive(&mut buf[..want])?;
                if n > 0 {
                    return Ok(n);
                }
            } else {
                self.connect()?;
            }
        }
    }
}
