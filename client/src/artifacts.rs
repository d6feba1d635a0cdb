//! Artifacts between shims (PROTOCOL.md 4.8.1, 4.9, 4.10): grants on a source shim, pulls on a
//! destination shim, a client presenting a grant token, and the resumable `GET /v1/files`.

use bytes::Bytes;
use http::{Method, header};
use http_body_util::BodyExt;
use protocol::artifacts::{
    self, Grant, GrantList, GrantRequest, PullList, PullSpec, PullStatus, STREAM_LENGTH_HEADER,
};
use protocol::query;
use protocol::routes;

use crate::transport::full_body;
use crate::{ClientError, ShimClient};

/// One response of a (possibly resumed) `GET /v1/files`.
#[derive(Debug)]
pub struct FilesOut {
    /// The tar stream from the requested offset on.
    pub body: crate::RespBody,
    /// The tree's validator, for resuming.
    pub etag: String,
    /// Bytes of the whole stream.
    pub total: u64,
}

impl ShimClient {
    /// The same shim addressed with a grant token instead of this client's token: it may only
    /// `GET /v1/files` under the grant's path.
    pub fn with_grant_token(&self, token: &str) -> Self {
        // The same header as this client's token: `Authorization` direct, `X-Stepshim-Token`
        // through a proxy. A token that is no valid header value sends none (and gets 401).
        let kind = match &self.auth {
            Some((name, _)) if name != http::header::AUTHORIZATION => crate::TokenHeader::Proxy,
            _ => crate::TokenHeader::Bearer,
        };
        ShimClient {
            base: self.base.clone(),
            pin: self.pin,
            auth: kind.pair(token),
            transport: self.transport.clone(),
        }
    }

    /// `POST /v1/grants`
    pub async fn grant(&self, req: &GrantRequest) -> Result<Grant, ClientError> {
        let body = Self::json_body(req);
        Ok(self.call(Method::POST, artifacts::GRANTS, body).await?.1)
    }

    /// `GET /v1/grants`
    pub async fn grants(&self) -> Result<Vec<Grant>, ClientError> {
        let (_, list): (_, GrantList) = self
            .call(Method::GET, artifacts::GRANTS, Bytes::new())
            .await?;
        Ok(list.grants)
    }

    /// `DELETE /v1/grants/{id}`
    pub async fn revoke_grant(&self, id: &str) -> Result<(), ClientError> {
        let path = artifacts::grant_path(id);
        self.exchange(Method::DELETE, &path, Bytes::new())
            .await
            .map(|_| ())
    }

    /// `PUT /v1/pulls/{id}[?wait=S]`: starts the pull (or finds the same one) and, with `wait`,
    /// waits up to that many seconds for it to end.
    pub async fn pull(
        &self,
        id: &str,
        spec: &PullSpec,
        wait: Option<u32>,
    ) -> Result<PullStatus, ClientError> {
        let q = wait_query(&artifacts::pull_path(id), wait);
        Ok(self.call(Method::PUT, &q, Self::json_body(spec)).await?.1)
    }

    /// `GET /v1/pulls/{id}[?wait=S]`
    pub async fn pull_status(
        &self,
        id: &str,
        wait: Option<u32>,
    ) -> Result<PullStatus, ClientError> {
        let q = wait_query(&artifacts::pull_path(id), wait);
        Ok(self.call(Method::GET, &q, Bytes::new()).await?.1)
    }

    /// `GET /v1/pulls`
    pub async fn pulls(&self) -> Result<Vec<PullStatus>, ClientError> {
        let (_, list): (_, PullList) = self
            .call(Method::GET, artifacts::PULLS, Bytes::new())
            .await?;
        Ok(list.pulls)
    }

    /// `DELETE /v1/pulls/{id}`: cancels it if it runs, and forgets it.
    pub async fn delete_pull(&self, id: &str) -> Result<(), ClientError> {
        let path = artifacts::pull_path(id);
        self.exchange(Method::DELETE, &path, Bytes::new())
            .await
            .map(|_| ())
    }

    /// `GET /v1/files?path=P[&offset=N]` with `If-Match` when resuming: the stream from `offset` on,
    /// or 412 `precondition_failed` when the tree no longer has `etag`.
    pub async fn files_out_at(
        &self,
        path: &str,
        offset: u64,
        etag: Option<&str>,
    ) -> Result<FilesOut, ClientError> {
        let off = offset.to_string();
        let mut pairs = vec![(query::PATH, path)];
        if offset > 0 {
            pairs.push((query::OFFSET, &off));
        }
        if let Some(e) = etag {
            pairs.push((query::ETAG, e));
        }
        let q = format!("{}{}", routes::FILES, query::build(&pairs));
        let resp = self.send(Method::GET, &q, full_body(Bytes::new())).await?;
        let h = resp.headers();
        let etag = h
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let total = h
            .get(STREAM_LENGTH_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(FilesOut {
            body: resp.into_body(),
            etag,
            total,
        })
    }

    /// The whole `GET /v1/files` stream in memory, resumed after cuts (at most `attempts` in a
    /// row without progress): for small trees and tests. A stream that goes past the length it
    /// announced (`X-Stepshim-Stream-Length`) is [`ClientError::TooLarge`].
    pub async fn files_out_resumed(
        &self,
        path: &str,
        attempts: u32,
    ) -> Result<Vec<u8>, ClientError> {
        let mut got = Vec::new();
        let mut etag: Option<String> = None;
        let mut failures = 0;
        loop {
            let before = got.len();
            let attempt = async {
                let out = self
                    .files_out_at(path, got.len() as u64, etag.as_deref())
                    .await?;
                etag = Some(out.etag.clone());
                let mut body = out.body;
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame.map_err(ClientError::Body)?.into_data() {
                        got.extend_from_slice(&data);
                        if got.len() as u64 > out.total {
                            return Err(ClientError::TooLarge {
                                what: "files stream",
                                limit: out.total,
                            });
                        }
                    }
                }
                Ok::<u64, ClientError>(out.total)
            };
            match attempt.await {
                Ok(total) if got.len() as u64 == total => return Ok(got),
                Ok(_) => {}
                Err(e) if !e.is_transient() => return Err(e),
                Err(_) => {}
            }
            failures = if got.len() > before { 1 } else { failures + 1 };
            if failures > attempts {
                return Err(ClientError::StreamEnded {
                    id: path.to_owned(),
                });
            }
        }
    }
}

fn wait_query(path: &str, wait: Option<u32>) -> String {
    match wait {
        Some(w) => format!("{path}{}", query::build(&[(query::WAIT, &w.to_string())])),
        None => path.to_owned(),
    }
}
