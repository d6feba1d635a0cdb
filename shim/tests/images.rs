//! Images under `/v2/` (PROTOCOL.md 4.12) against the real shim: a `rootfs/` + `metadata.json`
//! directory served as a one-layer image whose layer is the directory's deterministic tar, an OCI
//! layout served as it is, blobs checked against their digests, and every refusal: no grant, the
//! pod's own token, an expired grant, another directory's name, a symlink out, writes.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::path::Path;
use std::time::Duration;

use common::artifacts::{grant, listing, scratch};
use common::{Shim, raw_bytes, raw_with};
use http_body_util::BodyExt;
use protocol::registry::digest_string;
use sha2::{Digest, Sha256};

/// `Authorization: Basic` with the grant token as password, as a kubelet sends it.
fn basic(token: &str) -> String {
    protocol::registry::basic_credentials("anyone", token)
}

/// The body bytes of a GET that is meant to be cut off before its `Content-Length`.
async fn cut_body(shim: &Shim, path: &str, token: &str) -> usize {
    let auth = basic(token);
    let resp = raw_bytes(&shim.addr, "GET", path, &[("Authorization", &auth)]).await;
    assert!(
        resp.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &resp[..64.min(resp.len())]
    );
    let at = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    resp.len() - at
}

/// Registers a grant on `path` for a new token and returns the token.
async fn granted(shim: &Shim, path: &Path, ttl: u64) -> String {
    let token = test_support::random_hex(16);
    shim.client
        .grant(&grant(path, &token, ttl, None))
        .await
        .unwrap();
    token
}

/// GET (or HEAD) with a grant token as Basic credentials: (status, head, body).
async fn get(shim: &Shim, method: &str, path: &str, token: &str) -> (u16, String, Vec<u8>) {
    raw_with(
        &shim.addr,
        method,
        path,
        &[("Authorization", &basic(token))],
    )
    .await
}

fn header<'a>(head: &'a str, name: &str) -> &'a str {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
        .unwrap_or_else(|| panic!("no {name} in {head}"))
}

fn oci_code(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).expect("OCI error body");
    v["errors"][0]["code"]
        .as_str()
        .expect("errors[0].code")
        .to_owned()
}

fn sha(data: &[u8]) -> String {
    digest_string(&Sha256::digest(data).into())
}

/// A `rootfs/` image: a few files, an executable, a symlink, and metadata.
fn rootfs_image(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir.join("rootfs/bin")).unwrap();
    std::fs::create_dir_all(dir.join("rootfs/etc")).unwrap();
    std::fs::write(dir.join("rootfs/bin/hello"), b"#!/bin/sh\necho hello\n").unwrap();
    std::fs::set_permissions(
        dir.join("rootfs/bin/hello"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        dir.join("rootfs/etc/passwd"),
        b"builder:x:1000:1000::/:/bin/sh\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("hello", dir.join("rootfs/bin/hi")).unwrap();
    std::fs::write(
        dir.join("metadata.json"),
        br#"{"env":["GREETING=hi there","PATH=/bin"],"user":"builder"}"#,
    )
    .unwrap();
}

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

/// Writes `data` as a blob of the layout in `dir`; returns its digest.
fn blob(dir: &Path, data: &[u8]) -> String {
    let d = sha(data);
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("blobs/sha256").join(&d[7..]), data).unwrap();
    d
}

fn descriptor(media_type: &str, digest: &str, size: usize) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": digest, "size": size})
}

/// An OCI layout with one image tagged `v1`; returns (manifest bytes, layer digest).
fn layout(dir: &Path) -> (Vec<u8>, String) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let layer: Vec<u8> = test_support::noise(3 << 20, 7);
    let layer_digest = blob(dir, &layer);
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let config_digest = blob(dir, config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config_digest, config.len()),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", &layer_digest, layer.len())],
    }))
    .unwrap();
    let manifest_digest = blob(dir, &manifest);
    let mut entry = descriptor(
        "application/vnd.oci.image.manifest.v1+json",
        &manifest_digest,
        manifest.len(),
    );
    entry["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": "v1"});
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [entry]});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    (manifest, layer_digest)
}

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
