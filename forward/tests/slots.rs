//! The forwarder binary's connection cap against connections that hold a slot and ask for nothing
//! (any process in the host's network can open them): a new connection at the cap evicts the
//! oldest one that never sent a request, then the oldest idle keep-alive one, so a pull still gets
//! in; only when every connection has a request in flight is it turned away. A connection that
//! sends no complete request head within `STEPSHIM_FORWARD_FIRST_REQUEST_TIMEOUT` is closed.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    Forwarder, basic, granted, granted_layout, oci_error, port, rootfs_image, scratch, source_shim,
};
use test_support::raw_with;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection that has sent nothing.
async fn quiet(addr: &str) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

/// A keep-alive connection whose one request was answered in full, and the answer's status.
async fn answered_once(addr: &str, path: &str, headers: &str) -> (TcpStream, u16) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..at]).into_owned();
            let length: usize = common::header(&head, "content-length")
                .unwrap()
                .parse()
                .unwrap();
            if got.len() >= at + 4 + length {
                return (s, head[9..12].parse().unwrap());
            }
        }
        assert!(Instant::now() < deadline, "{got:?}");
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed before the whole answer: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// A keep-alive connection whose one request, the probe, was answered in full.
async fn probed(addr: &str) -> TcpStream {
    answered_once(addr, "/healthz", "").await.0
}

/// Whether the forwarder closes `s` (end of stream, no byte) within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut byte = [0u8; 1];
    match tokio::time::timeout(limit, s.read(&mut byte)).await {
        Ok(Ok(n)) => n == 0,
        Ok(Err(_)) => true,
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_make_room_for_a_pull_at_the_cap() {
    let shim = source_shim();
    let tmp = scratch("evict");
    let dir = tmp.join("app");
    rootfs_image(&dir);
    let token = granted(&shim, &dir).await;
    let auth = basic("plain", &token);
    let fwd = Forwarder::start(
        "127.0.0.0/8",
        port(&shim.addr),
        &[("STEPSHIM_FORWARD_MAX_CONNECTIONS", "4")],
    );
    let mut silent = [quiet(&fwd.addr).await, quiet(&fwd.addr).await];
    let mut probes = [probed(&fwd.addr).await, probed(&fwd.addr).await];
    // Each pull, on a connection it keeps open, takes the place of the oldest connection that
    // never sent a request, then of the oldest one idle between requests (the probes, then the
    // first pull's).
    let authorization = format!("Authorization: {auth}\r\n");
    let path = "/v2/127.0.0.2/app/manifests/latest";
    let mut pulls = Vec::new();
    for i in 0..5 {
        let (conn, status) = answered_once(&fwd.addr, path, &authorization).await;
        assert_eq!(status, 200, "pull {i} at the cap");
        let victim = match i {
            0 | 1 => &mut silent[i],
            2 | 3 => &mut probes[i - 2],
            _ => &mut pulls[0],
        };
        assert!(
            closed_within(victim, Duration::from_secs(5)).await,
            "pull {i} did not close the expected connection"
        );
        pulls.push(conn);
    }
    for (i, p) in pulls.iter_mut().enumerate().skip(1) {
        assert!(
            !closed_within(p, Duration::from_millis(100)).await,
            "pull {i}'s connection is open"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_connection_is_turned_away_only_when_every_one_is_busy() {
    let shim = source_shim();
    let (_tmp, digest, token) = granted_layout(&shim, "busy", 32).await;
    let fwd = Forwarder::start(
        "127.0.0.0/8",
        port(&shim.addr),
        &[("STEPSHIM_FORWARD_MAX_CONNECTIONS", "1")],
    );
    // A blob answer the client does not read stays in flight (the socket buffers fill).
    let mut busy = TcpStream::connect(&fwd.addr).await.unwrap();
    let auth = basic("plain", &token);
    let req = format!(
        "GET /v2/127.0.0.2/img/blobs/{digest} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n"
    );
    busy.write_all(req.as_bytes()).await.unwrap();
    let mut peek = [0u8; 12];
    busy.read_exact(&mut peek).await.unwrap();
    assert_eq!(&peek, b"HTTP/1.1 200");
    let (status, _, body) = raw_with(&fwd.addr, "GET", "/healthz", &[]).await;
    assert_eq!(
        (status, oci_error(&body).0.as_str()),
        (503, "TOOMANYREQUESTS")
    );
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), busy.read_to_end(&mut rest));
    read.await.unwrap().unwrap();
    assert!(
        rest.len() >= 32 << 20,
        "the busy pull was not cut: {} bytes",
        rest.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_a_complete_request_is_closed_at_the_first_request_deadline() {
    let fwd = Forwarder::start(
        "127.0.0.0/8",
        7777,
        &[("STEPSHIM_FORWARD_FIRST_REQUEST_TIMEOUT", "1")],
    );
    let start = Instant::now();
    let mut silent = quiet(&fwd.addr).await;
    let mut partial = quiet(&fwd.addr).await;
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut answered = probed(&fwd.addr).await;
    for (what, s) in [("silent", &mut silent), ("half a head", &mut partial)] {
        assert!(
            closed_within(s, Duration::from_secs(10)).await,
            "{what}: open after 10 s (the idle timeout is 60)"
        );
        assert!(start.elapsed() >= Duration::from_millis(900), "{what}");
    }
    assert!(
        !closed_within(&mut answered, Duration::from_secs(2)).await,
        "a connection that sent a request waits under the idle timeout"
    );
}
