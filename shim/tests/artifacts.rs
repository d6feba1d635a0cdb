//! The resumable `GET /v1/files` (offset, ETag, 412) and read grants (only `GET /v1/files` under
//! their path, 401 once expired, used up or revoked, 403 elsewhere) against the real shim.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::Duration;

use common::artifacts::{grant, sample, scratch, tree};
use common::{Shim, cutting_proxy, error_code, raw};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_resume_from_an_offset_with_the_etag_and_refuse_a_changed_tree() {
    let shim = Shim::start();
    let src = scratch("resume");
    tree(&src);
    let path = format!("{}/", src.display());
    let whole = shim.client.files_out_at(&path, 0, None).await.unwrap();
    let (etag, total) = (whole.etag.clone(), whole.total);
    let full = whole.body.collect().await.unwrap().to_bytes();
    assert_eq!(full.len() as u64, total);
    assert!(etag.starts_with('"') && etag.len() == 34, "{etag}");
    let at = 1_000_003;
    let rest = shim
        .client
        .files_out_at(&path, at, Some(&etag))
        .await
        .unwrap();
    assert_eq!(rest.etag, etag);
    let rest = rest.body.collect().await.unwrap().to_bytes();
    assert_eq!(&rest[..], &full[at as usize..]);
    // Through a proxy cutting every connection after 100-400 KB: resumed to the same bytes.
    let (proxy, cuts) = cutting_proxy(shim.addr.clone(), 100_000, 400_000)
        .await
        .unwrap();
    let via = shim.client.with_base(&format!("http://{proxy}"));
    let resumed = via.files_out_resumed(&path, 5).await.unwrap();
    assert_eq!(Sha256::digest(&resumed), Sha256::digest(&full));
    assert!(cuts.load(std::sync::atomic::Ordering::Relaxed) >= 5);
    // Refusals: offset without the ETag, past the end, a changed tree.
    let q = |extra: &str| format!("/v1/files?path={path}{extra}");
    let (status, _, body) = raw(&shim.addr, "GET", &q("&offset=5"), Some(&shim.token), b"").await;
    assert_eq!((status, error_code(&body).as_str()), (400, "bad_request"));
    let past = format!("&offset={}&etag={}", total + 1, etag.trim_matches('"'));
    let (status, _, body) = raw(&shim.addr, "GET", &q(&past), Some(&shim.token), b"").await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (400, "invalid_offset")
    );
    std::fs::write(src.join("src/deep/f7.txt"), b"changed\n").unwrap();
    let err = shim
        .client
        .files_out_at(&path, at, Some(&etag))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(protocol::ErrorCode::PreconditionFailed),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&src);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_token_reads_only_its_path_until_it_expires() {
    let shim = Shim::start();
    let root = scratch("grant");
    std::fs::create_dir_all(root.join("out")).unwrap();
    std::fs::write(root.join("out/a.txt"), b"a").unwrap();
    std::fs::write(root.join("secret"), b"s").unwrap();
    std::os::unix::fs::symlink(&root, root.join("out/up")).unwrap();
    let out = root.join("out");
    let g = shim
        .client
        .grant(&grant(&out, "tok-1", 60, None))
        .await
        .unwrap();
    let reader = shim.client.with_grant_token("tok-1");
    let tar = reader
        .files_out(&format!("{}/", out.display()))
        .await
        .unwrap();
    assert!(!tar.collect().await.unwrap().to_bytes().is_empty());
    // The same token through the proxy header, as the apiserver's pods/proxy would pass it.
    let (status, _, _) = raw_proxy(
        &shim.addr,
        &format!("/v1/files?path={}", out.display()),
        "tok-1",
    )
    .await;
    assert_eq!(status, 200);
    for bad in [
        format!("{}/secret", root.display()),
        format!("{}/../secret", out.display()),
        format!("{}/up/secret", out.display()),
        format!("{}x", out.display()),
    ] {
        let err = reader.files_out(&bad).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(protocol::ErrorCode::Forbidden),
            "{bad}: {err}"
        );
    }
    // Any other route, or PUT on this one: 403.
    for (method, route) in [
        ("GET", "/v1/info".to_owned()),
        ("GET", "/v1/processes".to_owned()),
        ("GET", "/v1/grants".to_owned()),
        ("PUT", format!("/v1/files?path={}", out.display())),
        ("GET", "/v1/nothing".to_owned()),
    ] {
        let (status, _, body) = raw(&shim.addr, method, &route, Some("tok-1"), b"").await;
        assert_eq!(
            (status, error_code(&body).as_str()),
            (403, "forbidden"),
            "{method} {route}"
        );
    }
    let listed = shim.client.grants().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, g.id);
    assert!(listed[0].used >= 2);
    let text = serde_json::to_string(&listed).unwrap();
    assert!(!text.contains(&protocol::token::sha256_hex("tok-1")));
    // Revoked: 401. Expired: 401. Used up: 401.
    shim.client.revoke_grant(&g.id).await.unwrap();
    let err = reader
        .files_out(&out.display().to_string())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::Unauthorized));
    shim.client
        .grant(&grant(&out, "tok-2", 1, None))
        .await
        .unwrap();
    shim.client
        .grant(&grant(&out, "tok-3", 60, Some(1)))
        .await
        .unwrap();
    let once = shim.client.with_grant_token("tok-3");
    let _tar = once.files_out(&out.display().to_string()).await.unwrap();
    let err = once
        .files_out(&out.display().to_string())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::Unauthorized));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let err = shim
        .client
        .with_grant_token("tok-2")
        .files_out(&out.display().to_string())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::Unauthorized), "{err}");
    // Refused with a grant's token: 4 paths and 5 routes (403), used up and expired (401); a
    // revoked grant's token is no grant's any more. No grant is live now.
    let m = shim.client.metrics().await.unwrap();
    assert_eq!(sample(&m, "stepshim_grant_refused_total"), 11);
    assert_eq!(sample(&m, "stepshim_grants"), 0);
    let _ = std::fs::remove_dir_all(&root);
}

async fn raw_proxy(addr: &str, path: &str, token: &str) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: shim\r\nX-Stepshim-Token: {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp).await;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
    (status, text, resp)
}
