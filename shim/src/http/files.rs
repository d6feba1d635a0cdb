//! `PUT /v1/files` and `GET /v1/files`: bridges the async request and response bodies to the
//! synchronous tar code in `crate::files`, which runs on the blocking pool; `DELETE /v1/files`
//! runs its removal there too.
//!
//! A transfer holds a slot from before its first file-system call until its blocking work ends:
//! one of `STEPSHIM_FILES_MAX_CONCURRENT` with the pod's token, one of the separate
//! `STEPSHIM_FILES_GRANT_MAX_CONCURRENT` with a grant's, so grant holders (less trusted peers) can
//! never take the pod's own slots. Without a free slot it is answered 503 `unavailable` at once, so
//! stalled transfers cannot take every blocking thread. A body too slow for [`Pace`] (an upload's
//! bytes not arriving, a download's not being taken) abandons the transfer: an upload is then
//! refused as truncated and leaves nothing, a download's response is cut off.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::body::{Body, ChannelBody, Query, empty};
use super::pace::Pace;
use crate::config::FilesSettings;
use crate::error::Error;
use crate::files::{self, FilesError, Options, Resolve};
use crate::output_log::{IO_CHUNK, pool};
use protocol::settings as S;

/// The file transfer caps and the slots of the transfers running, in two pools.
#[derive(Debug)]
pub(crate) struct Transfers {
    settings: FilesSettings,
    /// The pod token's slots; no grant token ever holds one.
    owner: Arc<Semaphore>,
    /// Grant tokens' slots, shared by all grants.
    granted: Arc<Semaphore>,
}

impl Transfers {
    /// Caps from the configuration.
    pub(crate) fn new(settings: FilesSettings) -> Self {
        Transfers {
            settings,
            owner: Arc::new(Semaphore::new(settings.max_concurrent)),
            granted: Arc::new(Semaphore::new(settings.grant_max_concurrent)),
        }
    }

    /// The pace every transfer is held to.
    pub(super) fn pace(&self) -> Pace {
        Pace::new(&self.settings)
    }

    /// A slot of the pool of the request's token, or 503 when all of that pool are taken.
    pub(super) fn slot(&self, granted: bool) -> Result<OwnedSemaphorePermit, Error> {
        let (pool, n, var) = if granted {
            let n = self.settings.grant_max_concurrent;
            (&self.granted, n, S::FILES_GRANT_MAX_CONCURRENT)
        } else {
            (
                &self.owner,
                self.settings.max_concurrent,
                S::FILES_MAX_CONCURRENT,
            )
        };
        pool.clone().try_acquire_owned().map_err(|_| {
            Error::Unavailable(format!(
                "{n} file transfers are already running ({var}); retry later"
            ))
        })
    }
}

