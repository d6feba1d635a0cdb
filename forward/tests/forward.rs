//! The forwarder binary in front of the real shim (plain HTTP): pulls routed to the pod the path
//! names and rewritten without its address, answers passed back as the shim gave them, keep-alive
//! on the client's side, every refusal with its OCI error body, a large blob streamed with bounded
//! memory, a source that breaks off midway seen as a cut by the client, the idle deadline and the
//! connection cap. The shim is `$STEPSHIM_BIN`, or `stepshim` beside the test executable (`cargo
//! test --workspace` builds it; alone: `cargo build -p stepshim`).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{
    Forwarder, Shim, basic, granted, header, layout_image, oci_error, port, random_file,
    rootfs_image, scratch,
};
use http_body_util::{BodyExt, Empty};
use test_support::{raw_bytes, raw_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET or HEAD `path` on `addr` with `Authorization: auth` (none if empty).
async fn get(addr: &str, method: &str, path: &str, auth: &str) -> (u16, String, Vec<u8>) {
    let headers: &[(&str, &str)] = if auth.is_empty() {
        &[]
    } else {
        &[("Authorization", auth)]
    };
    raw_with(addr, method, path, headers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_reach_the_named_pod_and_come_back_as_the_shim_answered() {
    let shim = Shim::start();
    let tmp = scratch("route");
    let dir = tmp.join("app");
    rootfs_image(&dir);
    rootfs_image(&dir.join("sub"));
    let token = granted(&shim, &dir).await;
    let fwd = Forwarder::start("10.0.0.0/8, 127.0.0.0/8", port(&shim.addr), &[]);
    let creds = basic("plain", &token);
    let direct_auth = basic("anyone", &token);

    let direct = get(&shim.addr, "GET", "/v2/app/manifests/latest", &direct_auth).await;
    let via = get(
        &fwd.addr,
        "GET",
        "/v2/127.0.0.1/app/manifests/latest",
        &creds,
    )
    .await;
    assert_eq!(direct.0, 200, "{}", direct.1);
    assert_eq!((via.0, &via.2), (200, &direct.2), "{}", via.1);
    for name in ["docker-content-digest", "content-type", "content-length"] {
        assert_eq!(header(&via.1, name), header(&direct.1, name), "{name}");
    }
    assert_eq!(
        header(&via.1, "docker-distribution-api-version"),
        Some("registry/2.0")
    );
    let digest = header(&via.1, "docker-content-digest").unwrap().to_owned();

    let head = get(
        &fwd.addr,
        "HEAD",
        "/v2/127.0.0.1/app/manifests/latest",
        &creds,
    )
    .await;
    assert_eq!((head.0, head.2.len()), (200, 0), "{}", head.1);
    assert_eq!(header(&head.1, "docker-content-digest"), Some(&*digest));
    let length = direct.2.len().to_string();
    assert_eq!(header(&head.1, "content-length"), Some(&*length));

    let manifest: serde_json::Value = serde_json::from_slice(&via.2).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let path = format!("/v2/127.0.0.1/app/blobs/{layer}");
    let blob = get(&fwd.addr, "GET", &path, &creds).await;
    let direct_blob = get(
        &shim.addr,
        "GET",
        &format!("/v2/app/blobs/{layer}"),
        &direct_auth,
    )
    .await;
    assert_eq!((blob.0, &blob.2), (200, &direct_blob.2));
    assert_eq!(header(&blob.1, "docker-content-digest"), Some(layer));

    let by_digest = format!("/v2/127.0.0.1/app/manifests/{digest}");
    assert_eq!(get(&fwd.addr, "GET", &by_digest, &creds).await.2, direct.2);
    let nested = get(
        &fwd.addr,
        "GET",
        "/v2/127.0.0.1/app/sub/manifests/latest",
        &creds,
    )
    .await;
    assert_eq!(nested.0, 200, "an image below the grant's directory");

    let unknown = get(
        &fwd.addr,
        "GET",
        "/v2/127.0.0.1/other/manifests/latest",
        &creds,
    )
    .await;
    assert_eq!(unknown.0, 404);
    assert_eq!(
        oci_error(&unknown.2).0,
        "NAME_UNKNOWN",
        "the shim's own answer"
    );

    let root = get(&fwd.addr, "GET", "/v2/", &creds).await;
    assert_eq!((root.0, root.2.as_slice()), (200, &b"{}"[..]));
    let probe = get(&fwd.addr, "GET", "/healthz", "").await;
    assert_eq!(probe.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_connection_carries_several_pulls() {
    let shim = Shim::start();
    let tmp = scratch("keepalive");
    let dir = tmp.join("app");
    rootfs_image(&dir);
    let token = granted(&shim, &dir).await;
    let fwd = Forwarder::start("127.0.0.0/8", port(&shim.addr), &[]);
    let tcp = tokio::net::TcpStream::connect(&fwd.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    let driver = tokio::spawn(conn);
    let mut digests = Vec::new();
    for method in ["HEAD", "GET", "GET"] {
        let req = http::Request::builder()
            .method(method)
            .uri("/v2/127.0.0.1/app/manifests/latest")
            .header("host", "127.0.0.1")
            .header("authorization", basic("plain", &token))
            .header("accept", "application/vnd.oci.image.manifest.v1+json")
            .body(Empty::<Bytes>::new())
            .unwrap();
        send.ready().await.unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        digests.push(resp.headers()["docker-content-digest"].clone());
        resp.into_body().collect().await.unwrap();
    }
    assert!(digests.windows(2).all(|w| w[0] == w[1]));
    assert!(!driver.is_finished(), "the connection is still open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_oci_error_bodies() {
    let shim = Shim::start();
    let tmp = scratch("refuse");
    let dir = tmp.join("app");
    rootfs_image(&dir);
    let token = granted(&shim, &dir).await;
    let creds = basic("plain", &token);
    let fwd = Forwarder::start("127.0.0.0/8", port(&shim.addr), &[]);
    let path = "/v2/127.0.0.1/app/manifests/latest";

    let none = get(&fwd.addr, "GET", path, "").await;
    assert_eq!(none.0, 401);
    assert_eq!(
        header(&none.1, "www-authenticate"),
        Some(r#"Basic realm="stepshim""#)
    );
    assert_eq!(oci_error(&none.2).0, "UNAUTHORIZED");
    assert_eq!(get(&fwd.addr, "GET", "/v2/", "").await.0, 401);

    let wrong = get(&fwd.addr, "GET", path, &basic("plain", "not-the-grant")).await;
    assert_eq!(wrong.0, 401, "the shim's refusal of the token, passed back");
    assert_eq!(
        header(&wrong.1, "www-authenticate"),
        Some(r#"Basic realm="stepshim""#)
    );
    let user = get(&fwd.addr, "GET", path, &basic("root", &token)).await;
    assert_eq!(
        (user.0, oci_error(&user.2).0.as_str()),
        (401, "UNAUTHORIZED")
    );

    for method in ["PUT", "POST", "DELETE", "PATCH"] {
        let (status, head, body) = get(&fwd.addr, method, path, &creds).await;
        assert_eq!(
            (status, oci_error(&body).0.as_str()),
            (405, "UNSUPPORTED"),
            "{method}"
        );
        assert_eq!(header(&head, "allow"), Some("GET, HEAD"));
    }
    let v6 = get(&fwd.addr, "GET", "/v2/::1/app/manifests/latest", &creds).await;
    assert_eq!((v6.0, oci_error(&v6.2).0.as_str()), (400, "NAME_INVALID"));
    let upper = get(
        &fwd.addr,
        "GET",
        "/v2/127.0.0.1/App/manifests/latest",
        &creds,
    )
    .await;
    assert_eq!(
        (upper.0, oci_error(&upper.2).0.as_str()),
        (400, "NAME_INVALID")
    );
    let push = get(&fwd.addr, "GET", "/v2/127.0.0.1/app/blobs/uploads/", &creds).await;
    assert_eq!(push.0, 400);
    let big = "x".repeat(20 << 10);
    let (status, _, _) = raw_with(&fwd.addr, "GET", path, &[("X-Big", &big)]).await;
    assert_eq!(status, 431, "a head over STEPSHIM_FORWARD_MAX_HEADER_BYTES");

    // A forwarder whose pod network does not hold the shim's address reaches nothing.
    let elsewhere = Forwarder::start("10.244.0.0/16", port(&shim.addr), &[]);
    let used = shim.client.grants().await.unwrap()[0].used;
    let denied = get(&elsewhere.addr, "GET", path, &creds).await;
    let (code, message) = oci_error(&denied.2);
    assert_eq!((denied.0, code.as_str()), (403, "DENIED"));
    assert!(message.contains("127.0.0.1"), "{message}");
    let after = shim.client.grants().await.unwrap()[0].used;
    assert_eq!(after, used, "the grant was not presented to the shim");

    // Nothing listens: 502 naming the cause.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let nowhere = Forwarder::start("127.0.0.0/8", closed_port, &[]);
    let refused = get(&nowhere.addr, "GET", path, &creds).await;
    let (code, message) = oci_error(&refused.2);
    assert_eq!((refused.0, code.as_str()), (502, "UNAVAILABLE"));
    assert!(
        message.contains("cannot connect") && message.contains("refused"),
        "{message}"
    );
}

#[test]
fn bad_settings_exit_64_with_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stepshim-forward"))
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("STEPSHIM_FORWARD_ALLOW"), "{err}");
}

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
    let shim = Shim::start();
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
        "GET /v2/127.0.0.1/big/blobs/{digest} HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n",
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
    let shim = Shim::start();
    let tmp = scratch("cut");
    let dir = tmp.join("img");
    std::fs::create_dir_all(&dir).unwrap();
    let layer = tmp.join("layer");
    random_file(&layer, 32);
    let digest = layout_image(&dir, &layer);
    let token = granted(&shim, &dir).await;
    let (proxy, cuts) = test_support::cutting_proxy(shim.addr.clone(), 4 << 20, 8 << 20)
        .await
        .unwrap();
    let fwd = Forwarder::start("127.0.0.0/8", port(&proxy), &[]);
    let path = format!("/v2/127.0.0.1/img/blobs/{digest}");
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
async fn idle_connections_and_stalled_readers_are_closed_and_the_cap_holds() {
    let shim = Shim::start();
    let tmp = scratch("idle");
    let dir = tmp.join("img");
    std::fs::create_dir_all(&dir).unwrap();
    let layer = tmp.join("layer");
    random_file(&layer, 64);
    let digest = layout_image(&dir, &layer);
    let token = granted(&shim, &dir).await;
    let env = [
        ("STEPSHIM_FORWARD_IDLE_TIMEOUT", "1"),
        ("STEPSHIM_FORWARD_MAX_CONNECTIONS", "1"),
    ];
    let fwd = Forwarder::start("127.0.0.0/8", port(&shim.addr), &env);

    // A connection that sends nothing holds the only slot: the next one is turned away.
    let mut quiet = tokio::net::TcpStream::connect(&fwd.addr).await.unwrap();
    let (status, _, body) = raw_with(&fwd.addr, "GET", "/healthz", &[]).await;
    assert_eq!(
        (status, oci_error(&body).0.as_str()),
        (503, "TOOMANYREQUESTS")
    );
    // ... until the idle timeout closes it.
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
    let path = format!("/v2/127.0.0.1/img/blobs/{digest}");
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
        // The slot of the closed connection is given back as its task ends: try again.
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was never given back"
        );
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

#[test]
fn sigterm_stops_it_cleanly() {
    let mut fwd = Forwarder::start("127.0.0.0/8", 7777, &[]);
    let pid = fwd.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = fwd.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{}", fwd.log.lock().unwrap());
}
