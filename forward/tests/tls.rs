//! The forwarder in front of a real shim serving TLS 1.3 (PROTOCOL.md 1.1): the source is reached
//! only when its key is the pin the credentials name; any other key is refused in the handshake,
//! before the token is sent, and answered 502. Run with `--features shim-tls` and a shim built with
//! TLS: `$STEPSHIM_BIN` (tests/run passes the image's stepshim-tls), or `stepshim` beside the test
//! executable after `cargo build -p stepshim --features tls`.
#![cfg(feature = "shim-tls")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{
    Forwarder, basic, granted, header, oci_error, port, rootfs_image, scratch, source_shim,
    source_shim_tls,
};
use test_support::{metric, raw_with};

async fn get(addr: &str, method: &str, path: &str, auth: &str) -> (u16, String, Vec<u8>) {
    raw_with(addr, method, path, &[("Authorization", auth)]).await
}

fn sha256(data: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_source_is_reached_with_its_pin_and_refused_with_any_other() {
    let shim = source_shim_tls();
    let pin = shim.local.pin.unwrap();
    let tmp = scratch("tls");
    let dir = tmp.join("app");
    rootfs_image(&dir);
    let token = granted(&shim, &dir).await;
    let fwd = Forwarder::start("127.0.0.0/8", port(&shim.addr), &[]);
    let path = "/v2/127.0.0.2/app/manifests/latest";

    let (status, head, manifest) = get(
        &fwd.addr,
        "GET",
        path,
        &basic(&format!("tls-{pin}"), &token),
    )
    .await;
    assert_eq!(status, 200, "{head}");
    assert_eq!(
        header(&head, "docker-content-digest"),
        Some(&*sha256(&manifest))
    );
    let m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let layer = m["layers"][0]["digest"].as_str().unwrap();
    let blob_path = format!("/v2/127.0.0.2/app/blobs/{layer}");
    let (status, _, blob) = get(
        &fwd.addr,
        "GET",
        &blob_path,
        &basic(&format!("tls-{pin}"), &token),
    )
    .await;
    assert_eq!((status, sha256(&blob).as_str()), (200, layer));
    let used = shim.client.grants().await.unwrap()[0].used;
    assert_eq!(
        used, 2,
        "each request through the forwarder is one use of the grant"
    );
    let failures = |text: &str| metric(text, "stepshim_tls_handshake_failures_total").unwrap();
    let before = failures(&shim.client.metrics().await.unwrap());

    // Another pod's key: refused in the handshake, so the token never reaches the shim.
    let other = client::Seed::for_token("another pod's token").pin();
    let wrong = get(
        &fwd.addr,
        "GET",
        path,
        &basic(&format!("tls-{other}"), &token),
    )
    .await;
    let (code, message) = oci_error(&wrong.2);
    assert_eq!((wrong.0, code.as_str()), (502, "UNAVAILABLE"));
    assert!(
        message.contains("not the pinned key") && message.contains(&other.to_string()),
        "{message}"
    );
    let after = shim.client.grants().await.unwrap()[0].used;
    assert_eq!(after, used, "the grant was not presented");
    // The shim counts the failed handshake once it has seen the alert: poll with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while failures(&shim.client.metrics().await.unwrap()) != before + 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "no failed handshake counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Plain HTTP to a TLS source: no answer, a 502.
    let plain = get(&fwd.addr, "GET", path, &basic("plain", &token)).await;
    assert_eq!(
        (plain.0, oci_error(&plain.2).0.as_str()),
        (502, "UNAVAILABLE")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_plain_source_fails_the_handshake() {
    let shim = source_shim();
    let tmp = scratch("tls-plain");
    let dir = tmp.join("app");
    rootfs_image(&dir);
    let token = granted(&shim, &dir).await;
    let fwd = Forwarder::start("127.0.0.0/8", port(&shim.addr), &[]);
    let pin = client::Seed::for_token("x").pin();
    let path = "/v2/127.0.0.2/app/manifests/latest";
    let r = get(
        &fwd.addr,
        "GET",
        path,
        &basic(&format!("tls-{pin}"), &token),
    )
    .await;
    let (code, message) = oci_error(&r.2);
    assert_eq!((r.0, code.as_str()), (502, "UNAVAILABLE"));
    assert!(message.contains("TLS handshake failed"), "{message}");
}
