//! One request to a source shim: a new connection (TCP, then TLS 1.3 pinned to the key the pull
//! secret names), the request with the grant token as `Authorization: Bearer` and nothing else of
//! the client's but `Accept` and `Range`, and the answer with its body still streaming. A new
//! connection per request: a pull is a few requests of which the blobs dominate, and a handshake
//! per blob costs little beside it, while a pool would hold connections keyed by token and pin.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::idle::{Activity, Marked};
use crate::wire::{Credentials, Wire};

/// The most bytes of a source's answer read ahead of the client (hyper's read buffer).
const READ_AHEAD: usize = 128 << 10;

/// Why a source gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The TCP connection failed (refused, unreachable).
    #[error("cannot connect: {0}")]
    Connect(#[source] std::io::Error),
    /// Connecting (TLS handshake included) took longer than the connect timeout.
    #[error("no connection within {0:?}")]
    ConnectTimeout(Duration),
    /// The source's TLS key is not the pinned one: nothing was sent.
    #[error("its TLS key is not the pinned key {0} (nothing was sent)")]
    WrongKey(stepshim_tls::Pin),
    /// The TLS handshake failed otherwise (e.g. the source speaks plain HTTP).
    #[error("TLS handshake failed: {0}")]
    Tls(#[source] std::io::Error),
    /// The client configuration could not be made (not expected).
    #[error("TLS configuration: {0}")]
    Config(#[from] stepshim_tls::Error),
    /// HTTP failed before the answer's head (the connection closed, a malformed answer).
    #[error("HTTP: {0}")]
    Http(#[source] hyper::Error),
    /// No answer head within the idle timeout.
    #[error("no answer within {0:?}")]
    HeadTimeout(Duration),
}

impl UpstreamError {
    /// The error with its causes in one line.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self).and_then(std::error::Error::source);
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        text
    }
}

/// How sources are reached: their port and the timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Reach {
    /// The shims' port.
    pub port: u16,
    /// Time to connect, TLS handshake included.
    pub connect_timeout: Duration,
    /// Time to wait for the answer's head.
    pub idle_timeout: Duration,
}

/// The client headers passed on: `Accept` (every one) and `Range`.
pub fn passed_headers(from: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in [header::ACCEPT, header::RANGE] {
        for v in from.get_all(&name) {
            out.append(name.clone(), v.clone());
        }
    }
    out
}

/// Sends `method path` to the source at `addr` with `creds`, the client's `passed` headers, and
/// returns its answer with the body streaming. Every byte on the source connection touches
/// `activity`.
pub async fn send(
    addr: SocketAddr,
    reach: Reach,
    creds: &Credentials,
    method: Method,
    path: &str,
    passed: HeaderMap,
    activity: &Activity,
) -> Result<Response<Relay>, UpstreamError> {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .body(Empty::<Bytes>::new())
        .expect("a path the route checked is a valid URI");
    let h = req.headers_mut();
    *h = passed;
    let host = HeaderValue::from_str(&addr.to_string()).expect("an address is a header value");
    h.insert(header::HOST, host);
    let bearer = HeaderValue::from_str(&format!("Bearer {}", creds.token))
        .expect("a printable token is a header value");
    h.insert(header::AUTHORIZATION, bearer);
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    let connect = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(UpstreamError::Connect)?;
        let _ = tcp.set_nodelay(true);
        match creds.wire {
            Wire::Plain => Ok::<_, UpstreamError>(Conn::Plain(tcp)),
            Wire::Tls(pin) => {
                let config = stepshim_tls::client_config(pin)?;
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(stepshim_tls::server_name(), tcp)
                    .await
                    .map_err(|e| tls_error(e, pin))?;
                Ok(Conn::Tls(Box::new(tls)))
            }
        }
    };
    let conn = tokio::time::timeout(reach.connect_timeout, connect)
        .await
        .map_err(|_| UpstreamError::ConnectTimeout(reach.connect_timeout))??;
    let io = TokioIo::new(Marked::new(conn, activity.clone()));
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(READ_AHEAD)
        .handshake(io)
        .await
        .map_err(UpstreamError::Http)?;
    let driver = Arc::new(Abort(tokio::spawn(async move {
        let _ = connection.await;
    })));
    let response = tokio::time::timeout(reach.idle_timeout, sender.send_request(req))
        .await
        .map_err(|_| UpstreamError::HeadTimeout(reach.idle_timeout))?
        .map_err(UpstreamError::Http)?;
    Ok(response.map(|body| Relay {
        body,
        _driver: driver,
    }))
}

/// A refused pin by its own words; other handshake failures as they are.
fn tls_error(e: std::io::Error, pin: stepshim_tls::Pin) -> UpstreamError {
    use stepshim_tls::rustls::Error as R;
    match e.get_ref().and_then(|i| i.downcast_ref::<R>()) {
        Some(R::InvalidCertificate(_)) => UpstreamError::WrongKey(pin),
        _ => UpstreamError::Tls(e),
    }
}

/// Aborts the task driving a source connection when the last holder lets go.
#[derive(Debug)]
struct Abort(tokio::task::JoinHandle<()>);

impl Drop for Abort {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A source's answer body, streamed as it comes; dropping it (the client is done or gone) ends the
/// source connection. An error mid-body (the source cut off) is an error here too, so the client's
/// connection is cut, never ended cleanly.
#[derive(Debug)]
pub struct Relay {
    body: Incoming,
    _driver: Arc<Abort>,
}

impl Body for Relay {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A source connection: TCP, or TLS over it.
enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
