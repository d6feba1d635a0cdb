//! A counting pass-through between a driver and kube-apiserver, the client-side view of its requests.
//!
//! The apiserver's own counters (see `requests`) cannot see the first seconds after a restart: its
//! FlowSchemas load from the API after it starts serving, and requests before that are classified by
//! the built-in ones. So the driver talks plain HTTP on loopback to this proxy, which forwards every
//! request unchanged (the driver's own bearer token included; the proxy adds no credentials) over TLS
//! to the apiserver and counts the pod LISTs, WATCHes resuming from a resource version, and WATCHes
//! that stream the whole collection first (`sendInitialEvents=true`: a relist by the WATCH verb), with
//! the response bytes of each.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;

/// Requests of one class.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Class {
    /// Requests sent.
    pub requests: u64,
    /// Of which the apiserver answered 2xx.
    pub ok: u64,
    /// Response bytes received.
    pub bytes: u64,
}

/// What the driver sent, by class: `list`, `watch` (from a resource version), `watch-list` (whole
/// collection streamed first), `other`.
pub type Seen = BTreeMap<String, Class>;

/// The running proxy.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// Where the driver connects.
    pub port: u16,
    seen: Arc<Mutex<Seen>>,
}

fn class(method: &http::Method, uri: &http::Uri) -> &'static str {
    let segs: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let pods = method == http::Method::GET
        && matches!(
            segs.as_slice(),
            ["api", "v1", "namespaces", _, "pods"] | ["api", "v1", "pods"]
        );
    if !pods {
        return "other";
    }
    let query = uri.query().unwrap_or("");
    let has = |kv: &str| query.split('&').any(|p| p == kv);
    if has("watch=true") || has("watch=1") {
        if has("sendInitialEvents=true") {
            "watch-list"
        } else {
            "watch"
        }
    } else {
        "list"
    }
}

fn hop_by_hop(name: &http::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "te" | "trailer" | "host"
    )
}

type Out = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

async fn forward(
    client: kube::Client,
    seen: Arc<Mutex<Seen>>,
    req: Request<Incoming>,
) -> Result<Response<Out>, Infallible> {
    let c = class(req.method(), req.uri());
    let bump = |f: &dyn Fn(&mut Class)| {
        if let Ok(mut s) = seen.lock() {
            f(s.entry(c.to_owned()).or_default());
        }
    };
    bump(&|k| k.requests += 1);
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
    };
    let mut out = Request::builder().method(parts.method).uri(parts.uri);
    for (k, v) in parts.headers.iter().filter(|(k, _)| !hop_by_hop(k)) {
        out = out.header(k, v);
    }
    let Ok(out) = out.body(kube::client::Body::from(body)) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let res = match client.send(out).await {
        Ok(r) => r,
        Err(_) => return Ok(status(StatusCode::BAD_GATEWAY)),
    };
    if res.status().is_success() {
        bump(&|k| k.ok += 1);
    }
    let (mut parts, body) = res.into_parts();
    for name in [
        "connection",
        "keep-alive",
        "transfer-encoding",
        "upgrade",
        "trailer",
    ] {
        parts.headers.remove(name);
    }
    let counted = body.map_frame(move |f| {
        if let Some(d) = f.data_ref()
            && let Ok(mut s) = seen.lock()
        {
            s.entry(c.to_owned()).or_default().bytes += d.len() as u64;
        }
        f
    });
    Ok(Response::from_parts(
        parts,
        counted.map_err(Into::into).boxed_unsync(),
    ))
}

fn status(code: StatusCode) -> Response<Out> {
    let mut r = Response::new(Full::new(Bytes::new()).map_err(Into::into).boxed_unsync());
    *r.status_mut() = code;
    r
}

impl Proxy {
    /// Starts a proxy to the apiserver of `admin` (only its address and CA are used).
    pub async fn start(admin: &kube::Config) -> Result<Self> {
        let mut config = kube::Config::new(admin.cluster_url.clone());
        config.root_cert = admin.root_cert.clone();
        config.tls_server_name = admin.tls_server_name.clone();
        // Watches last as long as the driver asks (client-go: 5 to 10 minutes).
        config.read_timeout = None;
        let client = kube::Client::try_from(config).context("proxy's apiserver client")?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let seen = Arc::new(Mutex::new(Seen::new()));
        let shared = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (client, seen) = (client.clone(), shared.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        forward(client.clone(), seen.clone(), req)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Ok(Proxy { port, seen })
    }

    /// Everything counted so far.
    pub fn seen(&self) -> Seen {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// What happened from `before` to `after`.
pub fn since(before: &Seen, after: &Seen) -> Seen {
    after
        .iter()
        .map(|(k, a)| {
            let b = before.get(k).copied().unwrap_or_default();
            let d = Class {
                requests: a.requests - b.requests,
                ok: a.ok - b.ok,
                bytes: a.bytes - b.bytes,
            };
            (k.clone(), d)
        })
        .filter(|(_, d)| d.requests > 0 || d.bytes > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_lists_watches_and_relists_by_watch_apart() {
        let c = |m: &str, u: &str| class(&m.parse().expect("method"), &u.parse().expect("uri"));
        let pods = "/api/v1/namespaces/ns/pods";
        assert_eq!(
            c("GET", &format!("{pods}?labelSelector=a%3Db&limit=500")),
            "list"
        );
        assert_eq!(
            c("GET", &format!("{pods}?watch=true&resourceVersion=7")),
            "watch"
        );
        assert_eq!(
            c("GET", &format!("{pods}?allowWatchBookmarks=true&watch=1")),
            "watch"
        );
        assert_eq!(
            c("GET", &format!("{pods}?sendInitialEvents=true&watch=true")),
            "watch-list"
        );
        assert_eq!(c("DELETE", &format!("{pods}/p1")), "other");
        assert_eq!(c("GET", &format!("{pods}/p1")), "other");
        assert_eq!(c("GET", "/api/v1/pods?watch=true"), "watch");
    }
}
