//! `/v2/` (PROTOCOL.md 4.12): the image routes, answered to grant tokens only. Takes the token
//! from `Authorization: Bearer`, `Authorization: Basic` (the password; what a kubelet sends from an
//! image pull secret) or `X-Stepshim-Token`, maps the repository name to a directory below the
//! grant's path, and answers from `crate::image` with the spec's headers and error bodies. A blob
//! of a layout is checked against its digest as it streams: its last chunk is held back and the
//! answer cut off if the content does not match.

use std::io::{self, Read, Write};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use protocol::registry::{self as reg, PathError, Reference};
use sha2::Digest;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::App;
use super::body::{Body, ChannelBody, full};
use super::files::ChannelWriter;
use crate::error::Error;
use crate::grants::Granted;
use crate::image::{Content, FileKey, Found, ImageError};
use crate::output_log::IO_CHUNK;

/// A refused image request: its status, OCI code and message.
struct Refusal(StatusCode, &'static str, String);

impl Refusal {
    fn unauthorized(why: impl Into<String>) -> Self {
        Refusal(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", why.into())
    }

    fn denied(why: impl Into<String>) -> Self {
        Refusal(StatusCode::FORBIDDEN, "DENIED", why.into())
    }

    fn response(self) -> Response<Body> {
        let body = reg::Errors {
            errors: vec![reg::ErrorItem {
                code: self.1.into(),
                message: self.2,
            }],
        };
        let mut r = super::body::json(self.0, &body);
        let h = r.headers_mut();
        match self.0 {
            StatusCode::UNAUTHORIZED => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"stepshim\""),
                );
            }
            StatusCode::METHOD_NOT_ALLOWED => {
                h.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        r
    }
}

/// What a request names, owned so the blocking lookup can take it.
enum Wanted {
    Tag(String),
    Manifest([u8; 32]),
    Blob([u8; 32]),
}

/// Answers one request under `/v2/`.
pub(super) async fn handle(
    app: &Arc<App>,
    req: Request<Incoming>,
    conn: &super::conns::Slot,
) -> Response<Body> {
    let head = req.method() == Method::HEAD;
    let mut r = match serve(app, &req, conn, head).await {
        Ok(r) => r,
        Err(refused) => refused.response(),
    };
    r.headers_mut().insert(
        reg::API_VERSION_HEADER,
        HeaderValue::from_static("registry/2.0"),
    );
    r
}

async fn serve(
    app: &Arc<App>,
    req: &Request<Incoming>,
    conn: &super::conns::Slot,
    head: bool,
) -> Result<Response<Body>, Refusal> {
    let granted = grant(app, req)?;
    if !app.conns.authenticated(conn, true) {
        let full = super::conns::FULL.into();
        return Err(Refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "TOOMANYREQUESTS",
            full,
        ));
    }
    if !head && req.method() != Method::GET {
        return Err(Refusal(
            StatusCode::METHOD_NOT_ALLOWED,
            "UNSUPPORTED",
            "the shim serves images read-only: GET and HEAD".into(),
        ));
    }
    let (name, wanted) = match reg::parse(req.uri().path()).map_err(path_refusal)? {
        reg::Request::Base => return Ok(super::body::json(StatusCode::OK, &Empty {})),
        reg::Request::Manifest { name, reference } => match reference {
            Reference::Tag(t) => (name, Wanted::Tag(t.to_owned())),
            Reference::Digest(d) => (name, Wanted::Manifest(d)),
        },
        reg::Request::Blob { name, digest } => (name, Wanted::Blob(digest)),
    };
    let dir = directory(app, &granted, name)?;
    let blob = matches!(wanted, Wanted::Blob(_));
    // Only a blob's download takes a slot of the grants' pool: manifests are small, so resolving
    // a tag is never refused while the pod serves pulls.
    let slot = match blob && !head {
        true => Some(app.files.slot(true).map_err(|e| {
            Refusal(
                StatusCode::TOO_MANY_REQUESTS,
                "TOOMANYREQUESTS",
                e.to_string(),
            )
        })?),
        false => None,
    };
    let a = app.clone();
    let found = crate::blocking::run(move || {
        let dir = std::path::Path::new(&dir);
        match &wanted {
            Wanted::Tag(tag) => a.images.manifest(dir, Reference::Tag(tag)),
            Wanted::Manifest(d) => a.images.manifest(dir, Reference::Digest(*d)),
            Wanted::Blob(d) => a.images.blob(dir, d),
        }
    })
    .await
    .ok_or_else(|| {
        Refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "UNKNOWN",
            "lookup failed".into(),
        )
    })?
    .map_err(|e| image_refusal(e, blob))?;
    Ok(answer(app, found, head, slot))
}

