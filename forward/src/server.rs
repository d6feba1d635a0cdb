//! The listener and its connections: the cap on connections open at once (`slots`: at the cap
//! an idle connection is evicted, and a new one is answered 503 and closed only when every open
//! connection has a request in flight), HTTP/1.1 with keep-alive on each, the deadline of a new
//! connection's first request, the idle deadline, and the drain at shutdown (connections finish
//! their request in flight, within a grace).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::answer::Refusal;
use crate::config::Config;
use crate::idle::{Activity, Marked};
use crate::service::{self, Shared};
use crate::slots::{Slot, Slots, Tracked};
use crate::upstream::Reach;

/// How long connections may take to finish at shutdown.
const DRAIN: Duration = Duration::from_secs(10);

/// Serves `listener` with `config` until `shutdown` completes, then drains.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    // Read once at start so a forwarder that cannot tell the node's addresses never serves (each
    // pull reads them again, see `service`).
    let node = crate::sys::interface_addresses()?;
    tracing::info!(?node, "the node's addresses: never a source");
    let shared = Arc::new(Shared {
        allow: config.allow.clone(),
        reach: Reach {
            port: config.shim_port,
            connect_timeout: config.connect_timeout,
            idle_timeout: config.idle_timeout,
        },
    });
    let slots = Slots::new(config.max_connections);
    let (stop, stopped) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a connection reset before accept: keep serving.
                    tracing::warn!(cause = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(ticket) = slots.admit() else {
            tracing::warn!(%peer, "connection cap reached, every request in flight: answered 503");
            tokio::spawn(busy(stream));
            continue;
        };
        let (shared, config, stopped) = (shared.clone(), config.clone(), stopped.clone());
        tokio::spawn(async move {
            connection(stream, &shared, &config, &ticket.slot, stopped).await;
            drop(ticket);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    if tokio::time::timeout(DRAIN, slots.drained()).await.is_err() {
        tracing::warn!("connections still open after the drain: closed");
    }
    Ok(())
}

/// One client connection, until the client closes it, it sends no complete request head within
/// the first request's deadline, it stays idle past the idle deadline, it is evicted at the cap,
/// or the forwarder stops.
async fn connection(
    stream: TcpStream,
    shared: &Shared,
    config: &Config,
    slot: &Arc<Slot>,
    mut stopped: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let activity = Activity::new();
    let io = TokioIo::new(Marked::new(stream, activity.clone()));
    let service = service_fn(|req| {
        let in_flight = slot.begin();
        let answer = service::handle(shared, &activity, req);
        async move {
            answer
                .await
                .map(|r| r.map(|body| Tracked::new(body, in_flight)))
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(config.idle_timeout)
        .max_buf_size(config.max_header_bytes)
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let idle = config.idle_timeout;
    tokio::select! {
        r = conn.as_mut() => return done(r),
        _ = activity.expired(idle) => return tracing::debug!("idle connection closed"),
        _ = no_first_request(slot, config.first_request_timeout) => {
            return tracing::debug!("no request within the first request's deadline: closed");
        }
        _ = slot.evict.notified() => {
            return tracing::debug!("idle connection evicted at the connection cap");
        }
        _ = stopped.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        r = conn.as_mut() => done(r),
        _ = activity.expired(idle) => tracing::debug!("idle connection closed"),
    }
}

/// Completes `limit` after the connection opened if no complete request head has arrived by then;
/// never once one has (keep-alive waits between requests are the idle deadline's).
async fn no_first_request(slot: &Slot, limit: Duration) {
    tokio::time::sleep(limit).await;
    if slot.requested() {
        std::future::pending::<()>().await;
    }
}

fn done(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(cause = %e, "connection ended");
    }
}

/// The answer to a connection over the cap: 503 with the OCI error body, then the close.
async fn busy(mut stream: TcpStream) {
    let body = Refusal::Busy.body();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), write).await;
}

/// Writes `addr` and a newline to `path` (through `path.tmp` and a rename, so a reader never sees
/// half of it).
pub fn write_ready(path: &Path, addr: std::net::SocketAddr) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, format!("{addr}\n"))?;
    std::fs::rename(&tmp, path)
}
