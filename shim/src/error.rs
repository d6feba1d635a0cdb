//! The shim's request errors and their single mapping to the wire error body: each variant names its
//! protocol code, and messages say what the client did wrong without exposing internals.

use protocol::ErrorCode;
use thiserror::Error;

use crate::files::FilesError;

/// Everything a request can fail with.
#[derive(Debug, Error)]
pub(crate) enum Error {
    /// No process has this id.
    #[error("no process with id {0:?}")]
    ProcessNotFound(String),
    /// The id exists with another spec.
    #[error("process {0:?} exists with a different spec")]
    SpecConflict(String),
    /// The executable cannot be found or executed.
    #[error("cannot execute {path:?}: {source}")]
    ExecutableNotFound {
        /// The requested path.
        path: String,
        /// The errno of the failed lookup or exec.
        #[source]
        source: std::io::Error,
    },
    /// The user or directory of a spawn is unusable.
    #[error("{0}")]
    InvalidSpawn(String),
    /// The output offset is not a frame boundary within the log.
    #[error("offset {offset} is not a frame boundary of the log (its end is {end})")]
    InvalidOffset {
        /// Requested offset.
        offset: u64,
        /// End of the log.
        end: u64,
    },
    /// Stdin offset beyond what was accepted.
    #[error("stdin offset {offset} is past the {accepted} bytes accepted so far")]
    StdinGap {
        /// Requested offset.
        offset: u64,
        /// Bytes accepted.
        accepted: u64,
    },
    /// New stdin bytes after EOF, or the process closed its stdin.
    #[error("stdin is closed after {accepted} bytes")]
    StdinClosed {
        /// Bytes accepted.
        accepted: u64,
    },
    /// The process was spawned without stdin.
    #[error("process was spawned without stdin")]
    NoStdin,
    /// The process has exited.
    #[error("process {0:?} is not running")]
    NotRunning(String),
    /// The process is running (delete without force).
    #[error("process {0:?} is still running; use force=1 to kill it")]
    StillRunning(String),
    /// The process has no tty.
    #[error("process has no tty")]
    NoTty,
    /// Unknown signal.
    #[error("unknown signal {0}")]
    InvalidSignal(String),
    /// Body is not valid JSON for the route.
    #[error("invalid JSON body: {0}")]
    InvalidJson(String),
    /// Malformed query or header.
    #[error("{0}")]
    BadRequest(String),
    /// Malformed process id.
    #[error("process ids must match [A-Za-z0-9._-]{{1,128}}")]
    InvalidId,
    /// No such route.
    #[error("no route {0}")]
    NoRoute(String),
    /// Wrong method; the payload is the allowed list.
    #[error("method not allowed; allowed: {0}")]
    MethodNotAllowed(&'static str),
    /// Bad or missing token.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// Body over the limit.
    #[error("request body larger than {0} bytes")]
    BodyTooLarge(usize),
    /// A files route failed.
    #[error(transparent)]
    Files(#[from] FilesError),
    /// Shutting down, or out of a resource.
    #[error("{0}")]
    Unavailable(String),
    /// A spawn spec that parsed but cannot be used as given (NUL bytes, malformed env entries).
    #[error("invalid spawn spec: {0}")]
    InvalidSpec(String),
    /// A spawn spec's strings together are over `STEPSHIM_MAX_SPEC_BYTES`.
    #[error("spawn spec of {size} bytes is over the limit of {limit}")]
    SpecTooLarge {
        /// Bytes of path, args, env, dir and user.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A resumed `GET /v1/files` whose tree no longer has the ETag it was resumed with.
    #[error("{0}")]
    TreeChanged(String),
    /// A `GET /v1/files` offset past the end of the stream.
    #[error("offset {offset} is past the end of the {len}-byte stream")]
    StreamOffset {
        /// Requested offset.
        offset: u64,
        /// Bytes of the whole stream.
        len: u64,
    },
    /// The request's credentials (a grant token) do not allow it.
    #[error("{0}")]
    Forbidden(String),
    /// An upload's or pull's `owner` that this shim may not give (no `CAP_CHOWN`).
    #[error("{0}")]
    OwnerNotPermitted(String),
    /// A grant token that is expired, used up or revoked.
    #[error("{0}")]
    GrantInvalid(String),
    /// A pull id that exists with another spec.
    #[error("pull {0:?} exists with a different spec")]
    PullConflict(String),
    /// No grant or pull with this id.
    #[error("{0}")]
    NotFound(String),
    /// A property name or value the protocol does not allow.
    #[error("{0}")]
    InvalidProperty(&'static str),
    /// The properties store is full by count or bytes.
    #[error("{0}")]
    PropertiesFull(&'static str),
    /// The shim failed; `context` says at what, the source stays in the shim's log.
    #[error("internal error: {context}")]
    Internal {
        /// What the shim was doing.
        context: &'static str,
        /// The cause, logged, never sent.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The protocol code, which also fixes the HTTP status.
    pub(crate) fn code(&self) -> ErrorCode {
        use Error::*;
        match self {
            ProcessNotFound(_) => ErrorCode::ProcessNotFound,
            SpecConflict(_) => ErrorCode::SpecConflict,
            ExecutableNotFound { .. } => ErrorCode::ExecutableNotFound,
            InvalidSpawn(_) => ErrorCode::InvalidSpawn,
            InvalidOffset { .. } => ErrorCode::InvalidOffset,
            StdinGap { .. } => ErrorCode::StdinGap,
            StdinClosed { .. } => ErrorCode::StdinClosed,
            NoStdin => ErrorCode::NoStdin,
            NotRunning(_) => ErrorCode::NotRunning,
            StillRunning(_) => ErrorCode::StillRunning,
            NoTty => ErrorCode::NoTty,
            InvalidSignal(_) => ErrorCode::InvalidSignal,
            InvalidJson(_) => ErrorCode::InvalidJson,
            BadRequest(_) => ErrorCode::BadRequest,
            InvalidId => ErrorCode::InvalidId,
            NoRoute(_) => ErrorCode::NoRoute,
            MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            Unauthorized => ErrorCode::Unauthorized,
            BodyTooLarge(_) => ErrorCode::BodyTooLarge,
            Files(FilesError::InvalidPath(_) | FilesError::Symlinked(_)) => ErrorCode::InvalidPath,
            Files(FilesError::NotFound(_)) => ErrorCode::FileNotFound,
            Files(FilesError::InvalidTar(_)) => ErrorCode::InvalidTar,
            Files(FilesError::TooLarge(_)) => ErrorCode::BodyTooLarge,
            Files(FilesError::Io { .. }) => ErrorCode::Internal,
            Unavailable(_) => ErrorCode::Unavailable,
            InvalidSpec(_) => ErrorCode::InvalidSpec,
            SpecTooLarge { .. } => ErrorCode::BodyTooLarge,
            Internal { .. } => ErrorCode::Internal,
            TreeChanged(_) => ErrorCode::PreconditionFailed,
            StreamOffset { .. } => ErrorCode::InvalidOffset,
            Forbidden(_) => ErrorCode::Forbidden,
            OwnerNotPermitted(_) => ErrorCode::OwnerNotPermitted,
            GrantInvalid(_) => ErrorCode::Unauthorized,
            NotFound(_) => ErrorCode::NotFound,
            PullConflict(_) => ErrorCode::SpecConflict,
            InvalidProperty(_) => ErrorCode::InvalidProperty,
            PropertiesFull(_) => ErrorCode::PropertiesFull,
        }
    }

    /// The error body sent to the client.
    pub(crate) fn body(&self) -> protocol::ErrorBody {
        self.code().body(self.to_string())
    }

    /// An I/O failure: 503 `unavailable` when the shim is out of a resource it may get back
    /// (descriptors, processes, memory), else internal.
    pub(crate) fn io(context: &'static str, source: std::io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM) => {
                Error::Unavailable(format!("{context}: out of resources ({source})"))
            }
            _ => Error::Internal { context, source },
        }
    }

    /// An internal error with context.
    pub(crate) fn internal(context: &'static str, source: std::io::Error) -> Self {
        Error::Internal { context, source }
    }
}
