//! `PUT /v1/files` and `GET /v1/files`: bridges the async request and response bodies to the
//! synchronous tar code in `crate::files`, which runs on the blocking pool.
//!
//! A transfer holds one of `STEPSHIM_FILES_MAX_CONCURRENT` slots from before its first file-system
//! call until its blocking work ends; without a free slot it is answered 503 `unavailable` at once,
//! so stalled transfers cannot take every blocking thread. A body that does not move for
//! `STEPSHIM_FILES_IDLE_TIMEOUT` (an upload's bytes not arriving, a download's not being taken)
//! abandons the transfer: an upload is then refused as truncated and leaves nothing, a download's
//! response is cut off.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::body::{Body, ChannelBody, Query, empty};
use crate::config::FilesSettings;
use crate::error::Error;
use crate::files::{self, FilesError, Options, Resolve};
use crate::output_log::{IO_CHUNK, pool};

/// The file transfer caps and the slots of the transfers running.
#[derive(Debug)]
pub(crate) struct Transfers {
    settings: FilesSettings,
    slots: Arc<Semaphore>,
}

impl Transfers {
    /// Caps from the configuration.
    pub(crate) fn new(settings: FilesSettings) -> Self {
        Transfers {
            settings,
            slots: Arc::new(Semaphore::new(settings.max_concurrent)),
        }
    }

    /// A slot for one transfer, or 503 when all are taken.
    fn slot(&self) -> Result<OwnedSemaphorePermit, Error> {
        self.slots.clone().try_acquire_owned().map_err(|_| {
            Error::Unavailable(format!(
                "{} file transfers are already running (STEPSHIM_FILES_MAX_CONCURRENT); retry later",
                self.settings.max_concurrent
            ))
        })
    }
}

/// `/v1/files?path=...`
pub(crate) async fn handle(
    req: Request<Incoming>,
    q: &Query,
    same_owner: bool,
    transfers: &Transfers,
) -> Result<Response<Body>, Error> {
    let path = q
        .get("path")
        .ok_or_else(|| Error::BadRequest("path is required".into()))?
        .to_owned();
    if !path.starts_with('/') {
        return Err(FilesError::InvalidPath(format!("{path:?} is not absolute")).into());
    }
    let method = req.method().clone();
    if method != Method::PUT && method != Method::GET {
        return Err(Error::MethodNotAllowed("GET, PUT"));
    }
    let slot = transfers.slot()?;
    let s = transfers.settings;
    if method == Method::PUT {
        let opts = Options {
            same_owner,
            limits: s.limits(),
            resolve: Resolve::Auto,
        };
        put(
            req.into_body(),
            PathBuf::from(path),
            opts,
            s.idle_timeout,
            slot,
        )
        .await
    } else {
        let resume = Resume::of(&req, q)?;
        get(path, resume, s.idle_timeout, slot).await
    }
}

/// Where a `GET` resumes (PROTOCOL.md 4.8.1): a byte offset of the stream and the ETag the tree
/// must still have (`If-Match`, or `etag=` for clients that cannot set headers).
#[derive(Debug)]
struct Resume {
    offset: u64,
    etag: Option<String>,
}

impl Resume {
    fn of(req: &Request<Incoming>, q: &Query) -> Result<Resume, Error> {
        let offset = q.u64(protocol::query::OFFSET, 0)?;
        let etag = match req.headers().get(header::IF_MATCH) {
            Some(v) => Some(
                v.to_str()
                    .map_err(|_| Error::BadRequest("If-Match is not ASCII".into()))?
                    .to_owned(),
            ),
            None => q.get(protocol::query::ETAG).map(str::to_owned),
        };
        // Quotes are optional in the query parameter.
        let etag = etag.map(|e| {
            let e = e.trim();
            if e.starts_with('"') {
                e.to_owned()
            } else {
                format!("\"{e}\"")
            }
        });
        if offset > 0 && etag.is_none() {
            return Err(Error::BadRequest(
                "offset needs the stream's ETag (If-Match or etag=)".into(),
            ));
        }
        Ok(Resume { offset, etag })
    }
}

async fn put(
    body: Incoming,
    dir: PathBuf,
    opts: Options,
    idle: Duration,
    slot: OwnedSemaphorePermit,
) -> Result<Response<Body>, Error> {
    let handle = Handle::current();
    let (result, body_err) = crate::blocking::run(move || {
        let _slot = slot;
        let mut reader = BodyReader {
            body,
            handle,
            idle,
            current: Bytes::new(),
            failed: None,
        };
        // `dyn`: one copy of the extraction for uploads and pulls (binary size).
        let result = files::extract_with(&mut reader as &mut dyn Read, &dir, &opts);
        (result, reader.failed)
    })
    .await
    .ok_or_else(|| Error::internal("extracting", io::Error::other("the extraction failed")))?;
    match (result, body_err) {
        // A stream complete up to its end marker was committed, whatever came after it.
        (Ok(_), _) => Ok(empty(StatusCode::NO_CONTENT)),
        (Err(e @ FilesError::TooLarge(_)), _) | (Err(e), None) => Err(e.into()),
        (Err(_), Some(why)) => Err(Error::BadRequest(why)),
    }
}

