//! Response bodies and request parsing shared by the handlers: JSON and error answers, a body fed by a
//! channel (for streams produced by a task), bounded JSON request bodies, and query parameters.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::error::Error;

/// The body type of every response.
pub(crate) type Body = BoxBody<Bytes, std::io::Error>;

/// Largest JSON request body.
pub(crate) const JSON_LIMIT: usize = 1 << 20;

/// A body whose chunks come from a channel; an `Err` item aborts the response (the client sees a
/// truncated stream, never a silently short one).
#[derive(Debug)]
pub(crate) struct ChannelBody(pub(crate) mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(Frame::data)))
    }
}

/// A complete body.
pub(crate) fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A JSON answer.
pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut r = Response::new(full(bytes));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// The answer for an error: its status, JSON body, and `WWW-Authenticate`/`Allow` where they apply.
pub(crate) fn error(err: &Error) -> Response<Body> {
    let code = err.code();
    let status = StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = json(status, &err.body());
    match err {
        Error::Unauthorized => {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"stepshim\""),
            );
        }
        Error::MethodNotAllowed(allow) => {
            r.headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static(allow));
        }
        _ => {}
    }
    r
}

/// An empty answer.
pub(crate) fn empty(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// Reads and parses a JSON body of at most [`JSON_LIMIT`] bytes.
pub(crate) async fn read_json<T: DeserializeOwned>(
    body: hyper::body::Incoming,
) -> Result<T, Error> {
    let bytes = read_limited(body, JSON_LIMIT).await?;
    serde_json::from_slice(&bytes).map_err(|e| Error::InvalidJson(e.to_string()))
}

/// A request body of at most `limit` bytes (413 beyond); one copy of this code for every route
/// that reads a whole body.
pub(super) async fn read_limited(
    body: hyper::body::Incoming,
    limit: usize,
) -> Result<Bytes, Error> {
    Limited::new(body, limit)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Error::BodyTooLarge(limit)
            } else {
                Error::BadRequest(format!("reading the body: {e}"))
            }
        })
}

/// Parsed query parameters of a request.
#[derive(Debug, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    /// Parses a query string; a broken percent-escape is a bad request.
    pub(crate) fn parse(q: Option<&str>) -> Result<Self, Error> {
        let mut out = Vec::new();
        for (k, v) in protocol::routes::query_pairs(q.unwrap_or("")) {
            let v = v.ok_or_else(|| {
                Error::BadRequest(format!("query parameter {k:?} is badly encoded"))
            })?;
            out.push((k.to_owned(), v));
        }
        Ok(Query(out))
    }

    /// The value of `name`, last one winning.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean flag: `1` or `true`.
    pub(crate) fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("1") | Some("true"))
    }

    /// An unsigned integer parameter, with a default when absent.
    pub(crate) fn u64(&self, name: &str, default: u64) -> Result<u64, Error> {
        match self.get(name) {
            None | Some("") => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| Error::BadRequest(format!("{name} must be a non-negative integer"))),
        }
    }
}
