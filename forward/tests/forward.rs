//! The forwarder binary in front of the real shim (plain HTTP): pulls routed to the pod the path
//! names and rewritten without its address, answers passed back as the shim gave them, keep-alive
//! on the client's side, every refusal with its OCI error body, its start and stop. The shim is
//! `$STEPSHIM_BIN`, or `stepshim` beside the test executable (`cargo test --workspace` builds it;
//! alone: `cargo build -p stepshim`).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{
    Forwarder, basic, granted, header, oci_error, port, rootfs_image, scratch, source_shim,
};
use http_body_util::{BodyExt, Empty};
use test_support::raw_with;

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
    let shim = source_shim();
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
        "/v2/127.0.0.2/app/manifests/latest",
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
        "/v2/127.0.0.2/app/manifests/latest",
        &creds,
    )
    .await;
    assert_eq!((head.0, head.2.len()), (200, 0), "{}", head.1);
    assert_eq!(header(&head.1, "docker-content-digest"), Some(&*digest));
    let length = direct.2.len().to_string();
    assert_eq!(header(&head.1, "content-length"), Some(&*length));

    let manifest: serde_json::Value = serde_json::from_slice(&via.2).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let path = format!("/v2/127.0.0.2/app/blobs/{layer}");
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

    let by_digest = format!("/v2/127.0.0.2/app/manifests/{digest}");
    assert_eq!(get(&fwd.addr, "GET", &by_digest, &creds).await.2, direct.2);
    let nested = get(
        &fwd.addr,
        "GET",
        "/v2/127.0.0.2/app/sub/manifests/latest",
        &creds,
    )
    .await;
    assert_eq!(nested.0, 200, "an image below the grant's directory");

    let unknown = get(
        &fwd.addr,
        "GET",
        "/v2/127.0.0.2/other/manifests/latest",
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
    let shim = source_shim();
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
            .uri("/v2/127.0.0.2/app/manifests/latest")
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
    let shim = source_shim();
    let tmp = scratch("refuse");
    let dir = tmp.join("app");
    rootfs_image(&dir);
    let token = granted(&shim, &dir).await;
    let creds = basic("plain", &token);
    let fwd = Forwarder::start("127.0.0.0/8", port(&shim.addr), &[]);
    let path = "/v2/127.0.0.2/app/manifests/latest";

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
        "/v2/127.0.0.2/App/manifests/latest",
        &creds,
    )
    .await;
    assert_eq!(
        (upper.0, oci_error(&upper.2).0.as_str()),
        (400, "NAME_INVALID")
    );
    let push = get(&fwd.addr, "GET", "/v2/127.0.0.2/app/blobs/uploads/", &creds).await;
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
    assert!(message.contains("127.0.0.2"), "{message}");
    let after = shim.client.grants().await.unwrap()[0].used;
    assert_eq!(after, used, "the grant was not presented to the shim");

    // Nothing listens: 502 naming the cause.
    let closed = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
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
