//! Loopback TCP proxies for faults: one that cuts each connection after a random number of response
//! bytes, mid-frame or not (the fault behind every resume-after-disconnect test and the benchmark's
//! cut stream), and one that holds every answer until told (a reader that takes nothing).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Starts a proxy on `127.0.0.1:0` in front of `target` (`host:port`) that passes requests through
/// and cuts each connection (resetting both sides) after between `min` and `max` bytes from the
/// server, drawn anew for every connection. Returns its address and the number of cuts so far.
pub async fn cutting_proxy(
    target: String,
    min: u64,
    max: u64,
) -> std::io::Result<(String, Arc<AtomicU64>)> {
    cutting_proxy_on("127.0.0.1:0", target, min, max).await
}

/// [`cutting_proxy`] listening on `listen` (`host:port`, e.g. another loopback address).
pub async fn cutting_proxy_on(
    listen: &str,
    target: String,
    min: u64,
    max: u64,
) -> std::io::Result<(String, Arc<AtomicU64>)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?.to_string();
    let cuts = Arc::new(AtomicU64::new(0));
    let counter = cuts.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let budget = min + rand::random::<u64>() % max.saturating_sub(min).max(1);
            tokio::spawn(relay(client, target.clone(), budget, counter.clone()));
        }
    });
    Ok((addr, cuts))
}

/// One connection: requests flow freely, the response stops after `budget` bytes.
async fn relay(client: tokio::net::TcpStream, target: String, budget: u64, cuts: Arc<AtomicU64>) {
    let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
    let mut sent = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match sr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n as u64,
        };
        let take = n.min(budget - sent);
        if cw.write_all(&buf[..take as usize]).await.is_err() {
            break;
        }
        sent += take;
        if sent >= budget {
            cuts.fetch_add(1, Ordering::Relaxed);
            break;
        }
    }
    up.abort();
    // Dropping both halves resets the connections.
}

/// A loopback proxy in front of `target` that passes requests at once and holds every answer
/// until the gate is opened (`true`): a reader that takes nothing while the test acts.
pub async fn gated_proxy(
    target: String,
) -> std::io::Result<(String, tokio::sync::watch::Sender<bool>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (target, mut open) = (target.clone(), rx.clone());
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
                if open.wait_for(|o| *o).await.is_ok() {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                }
                up.abort();
            });
        }
    });
    Ok((addr, tx))
}
