//! OCI image layouts under `/v2/` (PROTOCOL.md 4.12) against the real shim: served as they are,
//! manifests and blobs checked against their digests, a blob found to match sent again without
//! hashing, and a rewrite after that still caught.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::Duration;

use common::Shim;
use common::artifacts::scratch;
use common::images::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_layout_is_served_as_it_is_and_checked_against_its_digests() {
    let shim = Shim::start();
    let dir = scratch("layout").join("tools");
    let (manifest, layer_digest) = layout(&dir);
    let token = granted(&shim, &dir, 600).await;
    for tag in ["v1", "latest"] {
        let (status, head, body) =
            get(&shim, "GET", &format!("/v2/tools/manifests/{tag}"), &token).await;
        assert_eq!((status, &body), (200, &manifest), "{tag}");
        assert_eq!(header(&head, "docker-content-digest"), sha(&manifest));
    }
    // A config is a blob, not a manifest.
    let config_digest =
        serde_json::from_slice::<serde_json::Value>(&manifest).unwrap()["config"]["digest"]
            .as_str()
            .unwrap()
            .to_owned();
    let (status, _, body) = get(
        &shim,
        "GET",
        &format!("/v2/tools/manifests/{config_digest}"),
        &token,
    )
    .await;
    assert_eq!(
        (status, oci_code(&body).as_str()),
        (404, "MANIFEST_UNKNOWN")
    );
    let (status, _, body) = get(&shim, "GET", "/v2/tools/manifests/v2", &token).await;
    assert_eq!(
        (status, oci_code(&body).as_str()),
        (404, "MANIFEST_UNKNOWN")
    );
    let path = format!("/v2/tools/blobs/{layer_digest}");
    let (status, head, layer) = get(&shim, "GET", &path, &token).await;
    assert_eq!((status, sha(&layer)), (200, layer_digest.clone()));
    assert_eq!(header(&head, "content-length"), (3 << 20).to_string());
    let (status, _, body) = get(
        &shim,
        "GET",
        &format!("/v2/tools/blobs/{}", sha(b"none")),
        &token,
    )
    .await;
    assert_eq!((status, oci_code(&body).as_str()), (404, "BLOB_UNKNOWN"));

    // A blob whose content is not what its name says: cut before its end, never whole.
    let file = dir.join("blobs/sha256").join(&layer_digest[7..]);
    let mut bad = std::fs::read(&file).unwrap();
    bad[1000] ^= 1;
    std::fs::write(&file, &bad).unwrap();
    let got = cut_body(&shim, &path, &token).await;
    assert!(got < 3 << 20, "a corrupt blob was sent whole: {got} bytes");
    // A tampered manifest is refused before anything is sent.
    let m = dir.join("blobs/sha256").join(&sha(&manifest)[7..]);
    std::fs::write(&m, b"{}").unwrap();
    let (status, _, body) = get(&shim, "GET", "/v2/tools/manifests/v1", &token).await;
    assert_eq!(
        (status, oci_code(&body).as_str()),
        (404, "MANIFEST_UNKNOWN")
    );

    // A blob that is a symlink out of the image is never followed.
    let secret = scratch("secret").join("key");
    std::fs::write(&secret, b"secret").unwrap();
    let d = sha(b"secret");
    std::os::unix::fs::symlink(&secret, dir.join("blobs/sha256").join(&d[7..])).unwrap();
    let (status, _, body) = get(&shim, "GET", &format!("/v2/tools/blobs/{d}"), &token).await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    assert!(!String::from_utf8_lossy(&body).contains("secret\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_found_to_match_is_sent_again_and_a_rewrite_is_still_caught() {
    let shim = Shim::start();
    let dir = scratch("verified").join("tools");
    let (_, layer_digest) = layout(&dir);
    let token = granted(&shim, &dir, 600).await;
    // Unchanged for 2 s: the first answer's check is remembered, the second is sent unhashed.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let path = format!("/v2/tools/blobs/{layer_digest}");
    for _ in 0..2 {
        let (status, _, layer) = get(&shim, "GET", &path, &token).await;
        assert_eq!((status, sha(&layer)), (200, layer_digest.clone()));
    }
    // Rewritten in place with other bytes of the same size: its change time moved, so it is hashed
    // again and cut off.
    let file = dir.join("blobs/sha256").join(&layer_digest[7..]);
    let mut bad = std::fs::read(&file).unwrap();
    bad[(3 << 20) - 1] ^= 1;
    std::fs::write(&file, &bad).unwrap();
    let got = cut_body(&shim, &path, &token).await;
    assert!(
        got < 3 << 20,
        "a rewritten blob was sent whole: {got} bytes"
    );
}