async fn get(
    path: String,
    resume: Resume,
    idle: Duration,
    slot: OwnedSemaphorePermit,
) -> Result<Response<Body>, Error> {
    let p = path.clone();
    let (source, validator) = crate::blocking::run(move || {
        let source = files::prepare_archive(&p)?;
        let validator = source.validator()?;
        Ok::<_, FilesError>((source, validator))
    })
    .await
    .ok_or_else(|| Error::internal("archiving", io::Error::other("the archiving failed")))??;
    if let Some(want) = &resume.etag
        && *want != validator.etag
    {
        return Err(Error::TreeChanged(format!(
            "{path} has changed: its ETag is now {}, not {want}; start over from offset 0",
            validator.etag
        )));
    }
    if resume.offset > validator.len {
        return Err(Error::StreamOffset {
            offset: resume.offset,
            len: validator.len,
        });
    }
    let offset = resume.offset;
    let expect = resume.etag.is_some().then(|| validator.clone());
    let (tx, rx) = mpsc::channel(2);
    let handle = Handle::current();
    crate::blocking::detach(Box::new(move || {
        let _slot = slot;
        let writer = ChannelWriter {
            tx: tx.clone(),
            handle: handle.clone(),
            idle,
            buf: Vec::new(),
        };
        let result = source
            .write_from(writer, offset, expect.as_ref())
            .and_then(|mut w| {
                w.flush().map_err(|e| FilesError::Io {
                    context: "streaming the archive".into(),
                    source: e,
                })
            });
        if let Err(e) = result {
            crate::warn!(path, cause = %e, "files out ended early");
            // Cuts the chunked body off without its last chunk (unless the client is gone).
            let err = Err(io::Error::other(e.to_string()));
            let _ = handle.block_on(tokio::time::timeout(idle, tx.send(err)));
        }
    }));
    let mut r = Response::new(ChannelBody(rx).boxed());
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    h.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(validator.len - offset),
    );
    h.insert(
        protocol::artifacts::STREAM_LENGTH_HEADER,
        HeaderValue::from(validator.len),
    );
    if let Ok(v) = HeaderValue::from_str(&validator.etag) {
        h.insert(header::ETAG, v);
    }
    Ok(r)
}

/// Blocking `Read` over the request body, each frame awaited on the runtime from the blocking
/// thread (no channel and no forwarding task between them). A body that fails or does not move
/// for `idle` reads as its end, with the reason kept in `failed`: the extraction then refuses the
/// stream as truncated and leaves nothing.
struct BodyReader {
    body: Incoming,
    handle: Handle,
    idle: Duration,
    current: Bytes,
    failed: Option<String>,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            if self.failed.is_some() {
                return Ok(0);
            }
            let idle = self.idle;
            let frame = self
                .handle
                .block_on(tokio::time::timeout(idle, self.body.frame()));
            match frame {
                Ok(Some(Ok(f))) => {
                    if let Ok(data) = f.into_data() {
                        self.current = data;
                    }
                }
                Ok(None) => return Ok(0),
                Ok(Some(Err(e))) => self.failed = Some(format!("reading the tar body: {e}")),
                Err(_) => {
                    self.failed = Some(format!(
                        "no body bytes for {idle:?} (STEPSHIM_FILES_IDLE_TIMEOUT); upload abandoned"
                    ))
                }
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Blocking `Write` into the response body, in chunks of [`IO_CHUNK`] bytes filled in pooled
/// buffers that return to the pool once hyper has sent them: a fresh chunk per write cost a page
/// fault per 4 KiB and an `munmap` per chunk, most of the source's CPU of a pull. Fails once the
/// client is gone or has taken nothing for `idle`.
struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    handle: Handle,
    idle: Duration,
    buf: Vec<u8>,
}

impl ChannelWriter {
    /// Sends the filled part of the buffer, if any.
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = pool::bytes(std::mem::take(&mut self.buf));
        let sent = self
            .handle
            .block_on(tokio::time::timeout(self.idle, self.tx.send(Ok(chunk))));
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "client went away",
            )),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing for STEPSHIM_FILES_IDLE_TIMEOUT",
            )),
        }
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.buf.capacity() == 0 {
            self.buf = pool::take(IO_CHUNK);
        }
        let n = buf.len().min(IO_CHUNK - self.buf.len());
        self.buf.extend_from_slice(&buf[..n]);
        if self.buf.len() == IO_CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

impl Drop for ChannelWriter {
    /// A stream that fails midway still delivers what it had written before the failure.
    fn drop(&mut self) {
        let _ = self.send();
    }
}
