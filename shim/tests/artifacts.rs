//! Artifacts between real shims on loopback: the resumable `GET /v1/files` (offset, ETag, 412), read
//! grants (only `GET /v1/files` under their path, 401 once expired or revoked, 403 elsewhere), and
//! pulls from one shim into another: through a proxy that cuts every connection well before the
//! stream's end (so only a resumed pull can finish), with an expired grant, a wrong digest and the
//! source killed midway (a clear failure, nothing extracted).
#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Shim, cutting_proxy, error_code, raw};
use http_body_util::BodyExt;
use protocol::artifacts::{GrantRequest, PullSpec, PullState};
use sha2::{Digest, Sha256};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stepshim-art-{name}-{}", common::random_hex(4)));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tree: one 3 MiB file of random bytes, 300 small files, a symlink, an executable.
fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    let big: Vec<u8> = (0..3 << 20).map(|_| rand::random::<u8>()).collect();
    std::fs::write(root.join("big.bin"), big).unwrap();
    for i in 0..300 {
        std::fs::write(
            root.join(format!("src/deep/f{i}.txt")),
            format!("file {i}\n"),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("src/deep/f1.txt", root.join("link")).unwrap();
    std::fs::write(root.join("run.sh"), b"#!/bin/sh\necho ok\n").unwrap();
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Every file's relative path, kind, mode and contents' digest.
fn listing(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let what = if m.is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", m.permissions().mode() & 0o7777)
            } else {
                let digest = Sha256::digest(std::fs::read(&p).unwrap());
                format!("{:o} {digest:x}", m.permissions().mode() & 0o7777)
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

fn grant(path: &Path, token: &str, ttl: u64, uses: Option<u64>) -> GrantRequest {
    GrantRequest {
        path: path.display().to_string(),
        token_sha256: protocol::token::sha256_hex(token),
        ttl_seconds: ttl,
        uses,
    }
}

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

fn pull_spec(source: &str, path: &Path, token: &str, target: &Path) -> PullSpec {
    PullSpec {
        source: source.to_owned(),
        path: format!("{}/", path.display()),
        token: token.to_owned(),
        target: target.display().to_string(),
        sha256: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_through_cut_connections_resumes_and_lands_whole() {
    let src_shim = Shim::start();
    let dst_shim = Shim::start_with(&[("STEPSHIM_PULL_RETRIES", "3")], None);
    let src = scratch("pull-src");
    tree(&src);
    let path = format!("{}/", src.display());
    let expected = Sha256::digest(src_shim.client.files_out_resumed(&path, 3).await.unwrap());
    src_shim
        .client
        .grant(&grant(&src, "pull-tok", 60, None))
        .await
        .unwrap();
    // Every connection is cut after 300-600 KB of a ~3.5 MB stream: starting over could never end.
    let (proxy, cuts) = cutting_proxy(src_shim.addr.clone(), 300_000, 600_000)
        .await
        .unwrap();
    let dst = scratch("pull-dst").join("in");
    let mut spec = pull_spec(&format!("http://{proxy}"), &src, "pull-tok", &dst);
    spec.sha256 = Some(format!("{expected:x}"));
    let first = dst_shim.client.pull("p1", &spec, None).await.unwrap();
    assert_eq!(first.state, PullState::Running);
    // Idempotent by id; another spec under the same id is a conflict.
    dst_shim.client.pull("p1", &spec, None).await.unwrap();
    let mut other = spec.clone();
    other.target.push_str("-elsewhere");
    let err = dst_shim.client.pull("p1", &other, None).await.unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::SpecConflict));
    let done = dst_shim.client.pull_status("p1", Some(60)).await.unwrap();
    assert_eq!(done.state, PullState::Done, "{done:?}");
    assert_eq!(Some(done.bytes), done.total);
    assert!(done.resumes >= 4, "{done:?}");
    assert!(cuts.load(std::sync::atomic::Ordering::Relaxed) >= 4);
    assert_eq!(
        done.sha256.as_deref(),
        Some(format!("{expected:x}").as_str())
    );
    assert_eq!(listing(&dst), listing(&src));
    assert_eq!(dst_shim.client.pulls().await.unwrap().len(), 1);
    dst_shim.client.delete_pull("p1").await.unwrap();
    let _ = std::fs::remove_dir_all(&src);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_fail_clearly_and_extract_nothing() {
    let mut src_shim = Shim::start();
    let dst_shim = Shim::start_with(&[("STEPSHIM_PULL_RETRIES", "2")], None);
    let src = scratch("fail-src");
    tree(&src);
    src_shim
        .client
        .grant(&grant(&src, "live", 60, None))
        .await
        .unwrap();
    src_shim
        .client
        .grant(&grant(&src, "short", 1, None))
        .await
        .unwrap();
    src_shim
        .client
        .grant(&grant(&src.join("src"), "narrow", 60, None))
        .await
        .unwrap();
    let base = src_shim.url();
    let dst = scratch("fail-dst");
    let run = |id: &'static str, spec: PullSpec| {
        let c = dst_shim.client.clone();
        async move { c.pull(id, &spec, Some(60)).await.unwrap() }
    };
    // A source named by host name (the shim resolves none), or not http: refused at once.
    for source in [
        "http://localhost:7777",
        "https://127.0.0.1:1",
        "http://127.0.0.1:1/x",
    ] {
        let spec = pull_spec(source, &src, "live", &dst.join("z"));
        let err = dst_shim
            .client
            .pull("bad-source", &spec, None)
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Some(protocol::ErrorCode::BadRequest),
            "{source}"
        );
    }
    // A wrong token, a grant used outside its path, a wrong digest.
    let bad = run("bad-token", pull_spec(&base, &src, "nope", &dst.join("a"))).await;
    assert!(bad.error.as_deref().unwrap().contains("401"), "{bad:?}");
    let outside = run("outside", pull_spec(&base, &src, "narrow", &dst.join("b"))).await;
    assert!(
        outside.error.as_deref().unwrap().contains("403"),
        "{outside:?}"
    );
    let mut wrong = pull_spec(&base, &src, "live", &dst.join("c"));
    wrong.sha256 = Some("00".repeat(32));
    let wrong = run("digest", wrong).await;
    assert_eq!(wrong.state, PullState::Failed);
    assert!(
        wrong.error.as_deref().unwrap().contains("SHA-256"),
        "{wrong:?}"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let expired = run("expired", pull_spec(&base, &src, "short", &dst.join("d"))).await;
    assert!(
        expired.error.as_deref().unwrap().contains("401"),
        "{expired:?}"
    );
    // The source killed mid-pull: a slow proxy (cut every 200-300 KB) keeps it in flight.
    let (proxy, _cuts) = cutting_proxy(src_shim.addr.clone(), 200_000, 300_000)
        .await
        .unwrap();
    let spec = pull_spec(&format!("http://{proxy}"), &src, "live", &dst.join("e"));
    dst_shim.client.pull("killed", &spec, None).await.unwrap();
    for _ in 0..2000 {
        if dst_shim
            .client
            .pull_status("killed", None)
            .await
            .unwrap()
            .bytes
            > 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A pull cancelled midway (DELETE) ends at once and leaves nothing either.
    let spec = pull_spec(&format!("http://{proxy}"), &src, "live", &dst.join("f"));
    dst_shim.client.pull("cancel", &spec, None).await.unwrap();
    for _ in 0..2000 {
        if dst_shim
            .client
            .pull_status("cancel", None)
            .await
            .unwrap()
            .bytes
            > 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = std::time::Instant::now();
    dst_shim.client.delete_pull("cancel").await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = dst_shim
        .client
        .pull_status("cancel", None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::NotFound));
    src_shim.child().kill().unwrap();
    let killed = dst_shim
        .client
        .pull_status("killed", Some(60))
        .await
        .unwrap();
    assert_eq!(killed.state, PullState::Failed, "{killed:?}");
    assert!(
        killed
            .error
            .as_deref()
            .unwrap()
            .contains("nothing was extracted"),
        "{killed:?}"
    );
    assert!(killed.bytes < killed.total.unwrap());
    // Nothing landed anywhere, no staging left behind.
    let left: Vec<_> = std::fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&src);
}
