//! Artifacts between shims (PROTOCOL.md 4.9 and 4.10): read grants on a source shim, pulls on a
//! destination shim, and the header of a resumable `GET /v1/files` (4.8.1).

use serde::{Deserialize, Serialize};

use crate::object::object_only;

/// `POST` registers a grant, `GET` lists them.
pub const GRANTS: &str = "/v1/grants";
/// `GET` lists the pulls.
pub const PULLS: &str = "/v1/pulls";
/// Response header of `GET /v1/files`: bytes of the whole stream (`Content-Length` counts only
/// what follows the requested offset).
pub const STREAM_LENGTH_HEADER: &str = "x-stepshim-stream-length";

/// `/v1/grants/{id}`
pub fn grant_path(id: &str) -> String {
    format!("{GRANTS}/{id}")
}

/// `/v1/pulls/{id}`
pub fn pull_path(id: &str) -> String {
    format!("{PULLS}/{id}")
}

/// Body of `POST /v1/grants`: who may read what, for how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct GrantRequest {
    /// Absolute path prefix: `GET /v1/files?path=P` is allowed when `P` is this path or below it
    /// (by whole components, after resolving symlinks on both).
    pub path: String,
    /// Hex SHA-256 of the grant token the caller chose (at least 16 bytes of randomness).
    pub token_sha256: String,
    /// Seconds from now until the grant expires (at least 1).
    pub ttl_seconds: u64,
    /// How many `GET /v1/files` requests the token may make; absent: unlimited until it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u64>,
}
object_only!(GrantRequest);

/// A grant as the shim reports it (never with its token's hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Assigned by the shim, for `DELETE /v1/grants/{id}`.
    pub id: String,
    /// The path prefix.
    pub path: String,
    /// Seconds left until it expires (0 once expired).
    pub expires_in_seconds: u64,
    /// Uses left, when it was given a count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses_left: Option<u64>,
    /// `GET /v1/files` requests made with it so far.
    pub used: u64,
}

/// Answer of `GET /v1/grants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantList {
    /// Every grant not yet revoked, expired ones included until they are pruned.
    pub grants: Vec<Grant>,
}

/// Body of `PUT /v1/pulls/{id}`: fetch `path` from the shim at `source` with a grant token and
/// extract it under `target`. Two pulls with the same id are the same request exactly when their
/// specs are equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct PullSpec {
    /// The source shim's base URL, `http://IP:PORT` or `https://IP:PORT` (an IP literal: the shim
    /// resolves no names).
    pub source: String,
    /// The source's pin (64 hex digits, PROTOCOL.md 1.1): required with `https://`, refused with
    /// `http://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pin: Option<String>,
    /// The path on the source, as `GET /v1/files?path=` takes it (a trailing `/`: the contents).
    pub path: String,
    /// The grant token for the source.
    pub token: String,
    /// The absolute directory to extract under (created if missing).
    pub target: String,
    /// Expected hex SHA-256 of the whole tar stream; a mismatch fails the pull before anything is
    /// moved into place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Retries (failed attempts in a row after the first: 2 makes at most 3 attempts) before the
    /// source has answered once (at most, and by default, the shim's `STEPSHIM_PULL_RETRIES`): a
    /// caller with another way to move the bytes sets it low to learn soon that the source cannot
    /// be reached. Once the source has answered, the shim's setting applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_retries: Option<u32>,
    /// The owner of every pulled entry and every directory the pull creates (PROTOCOL.md 4.8.3);
    /// absent: owners as an upload without `owner` gets them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<crate::owner::Owner>,
}
object_only!(PullSpec);

/// Where a pull is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PullState {
    /// Fetching and extracting (also while waiting to resume after a cut connection).
    Running,
    /// Extracted and moved into place.
    Done,
    /// Gave up: `error` says why; nothing was moved into place.
    Failed,
}

/// Answer of `PUT` and `GET /v1/pulls/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PullStatus {
    /// The pull's id.
    pub id: String,
    /// Where it is.
    pub state: PullState,
    /// The source's base URL.
    pub source: String,
    /// The path on the source.
    pub path: String,
    /// The directory extracted under.
    pub target: String,
    /// Bytes of the tar stream received so far (across resumed connections).
    pub bytes: u64,
    /// Bytes of the whole stream, once the source told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Average bytes per second since the pull began (until it ended).
    pub bytes_per_second: u64,
    /// Connections that were cut and resumed from the bytes received.
    pub resumes: u32,
    /// Whether the source answered at all (any status): a failed pull that never reached its
    /// source may be retried another way (through the controller).
    #[serde(default)]
    pub reached: bool,
    /// Answers of a busy source (503: its transfer slots all taken) waited out so far.
    #[serde(default)]
    pub busy: u32,
    /// Whether the pull is waiting for a busy source now.
    #[serde(default)]
    pub waiting: bool,
    /// Hex SHA-256 of the whole stream, once complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Entries extracted, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Answer of `GET /v1/pulls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PullList {
    /// Every pull not deleted.
    pub pulls: Vec<PullStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_objects_with_known_fields() {
        let g: GrantRequest =
            serde_json::from_str(r#"{"path":"/w","token_sha256":"ab","ttl_seconds":5}"#).unwrap();
        assert_eq!(g.uses, None);
        assert!(serde_json::from_str::<GrantRequest>(r#"["/w","ab",5]"#).is_err());
        assert!(
            serde_json::from_str::<PullSpec>(
                r#"{"source":"http://a:1","path":"/x","token":"t","target":"/y","bogus":1}"#
            )
            .is_err()
        );
        assert_eq!(pull_path("p1"), "/v1/pulls/p1");
    }
}
