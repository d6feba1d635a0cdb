//! Artifacts between step pods (PROTOCOL.md 4.10, 4.11): a tree of one shim copied into a directory of
//! another, directly (a grant on the source, a pull by the destination: the bytes never pass through
//! the controller) or through the controller (it reads the source's resumable `GET /v1/files` and
//! writes the destination's `PUT /v1/files`), the latter chosen explicitly or as the fallback when the
//! destination cannot connect to the source.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use client::{ClientError, ShimClient};
use http_body_util::BodyExt;
use protocol::artifacts::{GrantRequest, PullSpec, PullState, PullStatus};
use tokio::sync::mpsc;

/// How a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// A pull by the destination; through the controller if it cannot connect to the source.
    Direct,
    /// Always through the controller.
    Controller,
}

/// How a copy went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// Whether it went directly (a pull) or through the controller.
    pub direct: bool,
    /// Bytes of the tar stream.
    pub bytes: u64,
    /// Connections resumed.
    pub resumes: u32,
    /// SHA-256 of the stream (direct pulls).
    pub sha256: Option<String>,
    /// Why a direct pull fell back to the controller.
    pub fallback: Option<String>,
}

/// Failures of a copy.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// A shim refused or could not be reached.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The pull failed.
    #[error("pull {id} failed: {error}")]
    Pull {
        /// The pull's id.
        id: String,
        /// Its error.
        error: String,
    },
    /// The stream through the controller broke for good.
    #[error("streaming {path} through the controller: {why}")]
    Stream {
        /// The source path.
        path: String,
        /// What broke.
        why: String,
    },
}

/// Lifetime of a grant made for one copy (revoked when the copy ends).
const GRANT_TTL: Duration = Duration::from_secs(3600);

/// A fresh random grant token.
fn grant_token() -> String {
    (0..24)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// Copies `path` of `src` (as `GET /v1/files` takes it) under directory `dir` of `dst`; `id` names the
/// pull on the destination.
pub async fn copy(
    src: &ShimClient,
    path: &str,
    dst: &ShimClient,
    dir: &str,
    id: &str,
    how: How,
) -> Result<Copied, TransferError> {
    if how == How::Controller {
        return through_controller(src, path, dst, dir).await;
    }
    let status = match pull(src, path, dst, dir, id).await {
        Ok(s) => s,
        // A source the destination cannot use (the controller reaches pods through a proxy; a TLS
        // source for a destination built without TLS, or one too old to know `source_pin`):
        // through the controller.
        Err(TransferError::Client(e))
            if matches!(
                e.code(),
                Some(protocol::ErrorCode::BadRequest | protocol::ErrorCode::InvalidJson)
            ) =>
        {
            let mut copied = through_controller(src, path, dst, dir).await?;
            copied.fallback = Some(e.to_string());
            return Ok(copied);
        }
        Err(e) => return Err(e),
    };
    match status.state {
        PullState::Done => Ok(Copied {
            direct: true,
            bytes: status.bytes,
            resumes: status.resumes,
            sha256: status.sha256,
            fallback: None,
        }),
        _ => {
            let error = status.error.unwrap_or_default();
            if !status.reached {
                let _ = dst.delete_pull(id).await;
                let mut copied = through_controller(src, path, dst, dir).await?;
                copied.fallback = Some(error);
                return Ok(copied);
            }
            Err(TransferError::Pull {
                id: id.to_owned(),
                error,
            })
        }
    }
}

/// Retries (attempts after the first: 3 attempts in all) a direct pull makes before its source
/// ever answered, before `copy` falls back through the controller (refused at once: about 0.6 s;
/// a silent address: 3 connect timeouts).
const CONNECT_RETRIES: u32 = 2;

/// A grant on the source and a pull by the destination, waited for; the grant is revoked after.
pub async fn pull(
    src: &ShimClient,
    path: &str,
    dst: &ShimClient,
    dir: &str,
    id: &str,
) -> Result<PullStatus, TransferError> {
    let token = grant_token();
    let prefix = path.trim_end_matches('/');
    let grant = src
        .grant(&GrantRequest {
            path: if prefix.is_empty() {
                "/".into()
            } else {
                prefix.into()
            },
            token_sha256: protocol::token::sha256_hex(&token),
            ttl_seconds: GRANT_TTL.as_secs(),
            uses: None,
        })
        .await?;
    let spec = PullSpec {
        source: src.base().to_owned(),
        source_pin: src.pin().map(|p| p.to_string()),
        path: path.to_owned(),
        token,
        target: dir.to_owned(),
        sha256: None,
        // Through the controller is the fallback: learn soon when the source is out of reach.
        connect_retries: Some(CONNECT_RETRIES),
        owner: None,
    };
    let result = async {
        let mut status = dst.pull(id, &spec, Some(60)).await?;
        // Bounded: a pull either ends or is failed by the shim after its retries.
        for _ in 0..10_000 {
            if status.state != PullState::Running {
                break;
            }
            status = dst.pull_status(id, Some(60)).await?;
        }
        Ok(status)
    }
    .await;
    let _ = src.revoke_grant(&grant.id).await;
    result
}

/// The source's stream, resumed after cuts, uploaded to the destination as it arrives.
pub async fn through_controller(
    src: &ShimClient,
    path: &str,
    dst: &ShimClient,
    dir: &str,
) -> Result<Copied, TransferError> {
    let (tx, rx) = mpsc::channel(8);
    let reader = read_resumed(src.clone(), path.to_owned(), tx);
    let upload = dst.files_in(dir, ChannelBody(rx).boxed());
    let (read, upload) = tokio::join!(reader, upload);
    let (bytes, resumes) = read?;
    upload?;
    Ok(Copied {
        direct: false,
        bytes,
        resumes,
        sha256: None,
        fallback: None,
    })
}

/// Reads `path` of `src` into `tx`, resuming after cuts (8 attempts in a row without progress).
pub async fn read_resumed(
    src: ShimClient,
    path: String,
    tx: mpsc::Sender<io::Result<Bytes>>,
) -> Result<(u64, u32), TransferError> {
    let (mut got, mut resumes, mut failures) = (0u64, 0u32, 0u32);
    let mut etag: Option<String> = None;
    loop {
        let before = got;
        let attempt = async {
            let out = src.files_out_at(&path, got, etag.as_deref()).await?;
            etag = Some(out.etag.clone());
            let mut body = out.body;
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.map_err(ClientError::Body)?.into_data() {
                    got += data.len() as u64;
                    if tx.send(Ok(data)).await.is_err() {
                        return Ok(None); // the upload stopped; it reports why
                    }
                }
            }
            Ok::<_, ClientError>(Some(out.total))
        };
        let why = match attempt.await {
            Ok(None) => return Ok((got, resumes)),
            Ok(Some(total)) if got == total => return Ok((got, resumes)),
            Ok(Some(total)) => format!("the stream ended at byte {got} of {total}"),
            Err(e) if !e.is_transient() => {
                let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
                return Err(e.into());
            }
            Err(e) => e.to_string(),
        };
        failures = if got > before { 1 } else { failures + 1 };
        if failures > 8 {
            let _ = tx.send(Err(io::Error::other(why.clone()))).await;
            return Err(TransferError::Stream { path, why });
        }
        resumes += 1;
        tokio::time::sleep(Duration::from_millis(100 << failures.min(5))).await;
    }
}

/// A request body fed by a channel; an `Err` item aborts the upload (the shim then keeps nothing).
#[derive(Debug)]
pub struct ChannelBody(pub mpsc::Receiver<io::Result<Bytes>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(http_body::Frame::data)))
    }
}
