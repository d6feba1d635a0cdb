//! Images under `/v2/` (PROTOCOL.md 4.12) against the real shim: a `rootfs/` + `metadata.json`
//! directory served as a one-layer image whose layer is the directory's deterministic tar, and
//! every refusal: no grant, the pod's own token, an expired grant, another directory's name, a
//! symlink out, writes. The OCI layout's tests are in `images_layout.rs`.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::Duration;

use common::artifacts::{listing, scratch};
use common::images::*;
use common::{Shim, raw_with};
use http_body_util::BodyExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rootfs_directory_is_a_one_layer_image_of_its_tar() {
    let shim = Shim::start();
    let dir = scratch("img").join("app");
    rootfs_image(&dir);
    let before = listing(&dir);
    let token = granted(&shim, &dir, 600).await;

    let (status, head, body) = get(&shim, "GET", "/v2/", &token).await;
    assert_eq!((status, body.as_slice()), (200, &b"{}"[..]), "{head}");
    assert_eq!(
        header(&head, "docker-distribution-api-version"),
        "registry/2.0"
    );

    let (status, head, manifest) = get(&shim, "GET", "/v2/app/manifests/latest", &token).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&manifest));
    let digest = header(&head, "docker-content-digest").to_owned();
    assert_eq!(digest, sha(&manifest));
    assert_eq!(
        header(&head, "content-type"),
        "application/vnd.oci.image.manifest.v1+json"
    );
    let (status, head_only, empty) = get(&shim, "HEAD", "/v2/app/manifests/latest", &token).await;
    assert_eq!((status, empty.len()), (200, 0));
    assert_eq!(header(&head_only, "docker-content-digest"), digest);
    assert_eq!(
        header(&head_only, "content-length"),
        manifest.len().to_string()
    );
    let by_digest = get(&shim, "GET", &format!("/v2/app/manifests/{digest}"), &token).await;
    assert_eq!((by_digest.0, &by_digest.2), (200, &manifest));

    let m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let config_digest = m["config"]["digest"].as_str().unwrap();
    let layer_digest = m["layers"][0]["digest"].as_str().unwrap();
    assert_eq!(
        m["layers"][0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar"
    );
    let (status, _, config) = get(
        &shim,
        "GET",
        &format!("/v2/app/blobs/{config_digest}"),
        &token,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(sha(&config), config_digest);
    let c: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(c["config"]["Env"][0], "GREETING=hi there");
    assert_eq!(c["config"]["User"], "builder");
    assert_eq!(c["rootfs"]["diff_ids"][0], layer_digest);
    assert_eq!(c["os"], "linux");

    let (status, head, layer) = get(
        &shim,
        "GET",
        &format!("/v2/app/blobs/{layer_digest}"),
        &token,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(header(&head, "docker-content-digest"), layer_digest);
    assert_eq!(sha(&layer), layer_digest);
    // The layer is exactly the deterministic tar of rootfs/ (4.8.1).
    let tar = shim
        .client
        .files_out(&format!("{}/rootfs/", dir.display()))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(&layer[..], &tar[..]);
    let names: Vec<String> = tar::Archive::new(&layer[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert!(names.contains(&"./bin/hello".to_owned()), "{names:?}");

    // A changed tree is a new image; the old layer is no longer served.
    std::fs::write(dir.join("rootfs/etc/motd"), b"new\n").unwrap();
    let (_, head, _) = get(&shim, "HEAD", "/v2/app/manifests/latest", &token).await;
    assert_ne!(header(&head, "docker-content-digest"), digest);
    let (status, _, body) = get(
        &shim,
        "GET",
        &format!("/v2/app/blobs/{layer_digest}"),
        &token,
    )
    .await;
    assert_eq!((status, oci_code(&body).as_str()), (404, "BLOB_UNKNOWN"));
    let (status, _, body) = get(&shim, "GET", &format!("/v2/app/manifests/{digest}"), &token).await;
    assert_eq!(
        (status, oci_code(&body).as_str()),
        (404, "MANIFEST_UNKNOWN")
    );

    // Nothing was written into the image directory.
    std::fs::remove_file(dir.join("rootfs/etc/motd")).unwrap();
    assert_eq!(listing(&dir), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_grant_opens_an_image_and_only_its_own() {
    let shim = Shim::start();
    let root = scratch("grants");
    let dir = root.join("app");
    rootfs_image(&dir);
    rootfs_image(&root.join("other"));
    let token = granted(&shim, &dir, 600).await;
    let latest = "/v2/app/manifests/latest";

    let (status, head, body) = raw_with(&shim.addr, "GET", latest, &[]).await;
    assert_eq!((status, oci_code(&body).as_str()), (401, "UNAUTHORIZED"));
    assert_eq!(
        header(&head, "www-authenticate"),
        "Basic realm=\"stepshim\""
    );
    let wrong = raw_with(
        &shim.addr,
        "GET",
        latest,
        &[("Authorization", &basic("nope"))],
    )
    .await;
    assert_eq!(wrong.0, 401);
    // The pod's own token opens no image.
    let pod = format!("Bearer {}", shim.token);
    let (status, _, body) = raw_with(&shim.addr, "GET", latest, &[("Authorization", &pod)]).await;
    assert_eq!((status, oci_code(&body).as_str()), (403, "DENIED"));
    // Bearer and X-Stepshim-Token carry a grant token too.
    let bearer = format!("Bearer {token}");
    assert_eq!(
        raw_with(&shim.addr, "HEAD", latest, &[("Authorization", &bearer)])
            .await
            .0,
        200
    );
    assert_eq!(
        raw_with(&shim.addr, "HEAD", latest, &[("X-Stepshim-Token", &token)])
            .await
            .0,
        200
    );

    // Another directory's name, a name outside the grammar, a symlink leading out.
    let (status, _, body) = get(&shim, "GET", "/v2/other/manifests/latest", &token).await;
    assert_eq!((status, oci_code(&body).as_str()), (404, "NAME_UNKNOWN"));
    let (status, _, body) = get(&shim, "GET", "/v2/App/manifests/latest", &token).await;
    assert_eq!((status, oci_code(&body).as_str()), (400, "NAME_INVALID"));
    std::os::unix::fs::symlink(root.join("other"), dir.join("out")).unwrap();
    let (status, _, body) = get(&shim, "GET", "/v2/app/out/manifests/latest", &token).await;
    assert_eq!((status, oci_code(&body).as_str()), (403, "DENIED"));
    // Not an image.
    std::fs::create_dir_all(dir.join("plain")).unwrap();
    let (status, _, body) = get(&shim, "GET", "/v2/app/plain/manifests/latest", &token).await;
    assert_eq!((status, oci_code(&body).as_str()), (404, "NAME_UNKNOWN"));

    // Read-only, pull routes only.
    for (method, path, want) in [
        ("PUT", latest, 405),
        ("DELETE", latest, 405),
        ("POST", "/v2/app/blobs/uploads/", 405),
        ("GET", "/v2/app/tags/list", 404),
        ("GET", "/v2/_catalog", 404),
    ] {
        let (status, _, body) = get(&shim, method, path, &token).await;
        assert_eq!(
            status,
            want,
            "{method} {path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    // The grant token still opens nothing else.
    let (status, _, _) = get(&shim, "GET", "/v1/info", &token).await;
    assert_eq!(status, 401);
    let b = format!("Bearer {token}");
    assert_eq!(
        raw_with(&shim.addr, "GET", "/v1/info", &[("Authorization", &b)])
            .await
            .0,
        403
    );

    // An expired grant.
    let short = granted(&shim, &dir, 1).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, _, body) = get(&shim, "GET", latest, &short).await;
    assert_eq!((status, oci_code(&body).as_str()), (401, "UNAUTHORIZED"));
}
