//! The Rust client of one shim's HTTP API (`protocol/PROTOCOL.md`): the only way the controller, the
//! benchmarks and the shim's own tests touch processes. Output can be followed with automatic resume
//! from the last whole frame, so a broken connection loses and repeats nothing. No Kubernetes here.
//!
//! # Layout
//! - this file: [`ShimClient`], one typed call per route, and [`ShimClient::check_protocol`], the
//!   compatibility check a caller makes once per shim (`docs/compatibility.md`).
//! - [`process`]: the process routes: spawn, status, wait, stdin, signals, resize, delete, output
//!   (a second `impl ShimClient`).
//! - [`artifacts`]: grants, pulls and the resumable files stream (another `impl ShimClient`).
//! - `files`: uploads with an owner and removals (another `impl ShimClient`).
//! - [`properties`]: the pod's properties store (another `impl ShimClient`).
//! - [`images`]: the digest of an image the shim serves under `/v2/` (another `impl ShimClient`).
//! - [`stream`]: a connection, plain or TLS with the shim's key pinned (PROTOCOL.md 1.1).
//! - [`transport`]: how a request reaches the shim: the [`Transport`] trait and the direct pool.
//! - [`h1`]: the direct pool's own HTTP/1.1 exchange for JSON calls (streams go through hyper).
//! - [`error`]: [`ClientError`], with the shim's error codes as [`protocol::ErrorCode`], and the
//!   incompatible or older shim told apart.
//! - [`output`]: a frame stream, and attach with resume.
//! - [`local`]: a shim started as a child process on loopback, ready when it writes its address.

mod artifacts;
mod error;
mod files;
pub mod h1;
mod images;
pub mod local;
mod output;
mod process;
mod properties;
mod stream;
pub mod transport;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use protocol::Info;
use protocol::routes::{self, percent_encode};
use serde::de::DeserializeOwned;

pub use artifacts::FilesOut;
pub use error::ClientError;
pub use images::ManifestHead;
pub use output::{Attached, OutputStream};
pub use stepshim_tls::{Pin, Seed};
use transport::full_body;
pub use transport::{BoxError, Direct, ReqBody, RespBody, SendFuture, TokenHeader, Transport};

/// Client of one shim. Its `Debug` shows the base URL, the transport and whether a token is set,
/// never the token.
#[derive(Clone)]
pub struct ShimClient {
    base: String,
    pin: Option<Pin>,
    auth: Option<(HeaderName, HeaderValue)>,
    transport: Arc<dyn Transport>,
}

impl std::fmt::Debug for ShimClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShimClient")
            .field("base", &self.base)
            .field("transport", &self.transport)
            .field("auth", &self.auth.as_ref().map(|(name, _)| name))
            .finish()
    }
}

impl ShimClient {
    /// A client for the shim at `base` (`http://host:port`) presenting `token`.
    pub fn new(base: &str, token: Option<String>) -> Result<Self, ClientError> {
        if !base.starts_with("http://") {
            return Err(ClientError::InvalidUrl(base.to_owned()));
        }
        let transport = Arc::new(Direct::new(Duration::from_secs(10)));
        Self::with_transport(base, token, TokenHeader::Bearer, transport)
    }

    /// A client for the shim at `base` (`https://host:port`) that serves TLS with the key `pin`
    /// (PROTOCOL.md 1.1), presenting `token`.
    pub fn new_pinned(base: &str, token: Option<String>, pin: Pin) -> Result<Self, ClientError> {
        if !base.starts_with("https://") {
            return Err(ClientError::InvalidUrl(base.to_owned()));
        }
        let direct = Direct::pinned(Duration::from_secs(10), pin).map_err(ClientError::Tls)?;
        let mut client = Self::with_transport(base, token, TokenHeader::Bearer, Arc::new(direct))?;
        client.pin = Some(pin);
        Ok(client)
    }

    /// The pin of the shim this client reaches directly over TLS (what a pull from it needs as
    /// `source_pin`); `None` for plain HTTP or another transport.
    pub fn pin(&self) -> Option<Pin> {
        self.pin
    }

    /// A client that sends through `transport`, every request to `base` joined with the route
    /// (for the apiserver's proxy, `base` is the pod's proxy path), the token in `header`.
    pub fn with_transport(
        base: &str,
        token: Option<String>,
        header: TokenHeader,
        transport: Arc<dyn Transport>,
    ) -> Result<Self, ClientError> {
        let base = base.trim_end_matches('/').to_owned();
        if format!("{base}{}", routes::INFO)
            .parse::<http::Uri>()
            .is_err()
        {
            return Err(ClientError::InvalidUrl(base));
        }
        let auth = match token {
            Some(t) => Some(
                header
                    .pair(&t)
                    .ok_or_else(|| ClientError::InvalidToken(header))?,
            ),
            None => None,
        };
        Ok(ShimClient {
            base,
            pin: None,
            auth,
            transport,
        })
    }

