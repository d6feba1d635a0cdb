//! The HTTP side of the shim: accepts connections (TCP_NODELAY, under the connection cap, with a
//! header size budget, a header timeout and an authentication deadline), authenticates, routes each
//! request to its handler, maps errors to the protocol's JSON bodies and counts requests.

mod artifacts;
mod body;
mod connection;
mod conns;
mod files;
mod image;
mod output;
mod pace;
mod process;
mod properties;

use std::sync::Arc;
use std::time::Duration;

use crate::{debug, warn};
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use protocol::routes::{Route, RouteError};
use tokio::net::TcpListener;

use crate::error::Error;
use crate::metrics::Metrics;
use crate::table::Table;
pub(crate) use body::Body;

/// Time a client has to send a request's headers (and how long an authenticated connection may
/// sit idle between requests).
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// What a connection may cost before it has authenticated, from the configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections open at once (see [`conns`]).
    pub(crate) max_connections: usize,
    /// Bytes of a request line and headers together.
    pub(crate) max_header_bytes: usize,
    /// How long a connection may stay open without a request that passed authentication.
    pub(crate) auth_timeout: Duration,
}

impl From<&crate::Config> for Limits {
    fn from(c: &crate::Config) -> Self {
        Limits {
            max_connections: c.max_connections,
            max_header_bytes: c.max_header_bytes,
            auth_timeout: c.auth_timeout,
        }
    }
}

/// Shared state of the HTTP side.
#[derive(Debug)]
pub(crate) struct App {
    /// The processes.
    pub(crate) table: Arc<Table>,
    /// SHA-256 of the token; `None` runs without authentication.
    pub(crate) token_sha256: Option<[u8; 32]>,
    /// Counters.
    pub(crate) metrics: Metrics,
    /// Reported by `/v1/info`.
    pub(crate) boot_id: String,
    /// Whether extracted files keep their owners (the shim runs as root).
    pub(crate) same_owner: bool,
    /// Connection limits.
    pub(crate) limits: Limits,
    conns: Arc<conns::Conns>,
    /// Caps and slots of file transfers.
    pub(crate) files: files::Transfers,
    /// Read grants on this shim's files.
    pub(crate) grants: crate::grants::Grants,
    /// Pulls into this shim.
    pub(crate) pulls: crate::pull::Pulls,
    /// Digests of the images served from `rootfs/` directories.
    pub(crate) images: crate::image::Images,
    /// The pod's properties (PROTOCOL.md 4.13), in memory only.
    pub(crate) properties: crate::properties::Properties,
    /// The TLS handshake every connection starts with, when the shim has a seed.
    #[cfg(feature = "tls")]
    tls: Option<Arc<stepshim_tls::rustls::ServerConfig>>,
}

impl App {
    /// The shared state, with the connection, transfer, grant and pull caps of `config`.
    pub(crate) fn new(
        table: Arc<Table>,
        config: &crate::Config,
        boot_id: String,
        same_owner: bool,
    ) -> Self {
        let limits = Limits::from(config);
        App {
            table,
            token_sha256: config.token_sha256,
            metrics: Metrics::default(),
            boot_id,
            same_owner,
            limits,
            conns: conns::Conns::new(
                limits.max_connections,
                config.artifacts.max_connections as usize,
            ),
            files: files::Transfers::new(config.files),
            grants: crate::grants::Grants::new(config.artifacts.max_grants),
            pulls: crate::pull::Pulls::new(pull_settings(
                config.files,
                config.artifacts,
                same_owner,
            )),
            images: crate::image::Images::default(),
            properties: crate::properties::Properties::new(config.properties),
            #[cfg(feature = "tls")]
            tls: config.tls.as_ref().map(|t| t.config.clone()),
        }
    }

    /// Whether shutdown has begun (the table is closed): `/healthz` answers 503, spawns are refused.
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.table.is_closed()
    }
}

