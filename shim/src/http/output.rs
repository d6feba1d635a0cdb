//! `GET /v1/processes/{id}/output`: streams a process's log from a frame boundary, up to its end at
//! request time or, with `follow`, until the exit frame, with keepalives while idle.
//!
//! A task per stream copies at most one chunk at a time into a one-slot channel, so a stream costs a
//! task and a chunk in flight, and a client that stops reading only stops its own task.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::App;
use super::body::{Body, ChannelBody, Query};
use crate::error::Error;
use crate::proc::Proc;

/// Largest chunk copied out of the log at once.
const CHUNK: usize = crate::output_log::pool::STREAM_READ;
/// Idle time after which a keepalive frame is sent on a follow.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(10);

/// Answers an output request.
pub(crate) fn handle(app: &Arc<App>, id: &str, query: &Query) -> Result<Response<Body>, Error> {
    let proc = app.table.get(id)?;
    let offset = query.u64(protocol::query::OFFSET, 0)?;
    let follow = query.flag(protocol::query::FOLLOW);
    let end = proc.log.state().end;
    if !proc
        .log
        .is_boundary(offset)
        .map_err(|e| Error::internal("reading the output log", e))?
    {
        return Err(Error::InvalidOffset { offset, end });
    }
    if offset > 0 {
        app.metrics.resumes.fetch_add(1, Ordering::Relaxed);
    }
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(stream(
        app.clone(),
        proc,
        offset,
        (!follow).then_some(end),
        tx,
    ));
    let mut r = Response::new(ChannelBody(rx).boxed());
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.stepshim.frames"),
    );
    r.headers_mut()
        .insert("x-stepshim-output-end", HeaderValue::from(end));
    Ok(r)
}

type Tx = mpsc::Sender<Result<Bytes, std::io::Error>>;

async fn stream(app: Arc<App>, proc: Arc<Proc>, mut pos: u64, stop: Option<u64>, tx: Tx) {
    let _open = app.metrics.stream();
    let mut state = proc.log.subscribe();
    loop {
        let st = *state.borrow_and_update();
        if st.freed {
            return;
        }
        let limit = stop.map_or(st.end, |s| s.min(st.end));
        if pos < limit {
            let chunk = match proc.log.read(pos, CHUNK.min((limit - pos) as usize)) {
                Ok(c) if !c.is_empty() => c,
                Ok(_) => return, // freed between the state check and the read
                Err(e) => {
                    crate::error!(id = %proc.id, cause = %e, "reading output log");
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            pos += chunk.len() as u64;
            if tx.send(Ok(chunk)).await.is_err() {
                return;
            }
            continue;
        }
        if stop.is_some() || st.complete {
            return;
        }
        tokio::select! {
            changed = state.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(KEEPALIVE) => {
                if tx.send(Ok(Bytes::from_static(&protocol::frame::KEEPALIVE_FRAME))).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}
