//! What a request asks for, checked before anything leaves the node: the route (only the OCI
//! distribution pull routes, `/v2/` and the probe), the source address (in an allowed network, not
//! its network or broadcast address, not one of the node's) and the credentials. Pure functions of
//! the request head and the node's addresses; the answers to refusals are in `answer`.

use std::net::Ipv4Addr;

use http::{HeaderMap, Method, header};
use protocol::forward as F;
use protocol::registry::{self, PathError};

use crate::answer::Refusal;
pub use crate::wire::{Credentials, Wire};
use protocol::forward::Cidr;
use stepshim_tls::Pin;

/// A request the forwarder serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /healthz`: the readiness probe.
    Probe,
    /// `/v2/`: the API version check, answered here.
    Root,
    /// A manifest or blob of the image `name` in the source pod `ip`.
    Pull {
        /// The source pod's address.
        ip: Ipv4Addr,
        /// The path on the source shim: `/v2/<name...>/{manifests,blobs}/<reference>`.
        path: String,
    },
}

/// The route of `method` and `path`, its source checked against `allow`. The image part of the
/// path is checked by the shim's own grammar (`protocol::registry`), so nothing it would refuse
/// leaves the node.
pub fn route(method: &Method, path: &str, allow: &[Cidr]) -> Result<Route, Refusal> {
    if method != Method::GET && method != Method::HEAD {
        return Err(Refusal::Method);
    }
    if path == F::PROBE_PATH {
        return Ok(Route::Probe);
    }
    let rest = match path.strip_prefix(registry::PREFIX) {
        Some("") => return Ok(Route::Root),
        None if path == "/v2" => return Ok(Route::Root),
        None => return Err(Refusal::Route),
        Some(rest) => rest,
    };
    let (ip, image) = rest.split_once('/').ok_or(Refusal::Route)?;
    let path = format!("{}{image}", registry::PREFIX);
    match registry::parse(&path) {
        Ok(registry::Request::Manifest { .. } | registry::Request::Blob { .. }) => {}
        Ok(registry::Request::Base) | Err(PathError::NotFound) => return Err(Refusal::Route),
        Err(PathError::NameInvalid(m)) => return Err(Refusal::Name(m)),
        Err(PathError::TagInvalid(m)) => return Err(Refusal::Tag(m)),
        Err(PathError::DigestInvalid(m)) => return Err(Refusal::Digest(m)),
    }
    let ip: Ipv4Addr = ip.parse().map_err(|_| Refusal::NotIpv4(ip.to_owned()))?;
    if !allow.iter().any(|c| c.contains(ip)) {
        return Err(Refusal::NotAllowed(ip));
    }
    if allow.iter().any(|c| c.is_network_or_broadcast(ip)) {
        return Err(Refusal::NetworkEdge(ip));
    }
    Ok(Route::Pull { ip, path })
}

/// Refuses a source that is one of the node's own addresses (`node`: what its interfaces hold,
/// the bridge's gateway on the pod network included), even inside an allowed network: the
/// forwarder reaches pods, never the node it runs on.
pub fn not_the_node(ip: Ipv4Addr, node: &[Ipv4Addr]) -> Result<(), Refusal> {
    if node.contains(&ip) {
        return Err(Refusal::Node(ip));
    }
    Ok(())
}

/// The credentials of `Authorization: Basic base64(<user>:<token>)`.
pub fn credentials(headers: &HeaderMap) -> Result<Credentials, Refusal> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(Refusal::NoCredentials)?
        .as_bytes();
    let encoded = value
        .get(..6)
        .filter(|p| p.eq_ignore_ascii_case(b"basic "))
        .map(|_| value[6..].trim_ascii())
        .ok_or(Refusal::Credentials("not Basic"))?;
    let decoded = registry::base64_decode(encoded)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or(Refusal::Credentials("not base64 of user:password"))?;
    let (user, token) = decoded
        .split_once(':')
        .ok_or(Refusal::Credentials("not base64 of user:password"))?;
    let wire = if user == F::USER_PLAIN {
        Wire::Plain
    } else {
        let pin = user
            .strip_prefix(F::USER_TLS_PREFIX)
            .and_then(|hex| hex.parse::<Pin>().ok())
            .ok_or(Refusal::Credentials(
                "the username is neither plain nor tls-<64 hex digits of the source's key pin>",
            ))?;
        Wire::Tls(pin)
    };
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Refusal::Credentials(
            "the password (the grant token) is empty or not printable",
        ));
    }
    Ok(Credentials {
        wire,
        token: token.to_owned(),
    })
}

#[cfg(test)]
mod tests;