/// `/v1/files?path=...`; `granted_slot` is the slot of a request by a grant's token, taken from
/// the grants' pool; any other request takes one of the pod token's pool here.
pub(crate) async fn handle(
    req: Request<Incoming>,
    q: &Query,
    same_owner: bool,
    granted_slot: Option<OwnedSemaphorePermit>,
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
    if method != Method::PUT && method != Method::GET && method != Method::DELETE {
        return Err(Error::MethodNotAllowed("DELETE, GET, PUT"));
    }
    let owner = match method {
        Method::PUT => crate::owners::from_query(q.get(protocol::query::OWNER))?,
        _ => None,
    };
    let slot = match granted_slot {
        Some(slot) => slot,
        None => transfers.slot(false)?,
    };
    if method == Method::DELETE {
        return remove(PathBuf::from(path), slot).await;
    }
    let s = transfers.settings;
    let pace = Pace::new(&s);
    if method == Method::PUT {
        let opts = Options {
            same_owner,
            owner,
            limits: s.limits(),
            resolve: Resolve::Auto,
        };
        put(req.into_body(), PathBuf::from(path), opts, pace, slot).await
    } else {
        let resume = Resume::of(&req, q)?;
        get(path, resume, pace, slot).await
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
    pace: Pace,
    slot: OwnedSemaphorePermit,
) -> Result<Response<Body>, Error> {
    let handle = Handle::current();
    let (result, body_err) = crate::blocking::run(move || {
        let _slot = slot;
        let mut reader = BodyReader {
            body,
            handle,
            pace,
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

/// `DELETE`: the removal runs on the blocking pool, holding the transfer slot.
async fn remove(path: PathBuf, slot: OwnedSemaphorePermit) -> Result<Response<Body>, Error> {
    crate::blocking::run(move || {
        let _slot = slot;
        files::remove(&path)
    })
    .await
    .ok_or_else(|| Error::internal("removing", io::Error::other("the removal failed")))??;
    Ok(empty(StatusCode::NO_CONTENT))
}

async fn get(
    path: String,
    resume: Resume,
    pace: Pace,
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
        let writer = ChannelWriter {
            tx: tx.clone(),
            handle: handle.clone(),
            pace,
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
        drop(slot);
        if let Err(e) = result {
            crate::warn!(path, cause = %e, "files out ended early");
            // Cuts the body off short of its length. With no room left (a client too slow to
            // take it) dropping the sender ends the body short all the same.
            let _ = tx.try_send(Err(io::Error::other(e.to_string())));
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
/// thread (no channel and no forwarding task between them). A body that fails or is too slow for
/// its [`Pace`] reads as its end, with the reason kept in `failed`: the extraction then refuses the
/// stream as truncated and leaves nothing.
struct BodyReader {
    body: Incoming,
    handle: Handle,
    pace: Pace,
    current: Bytes,
    failed: Option<String>,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            if self.failed.is_some() {
                return Ok(0);
            }
            let (body, pace) = (&mut self.body, &mut self.pace);
            let mut frame = None;
            let waited = {
                let fut = std::pin::pin!(async { frame = Some(body.frame().await) });
                self.handle.block_on(pace.wait(fut))
            };
            let cut = match waited.map(|()| frame.flatten()) {
                Ok(Some(Ok(f))) => match f.into_data() {
                    Ok(data) => pace.moved(data.len() as u64).map(|()| self.current = data),
                    Err(_) => Ok(()),
                },
                Ok(None) => return Ok(0),
                Ok(Some(Err(e))) => {
                    self.failed = Some(format!("reading the tar body: {e}"));
                    Ok(())
                }
                Err(cut) => Err(cut),
            };
            if let Err(cut) = cut {
                self.failed = Some(format!("{}; upload abandoned", cut.reason()));
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
/// client is gone or takes the chunks too slowly for its [`Pace`].
pub(super) struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    handle: Handle,
    pace: Pace,
    buf: Vec<u8>,
}

impl ChannelWriter {
    /// A writer into the body fed by `tx`, from a blocking thread of `handle`'s runtime.
    pub(super) fn new(tx: mpsc::Sender<Result<Bytes, io::Error>>, pace: Pace) -> Self {
        ChannelWriter {
            tx,
            handle: Handle::current(),
            pace,
            buf: Vec::new(),
        }
    }

    /// Sends the filled part of the buffer, if any.
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let n = self.buf.len() as u64;
        let chunk = pool::bytes(std::mem::take(&mut self.buf));
        let (tx, pace) = (&self.tx, &mut self.pace);
        let mut sent = false;
        let waited = {
            let fut = std::pin::pin!(async { sent = tx.send(Ok(chunk)).await.is_ok() });
            self.handle.block_on(pace.wait(fut))
        };
        match waited.and_then(|()| pace.moved(n)) {
            Ok(()) if sent => Ok(()),
            Ok(()) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "client went away",
            )),
            Err(cut) => Err(io::Error::new(io::ErrorKind::TimedOut, cut.reason())),
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
