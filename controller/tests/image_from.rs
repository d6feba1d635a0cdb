//! `controller::image_source` against a real local shim: the grant and the digest of a directory
//! holding `rootfs/` + `metadata.json` (Bearer, and `X-Stepshim-Token` as through the apiserver's
//! proxy), the digest checked against the manifest the shim then serves, and the refusals: a
//! directory that is not an image, a name that is no OCI name component, an expired grant. Needs
//! the `stepshim` binary beside `stepctl` (`cargo build -p stepshim`) or in `$STEPSHIM_BIN`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::shim;
use std::sync::Arc;
use std::time::Duration;

use client::{Direct, ShimClient, TokenHeader};
use controller::image::ImageFrom;
use controller::image_source::{self, SourceError};
use protocol::artifacts::GrantRequest;
use sha2::{Digest, Sha256};

fn from(dir: &Path) -> ImageFrom {
    format!("src-pod:{}", dir.display()).parse().unwrap()
}

/// A Concourse-format image directory named `name` under `root`.
fn image_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("rootfs/bin")).unwrap();
    std::fs::write(dir.join("rootfs/bin/hello"), b"#!/bin/sh\necho hello\n").unwrap();
    std::fs::write(dir.join("rootfs/etc"), b"not a dir, a file\n").unwrap();
    std::fs::write(
        dir.join("metadata.json"),
        br#"{"env":["A=1"],"user":"nobody","cmd":["/bin/hello"]}"#,
    )
    .unwrap();
    dir
}

