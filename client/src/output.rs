//! Reading a process's output: a frame stream over one response, and `attach`, which follows the log
//! to the exit frame and resumes from the last whole frame after any broken connection.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use protocol::{Decoder, Exit, Frame, FrameHeader, FrameType};

use super::{ClientError, RespBody, ShimClient};

/// Frames of one output response.
pub struct OutputStream {
    body: RespBody,
    decoder: Decoder,
    done: bool,
}

impl std::fmt::Debug for OutputStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputStream")
            .field("offset", &self.decoder.offset())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl OutputStream {
    pub(super) fn new(body: RespBody, offset: u64) -> Self {
        OutputStream {
            body,
            decoder: Decoder::new(offset),
            done: false,
        }
    }

    /// The log offset just past the last whole frame returned.
    pub fn offset(&self) -> u64 {
        self.decoder.offset()
    }

    /// The next frame, including keepalives; `None` at the end of the response. A payload that
    /// arrived split across reads is gathered into one buffer (see [`OutputStream::next_parts`]).
    pub async fn next(&mut self) -> Result<Option<Frame>, ClientError> {
        let mut parts = Vec::new();
        Ok(self.next_parts(&mut parts).await?.map(|h| Frame {
            kind: h.kind,
            flags: h.flags,
            payload: protocol::frame::concat(parts),
        }))
    }

    /// The next whole frame, including keepalives, with its payload appended to `parts` as received:
    /// one slice per read it spans, never copied. `None` at the end of the response.
    pub async fn next_parts(
        &mut self,
        parts: &mut Vec<Bytes>,
    ) -> Result<Option<FrameHeader>, ClientError> {
        loop {
            if let Some(h) = self
                .decoder
                .next_frame_parts(parts)
                .map_err(ClientError::Frame)?
            {
                return Ok(Some(h));
            }
            if self.done {
                self.decoder.finish().map_err(ClientError::Frame)?;
                return Ok(None);
            }
            match self.body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        self.decoder.push_bytes(data);
                    }
                }
                Some(Err(e)) => return Err(ClientError::Body(e)),
                None => self.done = true,
            }
        }
    }
}

/// How an attach ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// The process's exit.
    pub exit: Exit,
    /// Log offset past the exit frame.
    pub end: u64,
    /// Connections that broke and were resumed.
    pub resumes: u32,
}

impl ShimClient {
    /// Follows `id`'s output from `offset` to the exit frame, calling `sink` with every stdout and
    /// stderr payload exactly once and in order, resuming after broken connections (up to `max_retries` in a row
    /// without progress, with backoff). Once a stream has been served, a proxy's refusal (see
    /// [`ClientError::is_proxy_refusal`]: an apiserver just restarted) is retried like a break.
    /// A payload that arrived split across reads is handed on in its pieces, one call each, without
    /// copying; only whole frames are handed on, so no piece is ever handed on twice.
    pub async fn attach(
        &self,
        id: &str,
        mut offset: u64,
        max_retries: u32,
        mut sink: impl FnMut(FrameType, Bytes),
    ) -> Result<Attached, ClientError> {
        let mut resumes = 0;
        let mut failures = 0u32;
        let mut served = false;
        loop {
            let started_at = offset;
            let result: Result<Option<(Exit, u64)>, ClientError> = async {
                let mut stream = self.output(id, offset, true).await?;
                served = true;
                let mut parts = Vec::new();
                loop {
                    parts.clear();
                    let header = stream.next_parts(&mut parts).await;
                    // Frames are handed on only once whole, so `offset` always names a boundary.
                    match header? {
                        Some(h) => {
                            match h.kind {
                                FrameType::Stdout | FrameType::Stderr => {
                                    for part in parts.drain(..) {
                                        sink(h.kind, part);
                                    }
                                }
                                FrameType::Exit => {
                                    let json = protocol::frame::concat(std::mem::take(&mut parts));
                                    let exit: Exit =
                                        serde_json::from_slice(&json).map_err(ClientError::Json)?;
                                    return Ok(Some((exit, stream.offset())));
                                }
                                _ => {}
                            }
                            offset = stream.offset();
                        }
                        None => return Ok(None),
                    }
                }
            }
            .await;
            if offset > started_at {
                failures = 0; // progress was made: only consecutive fruitless attempts count
            }
            match result {
                Ok(Some((exit, end))) => return Ok(Attached { exit, end, resumes }),
                Ok(None) => {
                    // Ended without an exit frame: the process was deleted, or the shim is stopping.
                    failures += 1;
                    if failures > max_retries {
                        return Err(ClientError::StreamEnded { id: id.to_owned() });
                    }
                }
                Err(e)
                    if e.is_transient()
                        || matches!(e, ClientError::Frame(_))
                        || (served && e.is_proxy_refusal()) =>
                {
                    failures += 1;
                    if failures > max_retries {
                        return Err(ClientError::ResumeExhausted {
                            id: id.to_owned(),
                            attempts: failures,
                            last: Box::new(e),
                        });
                    }
                }
                Err(e) => return Err(e),
            }
            resumes += 1;
            let backoff = Duration::from_millis(20u64 << failures.min(6));
            tokio::time::sleep(backoff).await;
        }
    }
}
