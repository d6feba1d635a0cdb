//! One request, start to answer: the route and source checked (the node's addresses read for
//! it), the credentials read, the request streamed to the source and its answer streamed back
//! with the headers a pull needs. Refusals and source failures are answered here, with the OCI
//! error body.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderName, Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use protocol::registry;

use crate::answer::{self, Refusal};
use crate::idle::Activity;
use crate::route::{self, Route};
use crate::sys;
use crate::upstream::{self, Reach, Relay};
use protocol::forward::Cidr;

/// What every request needs: the allowed networks and how sources are reached.
#[derive(Debug)]
pub struct Shared {
    /// The pod networks a source may lie in.
    pub allow: Vec<Cidr>,
    /// The sources' port and the timeouts.
    pub reach: Reach,
}

/// The source's headers a client gets (others, e.g. the source's `Server` or cookies, are not
/// passed on); `WWW-Authenticate` is replaced by the forwarder's Basic challenge.
const PASSED_BACK: [HeaderName; 7] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_RANGE,
    header::ACCEPT_RANGES,
    header::RETRY_AFTER,
    HeaderName::from_static(registry::DIGEST_HEADER),
    HeaderName::from_static(registry::API_VERSION_HEADER),
];

/// An answer's body: made here, or the source's streaming through.
#[derive(Debug)]
pub enum Answer {
    /// A small body made by the forwarder.
    Local(Full<Bytes>),
    /// The source's body.
    Relay(Relay),
}

impl Body for Answer {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            Answer::Local(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|f| f.map_err(|never: Infallible| match never {}))),
            Answer::Relay(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::Local(b) => b.is_end_stream(),
            Answer::Relay(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Answer::Local(b) => b.size_hint(),
            Answer::Relay(b) => b.size_hint(),
        }
    }
}

/// Answers `req`, received on the connection whose clock is `activity`.
pub async fn handle(
    shared: &Shared,
    activity: &Activity,
    req: Request<Incoming>,
) -> Result<Response<Answer>, Infallible> {
    let local = |r: Response<Full<Bytes>>| Ok(r.map(Answer::Local));
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let refuse = |refusal: Refusal| {
        tracing::info!(%method, path, status = refusal.status_code().0.as_u16(), cause = %refusal, "refused");
        local(refusal.response())
    };
    let route = match route::route(&method, &path, &shared.allow) {
        Ok(r) => r,
        Err(refusal) => return refuse(refusal),
    };
    let (ip, upstream_path) = match route {
        Route::Probe => return local(answer::probe()),
        Route::Root => {
            return match route::credentials(req.headers()) {
                Ok(_) => local(answer::root()),
                Err(refusal) => refuse(refusal),
            };
        }
        Route::Pull { ip, path } => (ip, path),
    };
    // Read afresh for every pull, not once at start nor from a cache: an interface gains addresses
    // while the forwarder runs (the pod bridge and its gateway appear when the node's first pod
    // starts), and an address must count from the moment it exists. One read (`getifaddrs`, two
    // netlink dumps) took about 0.12 ms on a host of 4 interfaces: little beside the connection to
    // a pod that follows, and it is never skipped for a request that leaves the node.
    let node = match sys::interface_addresses() {
        Ok(addrs) => addrs,
        Err(e) => return refuse(Refusal::NodeAddresses(e)),
    };
    if let Err(refusal) = route::not_the_node(ip, &node) {
        return refuse(refusal);
    }
    let creds = match route::credentials(req.headers()) {
        Ok(c) => c,
        Err(refusal) => return refuse(refusal),
    };
    let addr = SocketAddr::new(ip.into(), shared.reach.port);
    let passed = upstream::passed_headers(req.headers());
    drop(req);
    let sent = upstream::send(
        addr,
        shared.reach,
        &creds,
        method.clone(),
        &upstream_path,
        passed,
        activity,
    )
    .await;
    match sent {
        Ok(answer) => {
            tracing::info!(%method, path, %addr, status = answer.status().as_u16(), "forwarded");
            Ok(translate(answer))
        }
        Err(cause) => {
            let refusal = Refusal::Upstream { addr, cause };
            tracing::warn!(%method, path, cause = %refusal, "source failed");
            local(refusal.response())
        }
    }
}

/// The source's answer as the client gets it: its status, the headers of [`PASSED_BACK`], the
/// Basic challenge where the source asked for credentials, and the body streaming.
fn translate(from: Response<Relay>) -> Response<Answer> {
    let (parts, body) = from.into_parts();
    let mut to = Response::new(Answer::Relay(body));
    *to.status_mut() = parts.status;
    let h = to.headers_mut();
    for name in PASSED_BACK {
        for v in parts.headers.get_all(&name) {
            h.append(name.clone(), v.clone());
        }
    }
    if parts.headers.contains_key(header::WWW_AUTHENTICATE) {
        h.insert(header::WWW_AUTHENTICATE, answer::challenge());
    }
    to
}