#[derive(serde::Serialize)]
struct Empty {}

/// The grant whose token the request carries (Bearer, Basic password or `X-Stepshim-Token`); the
/// pod's own token is refused here.
fn grant(app: &App, req: &Request<Incoming>) -> Result<Granted, Refusal> {
    use crate::auth::{Caller, Credentials};
    let creds = Credentials::of(req.headers(), true);
    match creds.caller(app.token_sha256.as_ref(), &app.grants) {
        Caller::Grant(g) => Ok(g),
        Caller::Pod => Err(Refusal::denied(
            "images are served to grant tokens only: make a grant (POST /v1/grants) and use its token",
        )),
        Caller::Lapsed(e) => Err(Refusal::unauthorized(e.to_string())),
        Caller::Nobody => Err(Refusal::unauthorized(
            "a grant token is required (the password of Basic credentials, or Bearer)",
        )),
    }
}

/// The directory the repository `name` names below the grant's path (its first component is the
/// granted directory's own name), checked against the grant, one use counted.
fn directory(app: &App, granted: &Granted, name: &str) -> Result<String, Refusal> {
    let root = granted.path().trim_end_matches('/');
    let base = root.rsplit('/').next().unwrap_or_default();
    let (first, rest) = name.split_once('/').unwrap_or((name, ""));
    if first != base {
        let hint = if reg::valid_component(base) {
            format!("this grant opens the image {base:?} (its directory's name)")
        } else {
            format!("the granted directory's name {base:?} is not a valid repository name")
        };
        return Err(Refusal(
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
            format!("no image {name:?}: {hint}"),
        ));
    }
    let dir = if rest.is_empty() {
        root.to_owned()
    } else {
        format!("{root}/{rest}")
    };
    app.grants
        .use_for(granted, &format!("{dir}/"))
        .map_err(|e| match e {
            Error::GrantInvalid(m) => Refusal::unauthorized(m),
            other => Refusal::denied(other.to_string()),
        })?;
    Ok(dir)
}

fn path_refusal(e: PathError) -> Refusal {
    match e {
        PathError::NotFound => Refusal(
            StatusCode::NOT_FOUND,
            "UNSUPPORTED",
            "the shim serves only the pull routes: /v2/<name>/manifests/<reference> and /v2/<name>/blobs/<digest>"
                .into(),
        ),
        PathError::NameInvalid(m) => Refusal(StatusCode::BAD_REQUEST, "NAME_INVALID", m),
        PathError::DigestInvalid(m) => Refusal(StatusCode::BAD_REQUEST, "DIGEST_INVALID", m),
        PathError::TagInvalid(m) => Refusal(StatusCode::BAD_REQUEST, "TAG_INVALID", m),
    }
}