fn pull_settings(
    f: crate::config::FilesSettings,
    a: crate::config::ArtifactsSettings,
    same_owner: bool,
) -> crate::pull::Settings {
    crate::pull::Settings {
        max: a.max_pulls,
        retries: a.pull_retries,
        busy: std::time::Duration::from_secs(u64::from(a.pull_busy_secs)),
        idle: f.idle_timeout,
        limits: f.limits(),
        same_owner,
    }
}

/// Accepts connections until `stop` resolves; connections already open keep being served.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; never give up serving.
                    warn!(cause = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => return,
        };
        let Some(ticket) = app.conns.admit() else {
            debug!(%peer, "connection cap reached with every connection authenticated: closed");
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            debug!(cause = %e, "set_nodelay");
        }
        tokio::spawn(connection::serve(app.clone(), stream, peer, ticket));
    }
}

/// Answers one request.
pub(crate) async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
    conn: &conns::Slot,
) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let route = Route::parse(&path);
    let label = route.as_ref().map_or("unknown", Route::label);
    let has_body = !http_body::Body::is_end_stream(req.body());
    let mut response = match dispatch(&app, route, req, conn).await {
        Ok(r) => r,
        Err(e) => {
            if let Error::Internal { context, source } = &e {
                warn!(context, cause = %source, "request failed");
            }
            body::error(&e)
        }
    };
    if has_body && !response.status().is_success() {
        // The handler may have refused before reading the whole body; the rest of it would be read
        // as the next request. Closing tells the client's pool not to reuse this connection.
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    app.metrics.request(label, response.status().as_u16());
    response
}

/// Authenticates a request, checks its route and query, and hands it to the route's handler.
async fn dispatch(
    app: &Arc<App>,
    route: Result<Route<'_>, RouteError>,
    req: Request<Incoming>,
    conn: &conns::Slot,
) -> Result<Response<Body>, Error> {
    if matches!(route, Ok(Route::Healthz)) {
        // The one open route, and only for GET: every other method is refused the same way
        // with or without a token.
        return if req.method() == Method::GET {
            Ok(healthz(app))
        } else {
            Err(Error::MethodNotAllowed("GET"))
        };
    }
    if matches!(route, Ok(Route::Registry)) {
        return Ok(image::handle(app, req, conn).await);
    }
    let granted = authenticate(app, &req)?;
    if !app.conns.authenticated(conn, granted.is_some()) {
        return Err(Error::Unavailable(conns::FULL.into()));
    }
    if granted.is_some() && route.is_err() {
        return Err(app.grants.refuse(Error::Forbidden(
            "a grant token may only GET /v1/files".into(),
        )));
    }
    let route = match route {
        Ok(r) => r,
        Err(RouteError::InvalidId) => return Err(Error::InvalidId),
        Err(RouteError::InvalidName) => {
            return Err(Error::InvalidProperty(
                "property names must match [A-Za-z0-9._:-]+ (and not be . or ..)",
            ));
        }
        Err(RouteError::NotFound) => return Err(Error::NoRoute(req.uri().path().to_owned())),
    };
    let q = body::Query::parse(req.uri().query())?;
    let slot = match granted {
        Some(g) => Some(artifacts::check_granted(app, &g, &route, req.method(), &q)?),
        None => None,
    };
    route_to(app, route, req, &q, slot).await
}

/// Checks the request's token: the shim's own lets it through (`None`), a read grant's gives
/// that grant (for the caller to hold the request to); anything else is refused. A shim without a
/// token (`STEPSHIM_INSECURE_NO_AUTH`) lets everything through.
fn authenticate(
    app: &App,
    req: &Request<Incoming>,
) -> Result<Option<crate::grants::Granted>, Error> {
    use crate::auth::{Caller, Credentials};
    let Some(want) = &app.token_sha256 else {
        return Ok(None);
    };
    match Credentials::of(req.headers(), false).caller(Some(want), &app.grants) {
        Caller::Pod => Ok(None),
        Caller::Grant(g) => Ok(Some(g)),
        Caller::Lapsed(e) => Err(e),
        Caller::Nobody => Err(Error::Unauthorized),
    }
}

