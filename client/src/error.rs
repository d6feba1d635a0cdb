//! Errors of the shim client.

use protocol::ErrorCode;
use thiserror::Error;

/// What a call to a shim can fail with.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The shim answered with a protocol error.
    #[error("shim answered {status} {wire_code}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The protocol error code; `None` for a code this client does not know (or no JSON body).
        code: Option<ErrorCode>,
        /// The code as sent, known or not.
        wire_code: String,
        /// The shim's message.
        message: String,
    },
    /// An output stream ended before the exit frame, again and again (the process was deleted, or
    /// the shim is stopping).
    #[error("output of {id:?} ended before its exit frame")]
    StreamEnded {
        /// The process.
        id: String,
    },
    /// The base URL is unusable.
    #[error("invalid shim URL {0:?}")]
    InvalidUrl(String),
    /// The token cannot travel in that header (not a valid header value).
    #[error("the token is not a valid value for the {0:?} header")]
    InvalidToken(crate::TokenHeader),
    /// The TLS configuration for a pinned shim could not be made.
    #[error("TLS configuration for the shim: {0}")]
    Tls(#[source] stepshim_tls::Error),
    /// Connecting or sending failed (the transport's own error: direct, or through a proxy).
    #[error("cannot reach the shim: {0}")]
    Transport(#[source] crate::BoxError),
    /// The connection broke while reading an answer.
    #[error("connection to the shim broke: {0}")]
    Body(#[source] crate::BoxError),
    /// An answer went past one of this client's bounds ([`crate::h1::MAX_BODY`] for a JSON answer
    /// or the metrics, the `X-Stepshim-Stream-Length` of a files stream): the peer is broken or
    /// hostile, and asking again gets the same. Its connection is closed.
    #[error("the shim's {what} is over this client's limit of {limit} bytes")]
    TooLarge {
        /// What was being read.
        what: &'static str,
        /// The bound in bytes.
        limit: u64,
    },
    /// An answer was not the JSON the protocol promises.
    #[error("unexpected answer from the shim: {0}")]
    Json(#[source] serde_json::Error),
    /// The output stream was not a valid frame stream.
    #[error("corrupt output stream: {0}")]
    Frame(#[source] protocol::FrameError),
    /// The shim speaks another protocol version than this client (its `GET /v1/info`): nothing else
    /// is asked of it. The message names both versions and which side to upgrade.
    #[error("{}", incompatible_line(*shim, shim_release, *ours))]
    Incompatible {
        /// The shim's protocol version.
        shim: u32,
        /// The shim's release (`version` of its info).
        shim_release: String,
        /// This client's protocol version, [`protocol::PROTOCOL_VERSION`].
        ours: u32,
    },
    /// The shim has no such route (404 `no_route`): it is an older release of the same protocol,
    /// without a feature this call needs.
    #[error(
        "the shim has no {method} {route} (404 no_route): it is older than this client \
         (stepshim {}); upgrade the shim image to use this",
        env!("CARGO_PKG_VERSION")
    )]
    Unsupported {
        /// The request's method.
        method: String,
        /// The route, without its query.
        route: String,
    },
    /// Gave up resuming an output stream.
    #[error("output stream of {id:?} lost after {attempts} attempts: {last}")]
    ResumeExhausted {
        /// The process.
        id: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: Box<ClientError>,
    },
}

/// The one line of [`ClientError::Incompatible`]: both versions, and what to upgrade.
fn incompatible_line(shim: u32, shim_release: &str, ours: u32) -> String {
    let this = env!("CARGO_PKG_VERSION");
    let advice = if shim > ours {
        format!(
            "upgrade the controller (stepctl, the Go kit) to a release of protocol {shim}, \
             or run the pod with a shim image of protocol {ours} (stepshim {this})"
        )
    } else {
        format!(
            "upgrade the shim (the image of stepctl run --shim-image, the ConfigMap of \
             stepctl manifests --shim-configmap, or the --shim-bin binary) to stepshim {this} \
             or another release of protocol {ours}"
        )
    };
    format!(
        "the shim speaks protocol {shim} (stepshim {shim_release}) and this client protocol \
         {ours} (stepshim {this}): {advice}"
    )
}

impl ClientError {
    /// The protocol error code, for API errors with a code this client knows.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api { code, .. } => *code,
            _ => None,
        }
    }

    /// Whether this is a refusal by something in front of the shim (the apiserver's proxy): an
    /// authentication, authorization or rate answer without the shim's error body. The shim itself
    /// never answers 403 or 429, and its 401 carries a body. An apiserver that has just restarted
    /// refuses in this way until its authorizer has caught up, so a caller whose requests were
    /// served a moment ago may take it as transient.
    pub fn is_proxy_refusal(&self) -> bool {
        matches!(
            self,
            ClientError::Api { status: 401 | 403 | 429, code: None, wire_code, .. } if wire_code.is_empty()
        )
    }

    /// Whether retrying the same call may succeed (the connection broke; the shim did not refuse).
    pub fn is_transient(&self) -> bool {
        matches!(self, ClientError::Transport(_) | ClientError::Body(_))
            || matches!(
                self,
                ClientError::Api {
                    status: 502..=504,
                    ..
                }
            )
    }
}