fn image_refusal(e: ImageError, blob: bool) -> Refusal {
    let not_found = |code, m| Refusal(StatusCode::NOT_FOUND, code, m);
    match e {
        ImageError::NameUnknown(m) => not_found("NAME_UNKNOWN", m),
        ImageError::ManifestUnknown(m) => not_found("MANIFEST_UNKNOWN", m),
        ImageError::BlobUnknown(m) => not_found("BLOB_UNKNOWN", m),
        ImageError::Invalid(m) if blob => not_found("BLOB_UNKNOWN", m),
        ImageError::Invalid(m) => not_found("MANIFEST_UNKNOWN", m),
        ImageError::Denied(m) => Refusal::denied(m),
        e @ ImageError::Io { .. } => {
            crate::warn!(cause = %e, "image request failed");
            Refusal(StatusCode::INTERNAL_SERVER_ERROR, "UNKNOWN", e.to_string())
        }
    }
}

/// The 200 answer for `found`: headers always, the content unless `head`.
fn answer(
    app: &Arc<App>,
    found: Found,
    head: bool,
    slot: Option<OwnedSemaphorePermit>,
) -> Response<Body> {
    let body = match found.content {
        _ if head => full(Bytes::new()),
        Content::Bytes(b) => full(b),
        content => stream(app, content, found.digest, found.len, slot),
    };
    let mut r = Response::new(body);
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&found.media_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(found.len));
    if let Ok(v) = HeaderValue::from_str(&reg::digest_string(&found.digest)) {
        h.insert(reg::DIGEST_HEADER, v);
    }
    r
}

/// Streams a blob or layer from the blocking pool, holding the slot (a blob `GET` always has
/// one) until it ends.
fn stream(
    app: &Arc<App>,
    content: Content,
    digest: [u8; 32],
    len: u64,
    slot: Option<OwnedSemaphorePermit>,
) -> Body {
    let (tx, rx) = mpsc::channel(2);
    let writer = ChannelWriter::new(tx.clone(), app.files.pace());
    let app = app.clone();
    crate::blocking::detach(Box::new(move || {
        let _slot = slot;
        let result = match content {
            Content::File(file) => send_verified(&app, file, len, &digest, writer),
            Content::Layer(source, validator) => source
                .write_from(writer, 0, Some(&validator))
                .map_err(|e| e.to_string())
                .and_then(|mut w| w.flush().map_err(|e| e.to_string())),
            Content::Bytes(_) => Ok(()),
        };
        if let Err(why) = result {
            crate::warn!(digest = %reg::digest_string(&digest), cause = %why, "image blob cut off");
            let _ = tx.try_send(Err(io::Error::other(why)));
        }
    }));
    ChannelBody(rx).boxed()
}

/// Sends `len` bytes of `file`; the last chunk goes only when the whole is known to match
/// `digest`: hashed as it is sent, or, for a file already verified and unchanged since (the same
/// `fstat` before and after), not hashed again. A client never receives a complete answer with
/// other content than it asked for.
fn send_verified(
    app: &App,
    mut file: std::fs::File,
    len: u64,
    digest: &[u8; 32],
    mut w: ChannelWriter,
) -> Result<(), String> {
    let key = FileKey::of(&file).map_err(|e| e.to_string())?;
    let known = app.images.is_verified(key, digest);
    let mut hasher = (!known).then(sha2::Sha256::new);
    let mut buf = vec![0u8; IO_CHUNK];
    let mut held: Vec<u8> = Vec::with_capacity(IO_CHUNK);
    let mut left = len;
    while left > 0 {
        let want = left.min(IO_CHUNK as u64) as usize;
        let n = file.read(&mut buf[..want]).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the blob is shorter than its size".into());
        }
        if let Some(h) = &mut hasher {
            h.update(&buf[..n]);
        }
        w.write_all(&held).map_err(|e| e.to_string())?;
        held.clear();
        held.extend_from_slice(&buf[..n]);
        left -= n as u64;
    }
    let matches = match hasher {
        Some(h) => <[u8; 32]>::from(h.finalize()) == *digest,
        None => FileKey::of(&file).is_ok_and(|now| now == key),
    };
    if !matches {
        return Err("the blob's content does not match its digest".into());
    }
    if !known {
        app.images.verified(key, *digest);
    }
    w.write_all(&held).map_err(|e| e.to_string())?;
    w.flush().map_err(|e| e.to_string())
}
