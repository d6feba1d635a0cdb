//! How a request reaches a shim. [`ShimClient`](crate::ShimClient) builds protocol requests (path,
//! query, token header, body) and hands each to a [`Transport`], which sends it and returns the
//! answer with a streaming body. [`Direct`] is a connection pool to the shim's own address; other
//! transports (the controller's way through the apiserver's `pods/proxy`) live with whoever owns
//! their credentials, so this crate knows nothing of Kubernetes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as _;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::stream::{Connector, Stream};

/// Any error a transport or a body stream reports.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A request body: streamed, so a tar of any size goes out as it is produced.
pub type ReqBody = BoxBody<Bytes, std::io::Error>;
/// A response body: streamed, so output follows and tars come in as the shim writes them.
pub type RespBody = BoxBody<Bytes, BoxError>;
/// What [`Transport::send`] returns.
pub type SendFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Response<RespBody>, BoxError>> + Send + 'a>>;
/// What [`Transport::exchange`] returns: the answer's status and whole body.
pub type ExchangeFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(StatusCode, Bytes), BoxError>> + Send + 'a>>;

/// Sends one HTTP request to a shim. The request's URI is the client's base joined with the
/// route's path and query: an absolute `http://` URL for [`Direct`], whatever the transport
/// expects otherwise (a path under the apiserver for the proxy). Errors of the send itself
/// (connect, TLS, a broken connection before the answer's head) come back as `Err`; any HTTP
/// answer, error statuses included, is `Ok`.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Sends `req` and returns the answer's head with its body still streaming.
    fn send(&self, req: Request<ReqBody>) -> SendFuture<'_>;

    /// Sends `req`, whose body is in memory, and returns the answer's status and whole body: the
    /// JSON calls. By default through [`Transport::send`]; errors as there, and a body that breaks
    /// off is an error too. A body over [`crate::h1::MAX_BODY`] is [`BodyTooLarge`]; an error
    /// answer's body is cut at [`crate::h1::MAX_ERROR_BODY`].
    fn exchange(&self, req: Request<Bytes>) -> ExchangeFuture<'_> {
        Box::pin(async move {
            let resp = self.send(req.map(full_body)).await?;
            let status = resp.status();
            let body = if status.is_success() {
                read_bounded(resp.into_body(), crate::h1::MAX_BODY)
                    .await?
                    .ok_or(BodyTooLarge(crate::h1::MAX_BODY as u64))?
            } else {
                read_cut(resp.into_body(), crate::h1::MAX_ERROR_BODY).await?
            };
            Ok((status, body))
        })
    }
}

/// A body went past [`crate::h1::MAX_BODY`] (its bound in bytes): what [`Transport::exchange`]
/// returns for it.
#[derive(Debug, thiserror::Error)]
#[error("answer body over {0} bytes")]
pub struct BodyTooLarge(pub u64);

/// The whole of `body` if it is at most `limit` bytes, else `None` once more has come (the rest is
/// not read: dropping the body closes its connection).
pub async fn read_bounded(mut body: RespBody, limit: usize) -> Result<Option<Bytes>, BoxError> {
    // An announced length over the bound is refused before any byte is read.
    if body.size_hint().lower() > limit as u64 {
        return Ok(None);
    }
    let mut parts = Vec::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            len += data.len();
            if len > limit {
                return Ok(None);
            }
            parts.push(data);
        }
    }
    Ok(Some(protocol::frame::concat(parts)))
}

/// The first `limit` bytes of `body` (all of it if shorter); the rest is not read.
pub async fn read_cut(mut body: RespBody, limit: usize) -> Result<Bytes, BoxError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            let take = data.len().min(limit - out.len());
            out.extend_from_slice(&data[..take]);
            if out.len() == limit {
                break;
            }
        }
    }
    Ok(out.into())
}

/// A request body of bytes in memory.
pub fn full_body(b: Bytes) -> ReqBody {
    Full::new(b).map_err(|never| match never {}).boxed()
}

/// Which header carries the shim's token (PROTOCOL.md section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenHeader {
    /// `Authorization: Bearer <token>`: direct connections.
    Bearer,
    /// `X-Stepshim-Token: <token>`: through a proxy that keeps `Authorization` for itself, like
    /// the apiserver's `pods/proxy`.
    Proxy,
}

