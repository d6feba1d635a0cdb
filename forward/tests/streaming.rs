//! Blobs through the forwarder in front of the real shim: a large one streamed with bounded memory
//! to a slow reader, a source that breaks off midway seen as a cut by the client, the idle deadline
//! (a silent connection, a reader that stops) and the connection cap. The shim as in forward.rs.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{
    Forwarder, basic, granted, granted_layout, header, layout_image, port, random_file, scratch,
    source_shim,
};
use test_support::raw_bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reads the answer head of a GET on `s`, returning its text and what came after it.
async fn read_head(s: &mut tokio::net::TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the head");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..at]).into_owned();
            return (head, buf[at + 4..].to_vec());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_blob_streams_with_bounded_memory() {
    const MIB: u64 = 256;
    let shim = source_shim();
    let tmp = scratch("large");
    let dir = tmp.join("big");
    std::fs::create_dir_all(&dir).unwrap();
    let layer = tmp.join("layer");
    random_file(&layer, MIB);
    let digest = layout_image(&dir, &layer);
    let token = granted(&shim, &dir).await;
    let fwd = Forwarder::start("127.0.0.0/8", port(&shim.addr), &[]);
    let before = fwd.rss();

    let mut s = tokio::net::TcpStream::connect(&fwd.addr).await.unwrap();
    let req = format!(
        "GET /v2/127.0.0.2/big/blobs/{digest} HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n",
        basic("plain", &token)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let (head, first) = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        header(&head, "content-length"),
        Some(&*(MIB << 20).to_string())
    );
    let mut hasher = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut sink = hasher.stdin.take().unwrap();
    use std::io::Write as _;
    sink.write_all(&first).unwrap();
    let mut got = first.len() as u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut peak = 0;
    // A slow reader first: 32 MiB at about 64 MiB/s, while the shim could send it all at once.
    while got < 32 << 20 {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        sink.write_all(&buf[..n]).unwrap();
        got += n as u64;
        peak = peak.max(fwd.rss());
        tokio::time::sleep(Duration::from_millis(n as u64 / 65536)).await;
    }
    while got < MIB << 20 {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "cut at {got}");
        sink.write_all(&buf[..n]).unwrap();
        got += n as u64;
    }
    drop(sink);
    let sum = hasher.wait_with_output().unwrap().stdout;
    assert_eq!(
        format!("sha256:{}", &String::from_utf8_lossy(&sum)[..64]),
        digest
    );
    let hwm = fwd.peak_rss();
    assert!(
        hwm < before + (32 << 20),
        "the forwarder grew from {before} to a peak of {hwm} bytes streaming {MIB} MiB"
    );
    eprintln!("forwarder RSS: {before} at start, {peak} while slow, {hwm} peak");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_cut_midway_is_a_cut_for_the_client() {
    let shim = source_shim();
    let (_tmp, digest, token) = granted_layout(&shim, "cut", 32).await;
    let (proxy, cuts) =
        test_support::cutting_proxy_on("127.0.0.2:0", shim.addr.clone(), 4 << 20, 8 << 20)
            .await
            .unwrap();
    let fwd = Forwarder::start("127.0.0.0/8", port(&proxy), &[]);
    let path = format!("/v2/127.0.0.2/img/blobs/{digest}");
    let auth = basic("plain", &token);
    let bytes = raw_bytes(&fwd.addr, "GET", &path, &[("Authorization", &auth)]).await;
    let at = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&bytes[..at]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let length: usize = header(&head, "content-length").unwrap().parse().unwrap();
    let body = bytes.len() - at - 4;
    assert_eq!(length, 32 << 20);
    assert!(
        body < length,
        "{body} of {length} bytes, then the close: a cut"
    );
    assert!(body >= 2 << 20, "the cut came midway ({body} bytes)");
    assert_eq!(cuts.load(std::sync::atomic::Ordering::Relaxed), 1);
    // curl, a real client, sees the same: a transfer closed with bytes outstanding.
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-H",
            &format!("Authorization: {auth}"),
        ])
        .arg(format!("http://{}{path}", fwd.addr))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(18),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_and_stalled_readers_are_closed() {
    let shim = source_shim();
    let (_tmp, digest, token) = granted_layout(&shim, "idle", 64).await;
    let env = [
        ("STEPSHIM_FORWARD_IDLE_TIMEOUT", "1"),
        ("STEPSHIM_FORWARD_MAX_CONNECTIONS", "1"),
    ];
    let fwd = Forwarder::start("127.0.0.0/8", port(&shim.addr), &env);

    // A connection that sends nothing is closed at the idle timeout (before the first request's).
    let mut quiet = tokio::net::TcpStream::connect(&fwd.addr).await.unwrap();
    let start = std::time::Instant::now();
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(10), quiet.read(&mut byte))
        .await
        .expect("closed within the deadline")
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    drop(quiet);

    // A reader that stops: once the socket buffers are full and nothing moves for a second, the
    // connection is cut; what the reader gets afterwards ends short of the length.
    let path = format!("/v2/127.0.0.2/img/blobs/{digest}");
    let auth = basic("plain", &token);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        let mut s = tokio::net::TcpStream::connect(&fwd.addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut peek = [0u8; 12];
        s.read_exact(&mut peek).await.unwrap();
        if &peek == b"HTTP/1.1 200" {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no pull answered 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let closes = || {
        fwd.log
            .lock()
            .unwrap()
            .matches("idle connection closed")
            .count()
    };
    let before = closes();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while closes() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled reader was not cut: {}",
            fwd.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest).await;
    assert!(
        (rest.len() as u64) < 64 << 20,
        "{} bytes after the stall: the connection was cut",
        rest.len()
    );
}
