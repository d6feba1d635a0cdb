//! Handlers of the process routes: spawn, status and wait, list, stdin, signal, resize and delete.
//! Each parses its input and calls the process table; the table and the processes hold the logic.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use protocol::{ProcessList, ResizeRequest, SignalRequest, SpawnRequest};

use super::App;
use super::body::{Body, Query, empty, json, read_json};
use crate::error::Error;

/// Longest `wait` a status request may hold.
const MAX_WAIT: Duration = Duration::from_secs(300);

/// The `wait` parameter: seconds to wait for the exit, at most [`MAX_WAIT`].
pub(super) fn wait_of(q: &Query) -> Result<Option<Duration>, Error> {
    let Some(wait) = q.get(protocol::query::WAIT) else {
        return Ok(None);
    };
    let wait = protocol::query::parse_seconds(wait)
        .ok_or_else(|| Error::BadRequest("wait must be a number of seconds".into()))?;
    Ok(Some(wait.min(MAX_WAIT)))
}

/// `GET /v1/processes`
pub(crate) fn list(app: &App) -> Response<Body> {
    let processes = app.table.list().iter().map(|p| p.snapshot()).collect();
    json(StatusCode::OK, &ProcessList { processes })
}

/// `/v1/processes/{id}`: PUT spawns, GET reads (optionally waiting), DELETE forgets.
pub(crate) async fn process(
    app: &Arc<App>,
    id: &str,
    req: Request<Incoming>,
    q: &Query,
) -> Result<Response<Body>, Error> {
    match *req.method() {
        Method::PUT => {
            if app.is_shutting_down() {
                return Err(Error::Unavailable("the shim is shutting down".into()));
            }
            let wait = wait_of(q)?;
            let spec: SpawnRequest = read_json(req.into_body()).await?;
            // No task of its own: the table records a forked child before its next await, so a
            // client that hangs up mid-spawn cannot leave the child unrecorded.
            let (proc, created) = app.table.spawn(id, spec).await?;
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            // `?wait=S` on a spawn: one request for the common spawn-then-wait (the status code
            // still says whether this call started it).
            if let Some(limit) = wait {
                proc.wait(limit).await;
            }
            Ok(json(status, &proc.snapshot()))
        }
        Method::GET => {
            let wait = wait_of(q)?;
            let proc = app.table.get(id)?;
            if let Some(limit) = wait {
                proc.wait(limit).await;
            }
            Ok(json(StatusCode::OK, &proc.snapshot()))
        }
        Method::DELETE => {
            app.table.delete(id, q.flag(protocol::query::FORCE))?;
            Ok(empty(StatusCode::NO_CONTENT))
        }
        _ => Err(Error::MethodNotAllowed("GET, PUT, DELETE")),
    }
}

/// `POST /v1/processes/{id}/stdin`
pub(crate) async fn stdin(
    app: &App,
    id: &str,
    req: Request<Incoming>,
    q: &Query,
) -> Result<Response<Body>, Error> {
    let proc = app.table.get(id)?;
    let stdin = proc.stdin.as_ref().ok_or(Error::NoStdin)?;
    let offset = q
        .get(protocol::query::OFFSET)
        .ok_or_else(|| Error::BadRequest("offset is required".into()))?;
    let offset = offset
        .parse()
        .map_err(|_| Error::BadRequest("offset must be a non-negative integer".into()))?;
    let ack = stdin
        .write(
            offset,
            req.into_body(),
            q.flag(protocol::query::EOF),
            proc.is_running(),
            &proc.id,
        )
        .await?;
    Ok(json(StatusCode::OK, &ack))
}

/// `POST /v1/processes/{id}/signal`
pub(crate) async fn signal(
    app: &App,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    let proc = app.table.get(id)?;
    let body: SignalRequest = read_json(req.into_body()).await?;
    let sig = protocol::signal::parse(&body.signal).ok_or_else(|| {
        Error::InvalidSignal(serde_json::to_string(&body.signal).unwrap_or_default())
    })?;
    proc.signal(sig)?;
    Ok(json(StatusCode::OK, &proc.snapshot()))
}

/// `POST /v1/processes/{id}/resize`
pub(crate) async fn resize(
    app: &App,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    let proc = app.table.get(id)?;
    let size: ResizeRequest = read_json(req.into_body()).await?;
    proc.resize(size.cols, size.rows)?;
    Ok(json(StatusCode::OK, &proc.snapshot()))
}