fn temp(tag: &str) -> PathBuf {
    let t = std::env::temp_dir().join(format!("stepctl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    std::fs::create_dir_all(&t).unwrap();
    t
}

/// The manifest's bytes, fetched with the grant token as a kubelet's Basic password.
async fn manifest(addr: &str, name: &str, token: &str) -> (u16, Vec<u8>) {
    let basic = base64_basic(&format!("plain:{token}"));
    let (status, _, body) = test_support::raw::raw_with(
        addr,
        "GET",
        &format!("/v2/{name}/manifests/latest"),
        &[("Authorization", &basic)],
    )
    .await;
    (status, body)
}

fn base64_basic(s: &str) -> String {
    let t = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::from("Basic ");
    for c in s.as_bytes().chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() {
                t[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_resolves_to_the_digest_of_the_manifest_it_serves() {
    let s = shim();
    let t = temp("image-from");
    let dir = image_dir(&t, "app-image");
    let f = from(&dir);
    let g = image_source::grant_and_resolve(&s.client, &f, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(g.token.len(), 64, "32 random bytes in hex");
    assert_eq!(g.manifest.media_type, protocol::registry::MANIFEST);
    // The digest is the manifest's own, as the kubelet will check it.
    let (status, body) = manifest(&s.addr, "app-image", &g.token).await;
    assert_eq!(status, 200);
    let digest = protocol::registry::digest_string(&Sha256::digest(&body).into());
    assert_eq!(g.manifest.digest, digest);
    assert_eq!(g.manifest.size, body.len() as u64);
    // The grant: the directory, the ttl asked, no use limit.
    let grants = s.client.grants().await.unwrap();
    let grant = grants.iter().find(|x| x.id == g.grant_id).unwrap();
    assert_eq!(grant.path, dir.display().to_string());
    assert!(grant.uses_left.is_none());
    assert!(grant.expires_in_seconds > 590 && grant.expires_in_seconds <= 600);
    // Again: the same digest (the layer is the tree's deterministic tar).
    let again = image_source::grant_and_resolve(&s.client, &f, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again.manifest.digest, digest);
    assert_ne!(again.token, g.token);
    // Through the apiserver's proxy the token travels in X-Stepshim-Token: a client sending it
    // there (straight to the shim here) resolves the same.
    let proxied = ShimClient::with_transport(
        s.client.base(),
        Some(s.token.clone()),
        TokenHeader::Proxy,
        Arc::new(Direct::new(Duration::from_secs(5))),
    )
    .unwrap();
    let by_header = image_source::grant_and_resolve(&proxied, &f, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(by_header.manifest.digest, digest);
    let _ = std::fs::remove_dir_all(&t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_one_line_with_the_shims_words() {
    let s = shim();
    let t = temp("image-refusals");
    let count = async || s.client.grants().await.unwrap().len();

    // A directory without rootfs/ or an OCI layout: the shim's refusal, and no grant left.
    let plain = t.join("not-an-image");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("README"), b"hello").unwrap();
    let before = count().await;
    let e = image_source::grant_and_resolve(&s.client, &from(&plain), Duration::from_secs(60))
        .await
        .unwrap_err();
    let line = e.to_string();
    assert!(matches!(e, SourceError::Resolve { .. }), "{e:?}");
    assert!(
        line.starts_with(&format!("src-pod:{} is not an image", plain.display())),
        "{line}"
    );
    assert!(line.contains("HTTP 404"), "{line}");
    assert!(!line.contains('\n'));
    assert_eq!(count().await, before, "the grant was revoked");

    // A name that cannot be an OCI name component: refused before anything is granted.
    let bad = image_dir(&t, "Bad_Name");
    let e = image_source::grant_and_resolve(&s.client, &from(&bad), Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::Image(_)), "{e:?}");
    assert!(e.to_string().contains("\"Bad_Name\""), "{e}");
    assert_eq!(count().await, before);

    // An expired grant: the shim's 401 with its message.
    let dir = image_dir(&t, "expiring");
    let token = image_source::grant_token();
    s.client
        .grant(&GrantRequest {
            path: dir.display().to_string(),
            token_sha256: protocol::token::sha256_hex(&token),
            ttl_seconds: 1,
            uses: None,
        })
        .await
        .unwrap();
    let granted = s.client.with_grant_token(&token);
    image_source::resolve(&granted, &from(&dir)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let e = image_source::resolve(&granted, &from(&dir))
        .await
        .unwrap_err();
    let line = e.to_string();
    assert!(line.contains("UNAUTHORIZED, HTTP 401"), "{line}");

    // The pod's own token is no grant.
    let e = image_source::resolve(&s.client, &from(&dir))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("HTTP 403"), "{e}");
    let _ = std::fs::remove_dir_all(&t);
}

/// The entries of a `.dockerconfigjson` that the kubelet's keyring takes for `repository`: same
/// host, key path a string prefix of the repository's, longest key first.
fn kubelet_entries(config: &[u8], repository: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(config).unwrap();
    let (host, path) = repository.split_once('/').unwrap();
    let mut keys: Vec<&String> = v["auths"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| {
            let (h, p) = k.split_once('/').unwrap_or((k.as_str(), ""));
            h == host && path.starts_with(p)
        })
        .collect();
    keys.sort_by(|a, b| b.cmp(a));
    keys.iter()
        .map(|k| {
            let e = &v["auths"][k.as_str()];
            (
                e["username"].as_str().unwrap().to_owned(),
                e["password"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_and_a_volume_share_one_secret_an_entry_each() {
    let s = shim();
    let t = temp("image-volume");
    let (app, tools) = (image_dir(&t, "app"), image_dir(&t, "tools"));
    std::fs::write(tools.join("rootfs/bin/more"), b"another file\n").unwrap();
    let ttl = Duration::from_secs(60);
    let mut images = Vec::new();
    for dir in [&app, &tools] {
        let f = from(dir);
        let g = image_source::grant_and_resolve(&s.client, &f, ttl)
            .await
            .unwrap();
        let r = controller::image::reference(
            7779,
            "src-pod",
            "10.244.0.17",
            f.name().unwrap(),
            &g.manifest.digest,
        )
        .unwrap();
        images.push((r, controller::image::Credentials::new(None, &g.token), g));
    }
    let entries: Vec<_> = images.iter().map(|(r, c, _)| (r.as_str(), c)).collect();
    let config = controller::image::docker_config_json(&entries).unwrap();
    for (i, (reference, _, g)) in images.iter().enumerate() {
        let repo = controller::image::repository(reference);
        let found = kubelet_entries(&config, repo);
        assert_eq!(found.len(), 1, "{repo}: {found:?}");
        assert_eq!(found[0], ("plain".to_owned(), g.token.clone()));
        // That password resolves this image on the shim, and not the other one.
        let name = repo.rsplit('/').next().unwrap();
        let (status, body) = manifest(&s.addr, name, &found[0].1).await;
        assert_eq!(status, 200);
        let digest = protocol::registry::digest_string(&Sha256::digest(&body).into());
        assert!(reference.ends_with(&digest), "{reference} {digest}");
        let other = ["tools", "app"][i];
        let (status, _) = manifest(&s.addr, other, &found[0].1).await;
        assert_ne!(status, 200, "{name}'s grant opens {other}");
    }
    let _ = std::fs::remove_dir_all(&t);
}
