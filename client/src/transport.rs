//! How a request reaches a shim. [`ShimClient`](crate::ShimClient) builds protocol requests (path,
//! query, token header, body) and hands each to a [`Transport`], which sends it and returns the
//! answer with a streaming body. [`Direct`] is a connection pool to the shim's own address; other
//! transports (the controller's way through the apiserver's `pods/proxy`) live with whoever owns
//! their credentials, so this crate knows nothing of Kubernetes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, header};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;

/// Any error a transport or a body stream reports.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A request body: streamed, so a tar of any size goes out as it is produced.
pub type ReqBody = BoxBody<Bytes, std::io::Error>;
/// A response body: streamed, so output follows and tars come in as the shim writes them.
pub type RespBody = BoxBody<Bytes, BoxError>;
/// What [`Transport::send`] returns.
pub type SendFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Response<RespBody>, BoxError>> + Send + 'a>>;

/// Sends one HTTP request to a shim. The request's URI is the client's base joined with the
/// route's path and query: an absolute `http://` URL for [`Direct`], whatever the transport
/// expects otherwise (a path under the apiserver for the proxy). Errors of the send itself
/// (connect, TLS, a broken connection before the answer's head) come back as `Err`; any HTTP
/// answer, error statuses included, is `Ok`.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Sends `req` and returns the answer's head with its body still streaming.
    fn send(&self, req: Request<ReqBody>) -> SendFuture<'_>;
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

/// Plain HTTP/1.1 to the shim's address, with a pool of kept-alive connections.
#[derive(Clone)]
pub struct Direct {
    http: Client<HttpConnector, ReqBody>,
}

impl fmt::Debug for Direct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Direct").finish_non_exhaustive()
    }
}

impl Direct {
    /// A pool whose connection attempts give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Self {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        conn.set_connect_timeout(Some(connect_timeout));
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(conn);
        Direct { http }
    }
}

impl Transport for Direct {
    fn send(&self, req: Request<ReqBody>) -> SendFuture<'_> {
        Box::pin(async move {
            let resp = self.http.request(req).await?;
            Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
        })
    }
}
