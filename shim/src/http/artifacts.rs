//! Handlers of the artifact routes (PROTOCOL.md 4.9, 4.10): grants (`/v1/grants`), pulls
//! (`/v1/pulls/{id}`), and what a request authenticated by a grant token may do: `GET /v1/files`
//! under the grant's path, nothing else.

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use protocol::artifacts::{GrantList, GrantRequest, PullSpec};
use protocol::routes::Route;
use tokio::sync::OwnedSemaphorePermit;

use super::App;
use super::body::{Body, Query, empty, json, read_json};
use super::process::wait_of;
use crate::error::Error;
use crate::grants::Granted;

/// A grant token may only `GET /v1/files` with a path under its grant (one use counted), in a slot
/// of the grants' transfer pool, which this takes; a refusal is counted for `/metrics`. A full pool
/// answers 503 before a use is counted, so a pull that retries it keeps its uses.
pub(crate) fn check_granted(
    app: &App,
    granted: &Granted,
    route: &Route<'_>,
    method: &Method,
    q: &Query,
) -> Result<OwnedSemaphorePermit, Error> {
    if !matches!(route, Route::Files) || method != Method::GET {
        return Err(app.grants.refuse(Error::Forbidden(
            "a grant token may only GET /v1/files".into(),
        )));
    }
    let slot = app.files.slot(true)?;
    q.get(protocol::query::PATH)
        .ok_or_else(|| Error::BadRequest("path is required".into()))
        .and_then(|path| app.grants.use_for(granted, path))
        .map_err(|e| app.grants.refuse(e))?;
    Ok(slot)
}

/// `/v1/grants`: `POST` registers, `GET` lists.
pub(crate) async fn grants(
    app: &Arc<App>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    match *req.method() {
        Method::POST => {
            let spec: GrantRequest = read_json(req.into_body()).await?;
            let grant = app.grants.add(spec)?;
            Ok(json(StatusCode::CREATED, &grant))
        }
        Method::GET => Ok(json(
            StatusCode::OK,
            &GrantList {
                grants: app.grants.list(),
            },
        )),
        _ => Err(Error::MethodNotAllowed("GET, POST")),
    }
}

/// `/v1/pulls/{id}`: `PUT` starts (idempotent by id), `GET` reports (optionally waiting for the
/// end), `DELETE` cancels and forgets.
pub(crate) async fn pull(
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
            let spec: PullSpec = read_json(req.into_body()).await?;
            let (pull, created) = app.pulls.start(id, spec)?;
            if let Some(wait) = wait {
                pull.wait(wait).await;
            }
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(json(status, &pull.status()))
        }
        Method::GET => {
            let pull = app.pulls.get(id)?;
            if let Some(wait) = wait_of(q)? {
                pull.wait(wait).await;
            }
            Ok(json(StatusCode::OK, &pull.status()))
        }
        Method::DELETE => {
            app.pulls.delete(id).await?;
            Ok(empty(StatusCode::NO_CONTENT))
        }
        _ => Err(Error::MethodNotAllowed("GET, PUT, DELETE")),
    }
}