    /// The same client (token, transport) aimed at another base URL, e.g. a proxy.
    pub fn with_base(&self, base: &str) -> Self {
        ShimClient {
            base: base.trim_end_matches('/').to_owned(),
            pin: self.pin,
            auth: self.auth.clone(),
            transport: self.transport.clone(),
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The request for a route: the base URL joined with `path_q`, the token header, `body`.
    fn request<B>(&self, method: Method, path_q: &str, body: B) -> Result<Request<B>, ClientError> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path_q));
        if let Some((name, value)) = &self.auth {
            req = req.header(name, value);
        }
        req.body(body)
            .map_err(|_| ClientError::InvalidUrl(path_q.to_owned()))
    }

    async fn send(
        &self,
        method: Method,
        path_q: &str,
        body: ReqBody,
    ) -> Result<http::Response<RespBody>, ClientError> {
        let req = self.request(method.clone(), path_q, body)?;
        let resp = self
            .transport
            .send(req)
            .await
            .map_err(ClientError::Transport)?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(unsupported(api_error(resp).await, &method, path_q))
    }

    /// A request whose answer is wanted whole: sent through [`Transport::exchange`]; an error
    /// status becomes [`ClientError::Api`].
    async fn exchange(
        &self,
        method: Method,
        path_q: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let req = self.request(method.clone(), path_q, body)?;
        let (status, body) = self
            .transport
            .exchange(req)
            .await
            .map_err(transport_error)?;
        if status.is_success() {
            return Ok((status, body));
        }
        Err(unsupported(api_error_of(status, &body), &method, path_q))
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path_q: &str,
        body: Bytes,
    ) -> Result<(StatusCode, T), ClientError> {
        let (status, bytes) = self.exchange(method, path_q, body).await?;
        Ok((
            status,
            serde_json::from_slice(&bytes).map_err(ClientError::Json)?,
        ))
    }

    fn json_body<T: serde::Serialize>(v: &T) -> Bytes {
        serde_json::to_vec(v).unwrap_or_default().into()
    }

    /// `GET /healthz`: whether the shim serves.
    pub async fn healthz(&self) -> Result<(), ClientError> {
        self.exchange(Method::GET, routes::HEALTHZ, Bytes::new())
            .await
            .map(|_| ())
    }

    /// `GET /v1/info`
    pub async fn info(&self) -> Result<Info, ClientError> {
        Ok(self.call(Method::GET, routes::INFO, Bytes::new()).await?.1)
    }

    /// `GET /v1/info`, refusing a shim of another protocol version than this client's
    /// ([`protocol::PROTOCOL_VERSION`]) with [`ClientError::Incompatible`]. Callers ask it once per
    /// shim, before anything else (`docs/compatibility.md`): within one protocol version any
    /// release of the shim serves any release of the client.
    pub async fn check_protocol(&self) -> Result<Info, ClientError> {
        let info = self.info().await?;
        if info.protocol != protocol::PROTOCOL_VERSION {
            return Err(ClientError::Incompatible {
                shim: info.protocol,
                shim_release: info.version,
                ours: protocol::PROTOCOL_VERSION,
            });
        }
        Ok(info)
    }

    /// `PUT /v1/files?path=DIR` with a tar body.
    pub async fn files_in(&self, dir: &str, tar: ReqBody) -> Result<(), ClientError> {
        let q = format!("{}?path={}", routes::FILES, percent_encode(dir));
        self.send(Method::PUT, &q, tar).await.map(|_| ())
    }

    /// `PUT /v1/files?path=DIR` with a tar held in memory.
    pub async fn files_in_bytes(&self, dir: &str, tar: Bytes) -> Result<(), ClientError> {
        self.files_in(dir, full_body(tar)).await
    }

    /// `GET /v1/files?path=P`: the tar stream's body.
    pub async fn files_out(&self, path: &str) -> Result<RespBody, ClientError> {
        let q = format!("{}?path={}", routes::FILES, percent_encode(path));
        Ok(self
            .send(Method::GET, &q, full_body(Bytes::new()))
            .await?
            .into_body())
    }

    /// `GET /metrics`
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let (_, b) = self
            .exchange(Method::GET, routes::METRICS, Bytes::new())
            .await?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }
}

/// A 404 `no_route` said by the shim becomes [`ClientError::Unsupported`]: an older shim of the same
/// protocol without this route. Every other error is kept.
fn unsupported(err: ClientError, method: &Method, path_q: &str) -> ClientError {
    match err {
        ClientError::Api {
            status: 404,
            code: Some(protocol::ErrorCode::NoRoute),
            ..
        } => ClientError::Unsupported {
            method: method.to_string(),
            route: path_q.split('?').next().unwrap_or(path_q).to_owned(),
        },
        other => other,
    }
}

/// The error of an answer with an error status, from at most [`h1::MAX_ERROR_BODY`] bytes of its
/// body.
async fn api_error(resp: http::Response<RespBody>) -> ClientError {
    let status = resp.status();
    let body = transport::read_cut(resp.into_body(), h1::MAX_ERROR_BODY)
        .await
        .unwrap_or_default();
    api_error_of(status, &body)
}

/// A transport's error, with an answer over [`h1::MAX_BODY`] told apart as
/// [`ClientError::TooLarge`].
fn transport_error(e: BoxError) -> ClientError {
    let too_large = match e.downcast_ref::<h1::H1Error>() {
        Some(h1::H1Error::Bad(protocol::http1::AnswerError::BodyTooLarge(_))) => true,
        _ => e.downcast_ref::<transport::BodyTooLarge>().is_some(),
    };
    if too_large {
        return ClientError::TooLarge {
            what: "answer",
            limit: h1::MAX_BODY as u64,
        };
    }
    ClientError::Transport(e)
}

/// The error an answer of `status` with `body` (the shim's JSON error, or anything) stands for.
fn api_error_of(status: StatusCode, body: &[u8]) -> ClientError {
    let status = status.as_u16();
    match serde_json::from_slice::<protocol::ErrorBody>(body) {
        Ok(e) => ClientError::Api {
            status,
            code: protocol::ErrorCode::parse(&e.error.code),
            wire_code: e.error.code,
            message: e.error.message,
        },
        Err(_) => ClientError::Api {
            status,
            code: None,
            wire_code: String::new(),
            message: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
        },
    }
}
