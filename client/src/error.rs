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
    /// Connecting or sending failed (the transport's own error: direct, or through a proxy).
    #[error("cannot reach the shim: {0}")]
    Transport(#[source] crate::BoxError),
    /// The connection broke while reading an answer.
    #[error("connection to the shim broke: {0}")]
    Body(#[source] crate::BoxError),
    /// An answer was not the JSON the protocol promises.
    #[error("unexpected answer from the shim: {0}")]
    Json(#[source] serde_json::Error),
    /// The output stream was not a valid frame stream.
    #[error("corrupt output stream: {0}")]
    Frame(#[source] protocol::FrameError),
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