impl TokenHeader {
    /// The header name and value for `token`; `None` for a token that is not a valid header value.
    pub fn pair(self, token: &str) -> Option<(HeaderName, HeaderValue)> {
        let (name, value) = match self {
            TokenHeader::Bearer => (header::AUTHORIZATION, format!("Bearer {token}")),
            TokenHeader::Proxy => (
                HeaderName::from_static(protocol::token::PROXY_HEADER),
                token.to_owned(),
            ),
        };
        let mut value = HeaderValue::from_str(&value).ok()?;
        value.set_sensitive(true);
        Some((name, value))
    }
}

/// Plain HTTP/1.1 to the shim's address, with a pool of kept-alive connections: hyper's own
/// connection API under a list of idle senders. A request takes an idle connection to its
/// authority that can send at once, or opens one; the connection goes back to the list as soon as
/// the answer's head is in (it can carry the next request once that answer's body is read).
/// Lighter per request than hyper-util's pooled client it replaced (no pool key, no readiness
/// task per request): side by side, `/healthz` 1.2 µs faster in 8 of 8 alternating runs and 6 µs
/// faster right after another process ran (7 of 8).
///
/// JSON calls ([`Transport::exchange`]) go on connections of their own, written and read by
/// [`crate::h1`] (about 45 us less per spawn on loopback than through hyper).
#[derive(Clone)]
pub struct Direct {
    pool: Arc<Mutex<Vec<Idle>>>,
    raw: Arc<Mutex<Vec<RawIdle>>>,
    connect_timeout: Duration,
    connector: Connector,
}

/// A kept-alive connection of [`Transport::exchange`], its read buffer, and the `host:port` it
/// reaches.
struct RawIdle {
    key: String,
    conn: Stream,
    buf: Vec<u8>,
}

/// Idle exchange connections kept across all authorities; more are closed.
const MAX_RAW_IDLE: usize = 16;

/// A kept-alive connection and the authority it reaches.
struct Idle {
    authority: String,
    sender: http1::SendRequest<ReqBody>,
}

impl fmt::Debug for Direct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Direct").finish_non_exhaustive()
    }
}

impl Direct {
    /// A pool of plain connections (`http://`) whose connection attempts give up after
    /// `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Self {
        Self::with_connector(connect_timeout, Connector::Plain)
    }

    /// A pool of TLS connections (`https://`) to the shim whose key is `pin` (PROTOCOL.md 1.1):
    /// a server whose handshake that key did not sign is refused.
    pub fn pinned(
        connect_timeout: Duration,
        pin: stepshim_tls::Pin,
    ) -> Result<Self, stepshim_tls::Error> {
        Ok(Self::with_connector(
            connect_timeout,
            Connector::pinned(pin)?,
        ))
    }

    fn with_connector(connect_timeout: Duration, connector: Connector) -> Self {
        Direct {
            pool: Arc::default(),
            raw: Arc::default(),
            connect_timeout,
            connector,
        }
    }

    /// A kept exchange connection to `key` that the shim has not closed meanwhile (a read that
    /// would block); closed ones are dropped on the way.
    fn take_raw(&self, key: &str) -> Option<(Stream, Vec<u8>)> {
        let mut raw = self.raw.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(i) = raw.iter().rposition(|c| c.key == key) {
            let c = raw.swap_remove(i);
            if c.conn.is_quiet() {
                return Some((c.conn, c.buf));
            }
        }
        None
    }

    fn put_raw(&self, key: String, conn: Stream, buf: Vec<u8>) {
        let mut raw = self.raw.lock().unwrap_or_else(|e| e.into_inner());
        if raw.len() < MAX_RAW_IDLE {
            raw.push(RawIdle { key, conn, buf });
        }
    }

    /// A new connection to `key`: TCP connect and, when pinned, the TLS handshake, within the
    /// connect timeout.
    async fn connect_stream(&self, key: &str) -> Result<Stream, BoxError> {
        let open = async {
            let tcp = TcpStream::connect(key).await?;
            tcp.set_nodelay(true)?;
            self.connector.wrap(tcp).await
        };
        let stream = tokio::time::timeout(self.connect_timeout, open)
            .await
            .map_err(|_| format!("connecting to {key} timed out"))??;
        Ok(stream)
    }

    /// An idle connection to `authority` ready to send, dropping closed ones on the way; `Err`
    /// when none is ready but one to it is still busy (reading an answer's end, or streaming).
    fn take(&self, authority: &str) -> Result<http1::SendRequest<ReqBody>, bool> {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        pool.retain(|c| !c.sender.is_closed());
        let mut busy = false;
        for (i, c) in pool.iter().enumerate().rev() {
            if c.authority == authority {
                if c.sender.is_ready() {
                    return Ok(pool.swap_remove(i).sender);
                }
                busy = true;
            }
        }
        Err(busy)
    }

    /// A connection to `authority` that can send: an idle one, else (after letting a connection
    /// that is finishing an answer get there) a new one. The bool says it is new.
    async fn checkout(
        &self,
        authority: &str,
    ) -> Result<(http1::SendRequest<ReqBody>, bool), BoxError> {
        match self.take(authority) {
            Ok(s) => return Ok((s, false)),
            Err(true) => {
                tokio::task::yield_now().await;
                if let Ok(s) = self.take(authority) {
                    return Ok((s, false));
                }
            }
            Err(false) => {}
        }
        let mut sender = self.connect(authority).await?;
        sender.ready().await?;
        Ok((sender, true))
    }

    async fn connect(&self, authority: &str) -> Result<http1::SendRequest<ReqBody>, BoxError> {
        let stream = self.connect_stream(authority).await?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(cause = %e, "connection to the shim ended");
            }
        });
        Ok(sender)
    }
}

