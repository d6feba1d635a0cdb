//! One connection: its TLS handshake when the shim has a seed (PROTOCOL.md 1.1), then HTTP/1.1 with
//! the header budget and timeout, under the connection cap's eviction and the authentication
//! deadline, which the handshake counts against.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::Poll;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};

use super::{App, HEADER_TIMEOUT, conns, handle};
use crate::debug;

/// Serves one connection (after its TLS handshake when the shim has a seed) until it ends, is
/// evicted, or has not authenticated in time; the handshake counts against that deadline.
pub(super) async fn serve(
    app: Arc<App>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    ticket: conns::Ticket,
) {
    let auth_deadline = tokio::time::Instant::now() + app.limits.auth_timeout;
    #[cfg(feature = "tls")]
    if let Some(server) = app.tls.clone() {
        let acceptor = tokio_rustls::TlsAcceptor::from(server);
        let handshake = tokio::time::timeout_at(auth_deadline, acceptor.accept(stream));
        let failed = || {
            app.metrics
                .tls_handshake_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        };
        tokio::select! {
            done = handshake => match done {
                Ok(Ok(tls)) => serve_io(app.clone(), tls, peer, ticket, auth_deadline).await,
                Ok(Err(e)) => {
                    failed();
                    debug!(%peer, cause = %e, "TLS handshake failed");
                }
                Err(_) => {
                    failed();
                    debug!(%peer, "connection closed: no TLS handshake within the deadline");
                }
            },
            _ = ticket.slot.evict.notified() => {
                debug!(%peer, "connection evicted at the connection cap during its handshake");
            }
        }
        return;
    }
    serve_io(app, stream, peer, ticket, auth_deadline).await
}

/// Serves HTTP/1.1 on `io` (a TCP stream, or TLS over one) until it ends, is evicted, or has not
/// authenticated by `auth_deadline`.
async fn serve_io<I>(
    app: Arc<App>,
    io: I,
    peer: std::net::SocketAddr,
    ticket: conns::Ticket,
    auth_deadline: tokio::time::Instant,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let slot = ticket.slot.clone();
    let limits = app.limits;
    let service = {
        let slot = slot.clone();
        service_fn(move |req| {
            let app = app.clone();
            let slot = slot.clone();
            async move { Ok::<_, Infallible>(handle(app, req, &slot).await) }
        })
    };
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_header_size(limits.max_header_bytes)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let auth_deadline = tokio::time::sleep_until(auth_deadline);
    tokio::pin!(auth_deadline);
    let evicted = slot.evict.notified();
    tokio::pin!(evicted);
    // One hand-written poll instead of `select!` (smaller): the connection, its eviction, and the
    // authentication deadline, which stops mattering once a request passed authentication.
    let ended = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = conn.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        if evicted.as_mut().poll(cx).is_ready() {
            debug!(%peer, "connection evicted at the connection cap");
            return Poll::Ready(Ok(()));
        }
        if !slot.authed() && auth_deadline.as_mut().poll(cx).is_ready() {
            debug!(%peer, "connection closed: no valid token within the deadline");
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    })
    .await;
    if let Err(e) = ended {
        debug!(%peer, cause = %e, "connection ended with an error");
    }
    drop(ticket);
}
