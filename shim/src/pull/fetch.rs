//! The fetch side of a pull: `GET /v1/files` on the source shim over one HTTP/1.1 connection at a
//! time (`pull/http1.rs`), resumed after a cut from the bytes received
//! with the ETag of the first response (PROTOCOL.md 4.8.1). Bytes go to the extraction as they
//! arrive, except the stream's last 1024 (its end-of-archive marker), which go only once the whole
//! stream's SHA-256 is known and matches the expected one.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use protocol::artifacts::PullSpec;
use protocol::query;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{Pull, Settings, http1};
use crate::error::Error;

/// Bytes held back from the extraction until the stream is verified: the end-of-archive marker.
const TAIL: u64 = 1024;

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a fetch that ended because the extraction stopped says (the extraction's error is the one
/// to report then).
pub const EXTRACTION_STOPPED: &str = "the extraction stopped";

/// Where a pull fetches from: `host:port`, the request target and the grant token.
#[derive(Debug, Clone)]
pub struct Source {
    addr: SocketAddr,
    authority: String,
    target: String,
    token: String,
}

impl Source {
    /// Checks a pull spec's source: `http://ip:port` (no path, no TLS, no host name).
    pub fn parse(spec: &PullSpec) -> Result<Source, Error> {
        let bad = |why: &str| Error::BadRequest(format!("source {:?}: {why}", spec.source));
        let rest = spec
            .source
            .strip_prefix("http://")
            .ok_or_else(|| bad("must start with http://"))?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty()
            || !authority.bytes().all(|b| b.is_ascii_graphic())
            || authority.contains(['/', '?', '#', '@'])
        {
            return Err(bad("must be http://host:port without a path"));
        }
        if !spec.path.starts_with('/') {
            return Err(Error::BadRequest(format!(
                "path {:?} is not absolute",
                spec.path
            )));
        }
        if spec.token.is_empty() || !spec.token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::BadRequest("token must be visible ASCII".into()));
        }
        // An IP literal: no resolver in the shim (pods address each other by IP; a host name
        // would pull musl's DNS client into the binary).
        let addr: SocketAddr = authority
            .parse()
            .map_err(|_| bad("the host must be an IP address with a port (ip:port, [ip6]:port)"))?;
        Ok(Source {
            addr,
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

/// Why one attempt ended.
enum Ended {
    /// The whole stream arrived.
    Complete,
    /// Try again from the bytes received (connection refused or cut, 503).
    Retry(String),
    /// Give up (401, 403, 404, 412, a bad answer).
    Fatal(String),
}

/// The state of the stream across attempts.
struct Stream<'a> {
    got: u64,
    total: Option<u64>,
    etag: Option<String>,
    sha: Sha256,
    tail: Vec<u8>,
    tx: &'a mpsc::Sender<io::Result<Bytes>>,
}

/// Fetches the whole stream into `tx`, resuming after cuts; `Err` says why it gave up.
pub async fn run(
    pull: &Pull,
    source: &Source,
    s: &Settings,
    tx: &mpsc::Sender<io::Result<Bytes>>,
) -> Result<(), String> {
    let mut st = Stream {
        got: 0,
        total: None,
        etag: None,
        sha: Sha256::new(),
        tail: Vec::new(),
        tx,
    };
    let mut failures = 0u32;
    loop {
        let before = st.got;
        match attempt(pull, source, s, &mut st).await {
            Ended::Complete => break,
            Ended::Fatal(why) => return Err(why),
            Ended::Retry(why) => {
                if st.got > before {
                    failures = 0;
                }
                failures += 1;
                if failures > s.retries {
                    return Err(format!(
                        "{why} (gave up after {failures} attempts without progress, STEPSHIM_PULL_RETRIES)"
                    ));
                }
                tracing::debug!(pull = %pull.id, got = st.got, cause = %why, "pull resumes");
                if st.got > 0 {
                    pull.lock().resumes += 1;
                }
                let backoff = Duration::from_millis(100 << failures.min(6)).min(MAX_BACKOFF);
                tokio::time::sleep(backoff).await;
            }
        }
    }
    let digest: String = std::mem::take(&mut st.sha)
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Some(want) = &pull.spec.sha256
        && !want.eq_ignore_ascii_case(&digest)
    {
        return Err(format!(
            "the stream's SHA-256 is {digest}, not the expected {want}"
        ));
    }
    pull.lock().sha256 = Some(digest);
    let tail = Bytes::from(std::mem::take(&mut st.tail));
    tx.send(Ok(tail))
        .await
        .map_err(|_| EXTRACTION_STOPPED.to_owned())
}

/// One connection: `GET` from `st.got` on.
async fn attempt(pull: &Pull, source: &Source, s: &Settings, st: &mut Stream<'_>) -> Ended {
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(source.addr));
    let tcp = match connect.await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Ended::Retry(format!("connecting to {}: {e}", source.authority)),
        Err(_) => return Ended::Retry(format!("connecting to {}: timed out", source.authority)),
    };
    let _ = tcp.set_nodelay(true);
    let mut target = source.target.clone();
    if st.got > 0 {
        target.push_str(&format!("&{}={}", query::OFFSET, st.got));
    }
    let bearer = format!("Bearer {}", source.token);
    let mut headers = vec![
        ("Authorization", bearer.as_str()),
        (protocol::token::PROXY_HEADER, source.token.as_str()),
    ];
    if let Some(etag) = &st.etag {
        headers.push(("If-Match", etag));
    }
    let resp = http1::get(tcp, &source.authority, &target, &headers, s.idle).await;
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) => return Ended::Retry(format!("requesting from {}: {e}", source.authority)),
    };
    let status = resp.status;
    if status != 200 {
        let body = resp.small_body(s.idle).await.unwrap_or_default();
        let message = serde_json::from_slice::<protocol::ErrorBody>(&body)
            .map(|b| format!(" ({}: {})", b.error.code, b.error.message))
            .unwrap_or_default();
        let why = format!("the source answered {status}{message}");
        return if status == 503 {
            Ended::Retry(why)
        } else {
            Ended::Fatal(why)
        };
    }
    if let Err(why) = st.check_headers(resp.etag.as_deref(), resp.stream_length) {
        return Ended::Fatal(why);
    }
    loop {
        let data = match resp.chunk(s.idle).await {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(e) => return Ended::Retry(format!("the stream was cut: {e}")),
        };
        if let Err(why) = st.take(data, pull).await {
            return Ended::Fatal(why);
        }
    }
    if Some(st.got) == st.total {
        Ended::Complete
    } else {
        Ended::Retry(format!(
            "the stream ended at byte {} of {}",
            st.got,
            st.total.unwrap_or(0)
        ))
    }
}

