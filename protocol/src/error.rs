//! Error bodies and codes of protocol v1 (PROTOCOL.md section 3): one code per failure a client can
//! act on, each with its HTTP status.

use serde::{Deserialize, Serialize};

/// Every error body: `{"error":{"code":"...","message":"..."}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// A machine-readable code and a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// One of the codes in PROTOCOL.md (see [`ErrorCode`]); clients must accept codes they do not know.
    pub code: String,
    /// Human-readable, for logs and people; not to be parsed.
    pub message: String,
}

/// The error codes of protocol v1, with the HTTP status each comes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// 400: the request is malformed (query, header).
    BadRequest,
    /// 400: the body is not valid JSON for this route.
    InvalidJson,
    /// 400: a spawn spec that is valid JSON but unusable as given (a NUL byte, an env entry that is
    /// not `KEY=VALUE`).
    InvalidSpec,
    /// 400: the process id does not match `[A-Za-z0-9._-]{1,128}`.
    InvalidId,
    /// 400: an output offset that is not a frame boundary or lies past the end of the log.
    InvalidOffset,
    /// 400: an unknown signal name or a number outside 1..=64.
    InvalidSignal,
    /// 400: a file path that is not absolute or is otherwise unusable.
    InvalidPath,
    /// 400: a tar stream that is corrupt or has an entry escaping the target directory.
    InvalidTar,
    /// 400: a property name outside `[A-Za-z0-9._:-]` or over the length limit, or a value that is
    /// not UTF-8 (4.13).
    InvalidProperty,
    /// 401: missing or wrong bearer token.
    Unauthorized,
    /// 403: a grant token used outside its grant (another route, a path outside its prefix).
    Forbidden,
    /// 403: an `owner` of an upload or pull that this shim may not give (no `CAP_CHOWN`).
    OwnerNotPermitted,
    /// 404: no grant or pull with that id.
    NotFound,
    /// 412: a resumed `GET /v1/files` whose tree changed since the stream began.
    PreconditionFailed,
    /// 404: no such route.
    NoRoute,
    /// 404: no process with that id.
    ProcessNotFound,
    /// 404: no such file or directory.
    FileNotFound,
    /// 405: the route exists but not with this method.
    MethodNotAllowed,
    /// 409: a process with this id exists with a different spec.
    SpecConflict,
    /// 409: the process is still running (delete without force).
    StillRunning,
    /// 409: the process has exited (signal, stdin, resize).
    NotRunning,
    /// 409: the process has no tty (resize).
    NoTty,
    /// 409: the process was not started with stdin.
    NoStdin,
    /// 409: stdin offset beyond what was accepted; the body is the current offset.
    StdinGap,
    /// 409: new stdin bytes after EOF.
    StdinClosed,
    /// 409: a new property or a larger value past the store's count or byte limit (4.13).
    PropertiesFull,
    /// 413: the request body is too large.
    BodyTooLarge,
    /// 422: the executable does not exist or cannot be executed; nothing was recorded.
    ExecutableNotFound,
    /// 422: the user, group or directory of a spawn request is unusable.
    InvalidSpawn,
    /// 500: the shim failed in a way the client cannot fix.
    Internal,
    /// 503: the shim is shutting down or at a resource limit; retry elsewhere or later.
    Unavailable,
}

impl ErrorCode {
    /// Every code, so a received string maps back to its variant.
    pub const ALL: &[ErrorCode] = {
        use ErrorCode::*;
        &[
            BadRequest,
            InvalidJson,
            InvalidSpec,
            InvalidId,
            InvalidOffset,
            InvalidSignal,
            InvalidPath,
            InvalidTar,
            InvalidProperty,
            Unauthorized,
            Forbidden,
            OwnerNotPermitted,
            NotFound,
            PreconditionFailed,
            NoRoute,
            ProcessNotFound,
            FileNotFound,
            MethodNotAllowed,
            SpecConflict,
            StillRunning,
            NotRunning,
            NoTty,
            NoStdin,
            StdinGap,
            StdinClosed,
            PropertiesFull,
            BodyTooLarge,
            ExecutableNotFound,
            InvalidSpawn,
            Internal,
            Unavailable,
        ]
    };

    /// The code a wire string names; `None` for a code this version does not know (clients must
    /// accept those too).
    pub fn parse(code: &str) -> Option<ErrorCode> {
        Self::ALL.iter().copied().find(|c| c.as_str() == code)
    }

    /// The code's wire string.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            BadRequest => "bad_request",
            InvalidJson => "invalid_json",
            InvalidSpec => "invalid_spec",
            InvalidId => "invalid_id",
            InvalidOffset => "invalid_offset",
            InvalidSignal => "invalid_signal",
            InvalidPath => "invalid_path",
            InvalidTar => "invalid_tar",
            InvalidProperty => "invalid_property",
            Unauthorized => "unauthorized",
            Forbidden => "forbidden",
            OwnerNotPermitted => "owner_not_permitted",
            NotFound => "not_found",
            PreconditionFailed => "precondition_failed",
            NoRoute => "no_route",
            ProcessNotFound => "process_not_found",
            FileNotFound => "file_not_found",
            MethodNotAllowed => "method_not_allowed",
            SpecConflict => "spec_conflict",
            StillRunning => "still_running",
            NotRunning => "not_running",
            NoTty => "no_tty",
            NoStdin => "no_stdin",
            StdinGap => "stdin_gap",
            StdinClosed => "stdin_closed",
            PropertiesFull => "properties_full",
            BodyTooLarge => "body_too_large",
            ExecutableNotFound => "executable_not_found",
            InvalidSpawn => "invalid_spawn",
            Internal => "internal",
            Unavailable => "unavailable",
        }
    }

    /// The HTTP status the code is sent with.
    pub fn status(self) -> u16 {
        use ErrorCode::*;
        match self {
            BadRequest | InvalidJson | InvalidSpec | InvalidId | InvalidOffset | InvalidSignal
            | InvalidPath | InvalidTar | InvalidProperty => 400,
            Unauthorized => 401,
            Forbidden | OwnerNotPermitted => 403,
            NoRoute | ProcessNotFound | FileNotFound | NotFound => 404,
            MethodNotAllowed => 405,
            SpecConflict | StillRunning | NotRunning | NoTty | NoStdin | StdinGap | StdinClosed
            | PropertiesFull => 409,
            BodyTooLarge => 413,
            ExecutableNotFound | InvalidSpawn => 422,
            PreconditionFailed => 412,
            Internal => 500,
            Unavailable => 503,
        }
    }

    /// The JSON body for this code and a message.
    pub fn body(self, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.as_str().to_owned(),
                message: message.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_parses_back_and_statuses_are_errors() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            assert!((400..600).contains(&code.status()), "{code:?}");
        }
        let mut names: Vec<_> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorCode::ALL.len(), "codes are distinct");
        assert_eq!(ErrorCode::parse("some_future_code"), None);
    }
}
