//! What a request asks for, checked before anything leaves the node: the route (only the OCI
//! distribution pull routes, `/v2/` and the probe), the source address and the credentials. Pure
//! functions of the request head; the answers to refusals are in `answer`.

use std::net::Ipv4Addr;

use base64::Engine as _;
use http::{HeaderMap, Method, header};
use protocol::forward as F;
use stepshim_tls::Pin;

use crate::answer::Refusal;
use crate::cidr::Cidr;

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

/// How the forwarder reaches the source, from the pull secret's username.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Plain HTTP (`plain`).
    Plain,
    /// TLS 1.3, the source's key pinned (`tls-<64 hex>`).
    Tls(Pin),
}

/// The pull secret's credentials: how to reach the source, and the grant token to present.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// How to reach the source.
    pub wire: Wire,
    /// The grant token, sent upstream as `Authorization: Bearer`.
    pub token: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("wire", &self.wire)
            .finish_non_exhaustive()
    }
}

/// The route of `method` and `path`, its source checked against `allow`.
pub fn route(method: &Method, path: &str, allow: &[Cidr]) -> Result<Route, Refusal> {
    if method != Method::GET && method != Method::HEAD {
        return Err(Refusal::Method);
    }
    if path == F::PROBE_PATH {
        return Ok(Route::Probe);
    }
    if path == "/v2/" || path == "/v2" {
        return Ok(Route::Root);
    }
    let rest = path.strip_prefix("/v2/").ok_or(Refusal::Route)?;
    let parts: Vec<&str> = rest.split('/').collect();
    // ip, at least one name component, the kind, the reference.
    if parts.len() < 4 {
        return Err(Refusal::Route);
    }
    let (kind, reference) = (parts[parts.len() - 2], parts[parts.len() - 1]);
    let names = &parts[1..parts.len() - 2];
    match kind {
        "manifests" if is_tag(reference) || is_digest(reference) => {}
        "blobs" if is_digest(reference) => {}
        "manifests" | "blobs" => return Err(Refusal::Reference(reference.to_owned())),
        _ => return Err(Refusal::Route),
    }
    if let Some(bad) = names.iter().find(|c| !is_name_component(c)) {
        return Err(Refusal::Name((*bad).to_owned()));
    }
    let ip: Ipv4Addr = parts[0]
        .parse()
        .map_err(|_| Refusal::NotIpv4(parts[0].to_owned()))?;
    if !allow.iter().any(|c| c.contains(ip)) {
        return Err(Refusal::NotAllowed(ip));
    }
    let path = format!("/v2/{}/{kind}/{reference}", names.join("/"));
    Ok(Route::Pull { ip, path })
}

/// The credentials of `Authorization: Basic base64(<user>:<token>)`.
pub fn credentials(headers: &HeaderMap) -> Result<Credentials, Refusal> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(Refusal::NoCredentials)?;
    let value = value
        .to_str()
        .map_err(|_| Refusal::Credentials("not text"))?;
    let (scheme, encoded) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(Refusal::Credentials("not Basic"));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
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

/// An OCI name component: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn is_name_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let (mut i, mut runs) = (0, 0);
    while i < b.len() {
        let start = i;
        while i < b.len() && alnum(b[i]) {
            i += 1;
        }
        if i == start {
            return false;
        }
        runs += 1;
        if i == b.len() {
            break;
        }
        let sep = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &s[sep..i];
        let dashes = sep.bytes().all(|c| c == b'-');
        if !(sep == "." || sep == "_" || sep == "__" || dashes) || i == b.len() {
            return false;
        }
    }
    runs > 0
}

/// A tag: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn is_tag(s: &str) -> bool {
    let ok = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-';
    !s.is_empty()
        && s.len() <= 128
        && s.bytes().all(ok)
        && !s.starts_with('.')
        && !s.starts_with('-')
}

/// A SHA-256 digest: `sha256:` and 64 lowercase hex digits.
fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    })
}

#[cfg(test)]
mod tests;