/// A URL's authority as given (for `Host`), its `host:port` (the pools' key) and its origin form
/// (the path and query sent); the scheme must be the connector's (`http://` or `https://`).
fn split(uri: &Uri, scheme: &str) -> Result<(http::uri::Authority, String, Uri), BoxError> {
    let authority = match (uri.scheme_str(), uri.authority()) {
        (Some(s), Some(a)) if s == scheme => a.clone(),
        _ => return Err(format!("not an {scheme}:// URL: {uri}").into()),
    };
    let default_port = if scheme == "https" { 443 } else { 80 };
    let key = format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(default_port)
    );
    let origin = match uri.path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    };
    Ok((authority, key, origin))
}

/// Whether a request may be sent again after a kept connection turned out closed without an
/// answer: the protocol's GET, PUT and DELETE are idempotent (a spawn is keyed by its id).
fn resendable(method: &http::Method) -> bool {
    method.is_idempotent()
}

impl Transport for Direct {
    fn exchange(&self, req: Request<Bytes>) -> ExchangeFuture<'_> {
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let (authority, key, origin) = split(&parts.uri, self.connector.scheme())?;
            let target = origin.path_and_query().map_or("/", |pq| pq.as_str());
            let request = crate::h1::encode(
                &parts.method,
                target,
                authority.as_str(),
                &parts.headers,
                &body,
            );
            let head_only = parts.method == http::Method::HEAD;
            let (mut conn, mut buf, mut fresh) = match self.take_raw(&key) {
                Some((conn, buf)) => (conn, buf, false),
                None => (self.connect_stream(&key).await?, Vec::new(), true),
            };
            loop {
                match crate::h1::exchange(&mut conn, &mut buf, &request, head_only).await {
                    Ok(a) => {
                        if a.reusable {
                            self.put_raw(key, conn, buf);
                        }
                        return Ok((a.status, a.body));
                    }
                    // A kept connection closed by the shim just now (its idle timeout): the
                    // request never reached it; once more on a new connection.
                    Err(crate::h1::H1Error::Io {
                        answered: false, ..
                    }) if !fresh && resendable(&parts.method) => {
                        (conn, buf, fresh) = (self.connect_stream(&key).await?, Vec::new(), true);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        })
    }

    fn send(&self, req: Request<ReqBody>) -> SendFuture<'_> {
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let (authority, key, origin) = split(&parts.uri, self.connector.scheme())?;
            // Origin form on the wire, the authority in `Host`.
            parts.uri = origin;
            parts
                .headers
                .insert(header::HOST, HeaderValue::from_str(authority.as_str())?);
            let authority = key;
            let mut req = Request::from_parts(parts, body);
            // A kept-alive connection may turn out closed by the shim (idle timeout) before the
            // request went out; then the request comes back and goes on a new connection.
            let resp = loop {
                let (mut sender, fresh) = self.checkout(&authority).await?;
                match sender.try_send_request(req).await {
                    Ok(resp) => {
                        self.pool
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Idle { authority, sender });
                        break resp;
                    }
                    Err(mut e) => match e.take_message() {
                        Some(back) if !fresh => req = back,
                        _ => return Err(e.into_error().into()),
                    },
                }
            };
            Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
        })
    }
}