impl Stream<'_> {
    /// Records the first response's ETag and length; later ones must agree.
    fn check_headers(&mut self, etag: Option<&str>, total: Option<u64>) -> Result<(), String> {
        let (Some(etag), Some(total)) = (etag, total) else {
            return Err("the source sent no ETag or stream length: it cannot resume".into());
        };
        if total < TAIL || self.total.is_some_and(|t| t != total) {
            return Err(format!("the source's stream length {total} is unusable"));
        }
        if self.etag.as_deref().is_some_and(|e| e != etag) {
            return Err("the source's tree changed between two connections".into());
        }
        self.etag = Some(etag.to_owned());
        self.total = Some(total);
        Ok(())
    }

    /// Hashes and forwards `data`, holding back the last [`TAIL`] bytes of the stream.
    async fn take(&mut self, data: Bytes, pull: &Pull) -> Result<(), String> {
        let total = self.total.unwrap_or(0);
        if self.got + data.len() as u64 > total {
            return Err("the source sent more than its stream length".into());
        }
        self.sha.update(&data);
        let keep_from = total - TAIL;
        let start = self.got;
        self.got += data.len() as u64;
        {
            let mut p = pull.lock();
            p.bytes = self.got;
            p.total = Some(total);
        }
        let n = keep_from.saturating_sub(start).min(data.len() as u64) as usize;
        self.tail.extend_from_slice(&data[n..]);
        if n > 0 && self.tx.send(Ok(data.slice(..n))).await.is_err() {
            return Err(EXTRACTION_STOPPED.into());
        }
        Ok(())
    }
}
