//! What the image tests share (`images.rs`, `images_layout.rs`): Basic credentials as a kubelet
//! sends them, grants, requests under `/v2/` and their answers, a `rootfs/` image and an OCI layout.
#![allow(dead_code)] // each test crate uses its own part

use std::path::Path;

use protocol::registry::digest_string;
use sha2::{Digest, Sha256};
use test_support::{Shim, raw_bytes, raw_with};

use super::artifacts::grant;

/// `Authorization: Basic` with the grant token as password, as a kubelet sends it.
pub fn basic(token: &str) -> String {
    protocol::registry::basic_credentials("anyone", token)
}

/// The body bytes of a GET that is meant to be cut off before its `Content-Length`.
pub async fn cut_body(shim: &Shim, path: &str, token: &str) -> usize {
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
pub async fn granted(shim: &Shim, path: &Path, ttl: u64) -> String {
    let token = test_support::random_hex(16);
    shim.client
        .grant(&grant(path, &token, ttl, None))
        .await
        .unwrap();
    token
}

/// GET (or HEAD) with a grant token as Basic credentials: (status, head, body).
pub async fn get(shim: &Shim, method: &str, path: &str, token: &str) -> (u16, String, Vec<u8>) {
    raw_with(
        &shim.addr,
        method,
        path,
        &[("Authorization", &basic(token))],
    )
    .await
}

pub fn header<'a>(head: &'a str, name: &str) -> &'a str {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
        .unwrap_or_else(|| panic!("no {name} in {head}"))
}

pub fn oci_code(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).expect("OCI error body");
    v["errors"][0]["code"]
        .as_str()
        .expect("errors[0].code")
        .to_owned()
}

pub fn sha(data: &[u8]) -> String {
    digest_string(&Sha256::digest(data).into())
}

/// A `rootfs/` image: a few files, an executable, a symlink, and metadata.
pub fn rootfs_image(dir: &Path) {
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

/// Writes `data` as a blob of the layout in `dir`; returns its digest.
pub fn blob(dir: &Path, data: &[u8]) -> String {
    let d = sha(data);
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("blobs/sha256").join(&d[7..]), data).unwrap();
    d
}

pub fn descriptor(media_type: &str, digest: &str, size: usize) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": digest, "size": size})
}

/// An OCI layout with one image tagged `v1`; returns (manifest bytes, layer digest).
pub fn layout(dir: &Path) -> (Vec<u8>, String) {
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
