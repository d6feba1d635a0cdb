//! How the controller reaches a pod's shim: straight to the pod IP, or through the apiserver's
//! `pods/{name}:7777/proxy` with the caller's own Kubernetes credentials, for callers that cannot
//! route to pod IPs (outside the cluster). The apiserver keeps `Authorization` for itself, so the
//! shim's token travels in `X-Stepshim-Token` (PROTOCOL.md section 2).
//!
//! [`ApiProxy`] is a [`client::Transport`]: its own HTTP/1.1 pool to the apiserver with the
//! kubeconfig's TLS, server address and authentication layers, so request bodies stream (a tar of
//! any size goes up as it is read), which `kube::Client::send` cannot do with its body type.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use client::{BoxError, ReqBody, SendFuture, Transport};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use kube::Config;
use kube::client::ConfigExt;
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

use crate::podspec::SHIM_PORT;

/// Which way to the shims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The pod IP: fastest, needs a route to the pod network.
    Direct,
    /// The apiserver's `pods/proxy`: works wherever the apiserver does; needs `pods/proxy` rights.
    Proxy,
    /// The pod IP if it accepts a connection within the probe timeout, else the proxy.
    Auto,
}

/// The proxy path of a pod's shim: shim routes are appended to it.
pub fn proxy_base(namespace: &str, pod: &str, tls: bool) -> String {
    let scheme = if tls { "https:" } else { "" };
    format!("/api/v1/namespaces/{namespace}/pods/{scheme}{pod}:{SHIM_PORT}/proxy")
}

/// Whether `addr` accepts a TCP connection within `timeout` (the probe of [`Via::Auto`]).
pub async fn answers(addr: SocketAddr, timeout: Duration) -> bool {
    matches!(
        tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

type Svc = BoxCloneSyncService<Request<ReqBody>, Response<hyper::body::Incoming>, BoxError>;

/// Requests through the apiserver, authenticated as the kubeconfig says.
#[derive(Clone)]
pub struct ApiProxy {
    svc: Svc,
    server: String,
}

impl fmt::Debug for ApiProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiProxy")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl ApiProxy {
    /// A pool to the apiserver of `config`, with its TLS and credentials (refreshed as kube does).
    pub fn new(config: &Config) -> Result<Self, kube::Error> {
        let mut conn = HttpConnector::new();
        conn.enforce_http(false);
        conn.set_nodelay(true);
        conn.set_keepalive(Some(Duration::from_secs(30)));
        conn.set_connect_timeout(config.connect_timeout);
        let https = config.rustls_https_connector_with_connector(conn)?;
        let http: Client<_, ReqBody> = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(https);
        let svc = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(http);
        Ok(ApiProxy {
            svc: BoxCloneSyncService::new(svc),
            server: config.cluster_url.to_string(),
        })
    }
}

impl Transport for ApiProxy {
    fn send(&self, req: Request<ReqBody>) -> SendFuture<'_> {
        let svc = self.svc.clone();
        Box::pin(async move {
            let resp = svc.oneshot(req).await?;
            Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
        })
    }
}
