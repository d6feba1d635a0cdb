//! Errors of the shim client.

use thiserror::Error;

/// What a call to a shim can fail with.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The shim answered with a protocol error.
    #[error("shim answered {status} {code}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Protocol error code (`process_not_found`, ...).
        code: String,
        /// The shim's message.
        message: String,
    },
    /// The base URL is unusable.
    #[error("invalid shim URL {0:?}")]
    InvalidUrl(String),
    /// Connecting or sending failed.
    #[error("cannot reach the shim: {0}")]
    Transport(#[source] hyper_util::client::legacy::Error),
    /// The connection broke while reading an answer.
    #[error("connection to the shim broke: {0}")]
    Body(#[source] hyper::Error),
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
    /// The protocol error code, for API errors.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
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