/// Runs the handler of an authenticated request's `route`, once its method is one the route takes;
/// `granted_slot` is the transfer slot a grant token's request already holds.
async fn route_to(
    app: &Arc<App>,
    route: Route<'_>,
    req: Request<Incoming>,
    q: &body::Query,
    granted_slot: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Result<Response<Body>, Error> {
    let method = req.method().clone();
    let only = |m: Method, allow: &'static str| {
        if method == m {
            Ok(())
        } else {
            Err(Error::MethodNotAllowed(allow))
        }
    };
    match route {
        Route::Healthz => Err(Error::MethodNotAllowed("GET")),
        Route::Info => {
            only(Method::GET, "GET")?;
            Ok(info(app))
        }
        Route::Metrics => {
            only(Method::GET, "GET")?;
            Ok(metrics(app))
        }
        Route::Processes => {
            only(Method::GET, "GET")?;
            Ok(process::list(app))
        }
        Route::Process(id) => process::process(app, id, req, q).await,
        Route::Output(id) => {
            only(Method::GET, "GET")?;
            output::handle(app, id, q)
        }
        Route::Stdin(id) => {
            only(Method::POST, "POST")?;
            process::stdin(app, id, req, q).await
        }
        Route::Signal(id) => {
            only(Method::POST, "POST")?;
            process::signal(app, id, req).await
        }
        Route::Resize(id) => {
            only(Method::POST, "POST")?;
            process::resize(app, id, req).await
        }
        Route::Files => {
            let granted = granted_slot.is_some();
            let answer = files::handle(req, q, app.same_owner, granted_slot, &app.files).await;
            grant_refusal(app, granted, answer)
        }
        Route::Grants => artifacts::grants(app, req).await,
        Route::Grant(id) => {
            only(Method::DELETE, "DELETE")?;
            app.grants.revoke(id)?;
            Ok(body::empty(StatusCode::NO_CONTENT))
        }
        Route::Pulls => {
            only(Method::GET, "GET")?;
            Ok(body::json(
                StatusCode::OK,
                &protocol::artifacts::PullList {
                    pulls: app.pulls.list(),
                },
            ))
        }
        Route::Pull(id) => artifacts::pull(app, id, req, q).await,
        Route::Properties => {
            only(Method::GET, "GET")?;
            Ok(properties::list(app))
        }
        Route::Property(name) => properties::property(app, name, req).await,
        Route::Registry => Err(Error::NoRoute(req.uri().path().to_owned())),
    }
}

/// A `/v1/files` answer as a grant holder gets it: a symlink on the way is a way out of the grant,
/// so it is forbidden, and counted as a refusal of its token.
fn grant_refusal(
    app: &App,
    granted: bool,
    answer: Result<Response<Body>, Error>,
) -> Result<Response<Body>, Error> {
    match answer {
        Err(Error::Files(crate::files::FilesError::Symlinked(m))) if granted => {
            Err(app.grants.refuse(Error::Forbidden(m)))
        }
        answer => answer,
    }
}

/// `GET /v1/info`: the protocol version, the shim's version and this start's boot id.
fn info(app: &App) -> Response<Body> {
    let info = protocol::Info {
        protocol: protocol::PROTOCOL_VERSION,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        boot_id: app.boot_id.clone(),
    };
    body::json(StatusCode::OK, &info)
}

/// `GET /metrics`: Prometheus text.
fn metrics(app: &App) -> Response<Body> {
    let mut r = Response::new(body::full(app.metrics.render(
        &app.table,
        &app.grants,
        &app.pulls,
    )));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// `GET /healthz`, answered before authentication: 200 while serving, 503 once shutdown began.
fn healthz(app: &App) -> Response<Body> {
    if app.is_shutting_down() {
        body::empty(StatusCode::SERVICE_UNAVAILABLE)
    } else {
        Response::new(body::full("ok\n"))
    }
}
