//! Every answer the forwarder makes itself: refusals and upstream failures, each mapped once to
//! its status, OCI error code and message (`{"errors":[{"code":..,"message":..}]}`), and the two
//! local successes (`/v2/` and the probe). Messages name the cause; they carry no token.

use std::net::{Ipv4Addr, SocketAddr};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use protocol::registry;

use crate::upstream::UpstreamError;

/// The value of the header every `/v2/` answer carries.
pub const API_VERSION_VALUE: &str = "registry/2.0";

/// Why the forwarder answered a request itself instead of streaming it.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A method other than `GET` and `HEAD`: the forwarder serves pulls only.
    #[error("only GET and HEAD are served (pulls only)")]
    Method,
    /// A path that is not a pull route.
    #[error(
        "not a pull route: want /v2/<pod IP>/<name>/manifests/<reference> or .../blobs/<digest>"
    )]
    Route,
    /// The source is not an IPv4 address.
    #[error("{0:?} is not an IPv4 address (the source pod's)")]
    NotIpv4(String),
    /// The source lies outside the allowed pod networks.
    #[error("{0} is outside the pod networks this forwarder may reach")]
    NotAllowed(Ipv4Addr),
    /// The source is the network or broadcast address of an allowed network: no pod's.
    #[error("{0} is the network or broadcast address of a pod network, no pod's")]
    NetworkEdge(Ipv4Addr),
    /// The source is one of the node's own addresses (e.g. the pod bridge's gateway).
    #[error("{0} is an address of this node: the forwarder reaches pods, never the node")]
    Node(Ipv4Addr),
    /// The node's addresses could not be read, so no source can be told apart from them.
    #[error("cannot read the node's addresses to check the source against them")]
    NodeAddresses(#[source] std::io::Error),
    /// A repository name outside the OCI grammar (the message says which).
    #[error("{0}")]
    Name(String),
    /// A tag outside the OCI grammar.
    #[error("{0}")]
    Tag(String),
    /// A digest that is not `sha256:<64 lowercase hex>`.
    #[error("{0}")]
    Digest(String),
    /// No `Authorization` header: the challenge makes a client retry with the pull secret.
    #[error("credentials required (the pull secret of the source's grant)")]
    NoCredentials,
    /// Credentials the forwarder cannot use.
    #[error("unusable credentials: {0}")]
    Credentials(&'static str),
    /// The source could not be reached, or broke off before its answer's head.
    #[error("source {addr}: {cause}")]
    Upstream {
        /// The source shim's address.
        addr: SocketAddr,
        /// What failed.
        #[source]
        cause: UpstreamError,
    },
    /// Every connection slot is taken.
    #[error("too many connections to the forwarder; retry")]
    Busy,
}

impl Refusal {
    /// The status and OCI error code of the answer.
    pub fn status_code(&self) -> (StatusCode, &'static str) {
        match self {
            Refusal::Method => (StatusCode::METHOD_NOT_ALLOWED, "UNSUPPORTED"),
            Refusal::Route => (StatusCode::NOT_FOUND, "NAME_UNKNOWN"),
            Refusal::NotIpv4(_) | Refusal::Name(_) => (StatusCode::BAD_REQUEST, "NAME_INVALID"),
            Refusal::Tag(_) => (StatusCode::BAD_REQUEST, "TAG_INVALID"),
            Refusal::Digest(_) => (StatusCode::BAD_REQUEST, "DIGEST_INVALID"),
            Refusal::NotAllowed(_) | Refusal::NetworkEdge(_) | Refusal::Node(_) => {
                (StatusCode::FORBIDDEN, "DENIED")
            }
            Refusal::NodeAddresses(_) => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
            Refusal::NoCredentials | Refusal::Credentials(_) => {
                (StatusCode::UNAUTHORIZED, "UNAUTHORIZED")
            }
            Refusal::Upstream { .. } => (StatusCode::BAD_GATEWAY, "UNAVAILABLE"),
            Refusal::Busy => (StatusCode::SERVICE_UNAVAILABLE, "TOOMANYREQUESTS"),
        }
    }

    /// The OCI error body: `{"errors":[{"code":..,"message":..}]}`.
    pub fn body(&self) -> String {
        let message = match self {
            // The cause's own text is what an operator needs ("connection refused", "timed
            // out", the pin); the chain is flattened into one line.
            Refusal::Upstream { addr, cause } => format!("source {addr}: {}", cause.chain()),
            other => other.to_string(),
        };
        let errors = registry::Errors {
            errors: vec![registry::ErrorItem {
                code: self.status_code().1.to_owned(),
                message,
            }],
        };
        serde_json::to_string(&errors).expect("strings serialize")
    }

    /// The answer: the OCI error body, the challenge on 401, `Allow` on 405.
    pub fn response(&self) -> Response<Full<Bytes>> {
        let status = self.status_code().0;
        let mut r = json(status, self.body());
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge());
        }
        if status == StatusCode::METHOD_NOT_ALLOWED {
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        r
    }
}

/// `WWW-Authenticate: Basic realm="stepshim"`.
pub fn challenge() -> HeaderValue {
    HeaderValue::from_static(r#"Basic realm="stepshim""#)
}

/// `200 {}`: the answer to `/v2/` with credentials.
pub fn root() -> Response<Full<Bytes>> {
    json(StatusCode::OK, "{}".to_owned())
}

/// `200 ok`: the readiness probe's answer.
pub fn probe() -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(b"ok\n")));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        registry::API_VERSION_HEADER,
        HeaderValue::from_static(API_VERSION_VALUE),
    );
    r
}
