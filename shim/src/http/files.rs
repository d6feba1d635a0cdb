//! `PUT /v1/files` and `GET /v1/files`: bridges the async request and response bodies to the
//! synchronous tar code in `crate::files`, which runs on the blocking pool.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;

use super::body::{Body, ChannelBody, Query, empty};
use crate::error::Error;
use crate::files::{self, FilesError};

/// `/v1/files?path=...`
pub async fn handle(
    req: Request<Incoming>,
    q: &Query,
    same_owner: bool,
) -> Result<Response<Body>, Error> {
    let path = q
        .get("path")
        .ok_or_else(|| Error::BadRequest("path is required".into()))?
        .to_owned();
    if !path.starts_with('/') {
        return Err(FilesError::InvalidPath(format!("{path:?} is not absolute")).into());
    }
    match *req.method() {
        Method::PUT => put(req.into_body(), PathBuf::from(path), same_owner).await,
        Method::GET => get(path).await,
        _ => Err(Error::MethodNotAllowed("GET, PUT")),
    }
}

async fn put(mut body: Incoming, dir: PathBuf, same_owner: bool) -> Result<Response<Body>, Error> {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let extract = tokio::task::spawn_blocking(move || {
        files::extract(
            ChannelReader {
                rx,
                current: Bytes::new(),
            },
            &dir,
            same_owner,
        )
    });
    let mut body_err = None;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data()
                    && tx.send(data).await.is_err()
                {
                    break; // the extractor stopped (error or end of archive)
                }
            }
            Err(e) => {
                body_err = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let result = extract
        .await
        .map_err(|e| Error::internal("extracting", io::Error::other(e)))?;
    if let Some(e) = body_err {
        return Err(Error::BadRequest(format!("reading the tar body: {e}")));
    }
    result?;
    Ok(empty(StatusCode::NO_CONTENT))
}

async fn get(path: String) -> Result<Response<Body>, Error> {
    let source = files::prepare_archive(&path)?;
    let (tx, rx) = mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let writer = io::BufWriter::with_capacity(64 * 1024, ChannelWriter(tx.clone()));
        let result = source.write(writer).and_then(|mut w| {
            w.flush().map_err(|e| FilesError::Io {
                context: "streaming the archive".into(),
                source: e,
            })
        });
        if let Err(e) = result {
            tracing::warn!(path, cause = %e, "files out ended early");
            let _ = tx.blocking_send(Err(io::Error::other(e.to_string())));
        }
    });
    let mut r = Response::new(ChannelBody(rx).boxed());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    Ok(r)
}

/// Blocking `Read` over body chunks sent by the async side.
struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(b) => self.current = b,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Blocking `Write` into the response body; fails once the client is gone.
struct ChannelWriter(mpsc::Sender<Result<Bytes, io::Error>>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .blocking_send(Ok(Bytes::copy_from_slice(buf)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client went away"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
