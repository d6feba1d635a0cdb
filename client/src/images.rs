//! Images a shim serves under `/v2/` (OCI distribution, pull side): what the controller asks before
//! it names an image by digest. Errors there carry the OCI error body
//! (`{"errors":[{"code":..,"message":..}]}`), read into [`ClientError::Api`] with the OCI code as
//! its `wire_code`.

use bytes::Bytes;
use http::{Method, StatusCode};
use protocol::registry::{self, DIGEST_HEADER};

use crate::transport::{full_body, read_cut};
use crate::{ClientError, ShimClient, h1};

/// What `HEAD /v2/<name>/manifests/<reference>` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestHead {
    /// `sha256:<64 hex>`, the digest to pin the image by.
    pub digest: String,
    /// The manifest's media type (an image manifest, or an index).
    pub media_type: String,
    /// The manifest's size in bytes.
    pub size: u64,
}

impl ShimClient {
    /// `HEAD /v2/<name>/manifests/<reference>` with this client's token (a grant token: see
    /// [`ShimClient::with_grant_token`]). A refusal is read again with `GET` (a `HEAD` answer has
    /// no body) so the error carries the shim's OCI code and message.
    pub async fn image_manifest(
        &self,
        name: &str,
        reference: &str,
    ) -> Result<ManifestHead, ClientError> {
        let path = format!("/v2/{name}/manifests/{reference}");
        let req = self.request(Method::HEAD, &path, full_body(Bytes::new()))?;
        let resp = self
            .transport
            .send(req)
            .await
            .map_err(ClientError::Transport)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(self.oci_error(&path, status).await);
        }
        let header = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let digest = header(DIGEST_HEADER);
        if registry::parse_digest(&digest).is_err() {
            return Err(ClientError::Api {
                status: status.as_u16(),
                code: None,
                wire_code: String::new(),
                message: format!("no sha256 Docker-Content-Digest in the answer ({digest:?})"),
            });
        }
        Ok(ManifestHead {
            digest,
            media_type: header(http::header::CONTENT_TYPE.as_str()),
            size: header(http::header::CONTENT_LENGTH.as_str())
                .parse()
                .unwrap_or(0),
        })
    }

    /// The error of a refused `HEAD` on `path`: its `GET`'s OCI error body, or the status alone.
    async fn oci_error(&self, path: &str, head_status: StatusCode) -> ClientError {
        let bare = |message: String| ClientError::Api {
            status: head_status.as_u16(),
            code: None,
            wire_code: String::new(),
            message,
        };
        let Ok(req) = self.request(Method::GET, path, full_body(Bytes::new())) else {
            return bare(String::new());
        };
        let resp = match self.transport.send(req).await {
            Ok(r) => r,
            Err(e) => return ClientError::Transport(e),
        };
        let status = resp.status();
        let body = read_cut(resp.into_body(), h1::MAX_ERROR_BODY)
            .await
            .unwrap_or_default();
        if status.is_success() {
            return bare(format!("HEAD answered {head_status}, GET {status}"));
        }
        oci_error_of(status, &body)
    }
}

/// The error an answer of `status` with an OCI error body (or anything else) stands for.
fn oci_error_of(status: StatusCode, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<registry::Errors>(body) {
        Ok(e) if !e.errors.is_empty() => ClientError::Api {
            status: status.as_u16(),
            code: None,
            wire_code: e.errors[0].code.clone(),
            message: e.errors[0].message.clone(),
        },
        // Not the registry's body: the shim's own error (an older shim: no /v2/), or a proxy's.
        _ => crate::api_error_of(status, body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_bodies_name_their_code_and_message() {
        let body = br#"{"errors":[{"code":"NAME_UNKNOWN","message":"no image in /out"}]}"#;
        match oci_error_of(StatusCode::NOT_FOUND, body) {
            ClientError::Api {
                status,
                wire_code,
                message,
                ..
            } => {
                assert_eq!((status, wire_code.as_str()), (404, "NAME_UNKNOWN"));
                assert_eq!(message, "no image in /out");
            }
            other => panic!("{other:?}"),
        }
        // The shim's own error body (no /v2/ route): its code.
        let body = br#"{"error":{"code":"no_route","message":"no such route"}}"#;
        assert!(matches!(
            oci_error_of(StatusCode::NOT_FOUND, body),
            ClientError::Api {
                code: Some(protocol::ErrorCode::NoRoute),
                ..
            }
        ));
    }
}
