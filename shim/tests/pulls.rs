//! Pulls from one real shim into another on loopback: through a proxy that cuts every connection
//! well before the stream's end (so only a resumed pull can finish), and failing clearly with
//! nothing extracted: a source given by host name, a wrong token, a grant used outside its path, a
//! wrong digest, an expired grant, a cancel, the source killed midway.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::Duration;

use common::artifacts::{grant, listing, pull_spec, sample, scratch, tree};
use common::{Shim, cutting_proxy};
use protocol::artifacts::{PullSpec, PullState};
use sha2::{Digest, Sha256};

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
    // Bounds the attempts before the source first answers only: the cuts after it still resume.
    spec.connect_retries = Some(0);
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
    // The destination's counters saw one pull, its bytes and its resumes; the source one grant.
    let m = dst_shim.client.metrics().await.unwrap();
    assert_eq!(sample(&m, "stepshim_pulls_total{state=\"started\"}"), 1);
    assert_eq!(sample(&m, "stepshim_pulls_total{state=\"done\"}"), 1);
    assert_eq!(sample(&m, "stepshim_pulls_total{state=\"failed\"}"), 0);
    assert_eq!(sample(&m, "stepshim_pull_bytes_total"), done.bytes);
    assert_eq!(
        sample(&m, "stepshim_pull_resumes_total"),
        u64::from(done.resumes)
    );
    let m = src_shim.client.metrics().await.unwrap();
    assert_eq!(sample(&m, "stepshim_grants"), 1);
    assert_eq!(dst_shim.client.pulls().await.unwrap().len(), 1);
    dst_shim.client.delete_pull("p1").await.unwrap();
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(dst.parent().unwrap());
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
    // Nothing listening: it never reached its source (a caller may go another way).
    let none = run(
        "nowhere",
        pull_spec("http://127.0.0.1:1", &src, "live", &dst.join("y")),
    )
    .await;
    assert_eq!(none.state, PullState::Failed);
    assert!(!none.reached, "{none:?}");
    // A wrong token, a grant used outside its path, a wrong digest.
    let bad = run("bad-token", pull_spec(&base, &src, "nope", &dst.join("a"))).await;
    assert!(bad.reached);
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
    // A proxy cutting every 20-40 KB keeps a pull in flight long enough to act on it.
    let (proxy, _cuts) = cutting_proxy(src_shim.addr.clone(), 20_000, 40_000)
        .await
        .unwrap();
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
    // The source killed mid-pull.
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
    // Seven pulls started (the refused sources never did), seven failed, none done.
    let m = dst_shim.client.metrics().await.unwrap();
    assert_eq!(sample(&m, "stepshim_pulls_total{state=\"started\"}"), 7);
    assert_eq!(sample(&m, "stepshim_pulls_total{state=\"failed\"}"), 7);
    assert_eq!(sample(&m, "stepshim_pulls_total{state=\"done\"}"), 0);
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&dst);
}

/// `connect_retries` bounds the attempts before the source ever answered: a pull from a port that
/// refuses fails after one attempt, with `reached` false, where the shim's default (8 retries with
/// growing pauses) would take about 25 s.
#[tokio::test]
async fn connect_retries_fail_an_unreachable_source_soon() {
    let dst_shim = Shim::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dst = scratch("pull-unreachable").join("in");
    let mut spec = pull_spec(
        &format!("http://127.0.0.1:{port}"),
        std::path::Path::new("/tmp"),
        "tok",
        &dst,
    );
    spec.connect_retries = Some(0);
    let started = std::time::Instant::now();
    dst_shim.client.pull("gone", &spec, None).await.unwrap();
    let failed = dst_shim.client.pull_status("gone", Some(20)).await.unwrap();
    assert_eq!(failed.state, PullState::Failed, "{failed:?}");
    assert!(!failed.reached, "{failed:?}");
    assert!(
        failed
            .error
            .as_deref()
            .unwrap()
            .contains("gave up after 1 attempts"),
        "{failed:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(!dst.exists());
    let _ = std::fs::remove_dir_all(dst.parent().unwrap());
}

/// A source is exactly `http://IP:PORT` (4.11): anything else, even a trailing `/`, is 400
/// `bad_request` naming the field, and no pull is made.
#[tokio::test]
async fn a_source_other_than_http_ip_port_is_refused() {
    let dst_shim = Shim::start();
    let dst = scratch("pull-bad-source").join("in");
    let port = dst_shim.addr.rsplit_once(':').unwrap().1.to_owned();
    let bad = [
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.0.0.1:{port}/x"),
        format!("http://[::1]:{port}/"),
        format!("http://localhost:{port}"),
        format!("https://127.0.0.1:{port}"),
        "http://127.0.0.1".to_owned(),
        format!("http://user:pw@127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}?x=1"),
        format!("http://127.0.0.1:{port}#f"),
        format!("127.0.0.1:{port}"),
    ];
    for source in &bad {
        let spec = pull_spec(source, std::path::Path::new("/tmp"), "tok", &dst);
        let err = dst_shim.client.pull("bad", &spec, None).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(protocol::ErrorCode::BadRequest),
            "{source}: {err:?}"
        );
        assert!(err.to_string().contains("source"), "{source}: {err}");
    }
    assert!(dst_shim.client.pulls().await.unwrap().is_empty());
    assert!(!dst.exists());
    let _ = std::fs::remove_dir_all(dst.parent().unwrap());
}

/// A listener that accepts every connection and closes it at once, never answering; counts them.
fn closing_listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(conn);
        }
    });
    (port, count)
}

/// `connect_retries` and `STEPSHIM_PULL_RETRIES` count retries, the attempts after the first
/// (4.11): `connect_retries: 3` makes 4 connections to a source that never answers, and without it
/// the shim's setting of 4 makes 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_the_attempts_after_the_first() {
    let dst_shim = Shim::start_with(&[("STEPSHIM_PULL_RETRIES", "4")], None);
    for (retries, attempts, named) in [
        (Some(3), 4, "connect_retries"),
        (None, 5, "STEPSHIM_PULL_RETRIES"),
    ] {
        let (port, count) = closing_listener();
        let dst = scratch("pull-retries").join("in");
        let mut spec = pull_spec(
            &format!("http://127.0.0.1:{port}"),
            std::path::Path::new("/tmp"),
            "tok",
            &dst,
        );
        spec.connect_retries = retries;
        let id = format!("retries-{attempts}");
        dst_shim.client.pull(&id, &spec, None).await.unwrap();
        let failed = dst_shim.client.pull_status(&id, Some(30)).await.unwrap();
        assert_eq!(failed.state, PullState::Failed, "{failed:?}");
        assert!(!failed.reached, "{failed:?}");
        let error = failed.error.unwrap();
        assert!(
            error.contains(&format!("gave up after {attempts} attempts")) && error.contains(named),
            "{error}"
        );
        assert_eq!(
            count.load(std::sync::atomic::Ordering::SeqCst),
            attempts,
            "{retries:?}"
        );
        let _ = std::fs::remove_dir_all(dst.parent().unwrap());
    }
}

/// A shim built without TLS refuses a TLS source at once (400), so a controller can copy through
/// itself instead.
#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn a_build_without_tls_refuses_an_https_source() {
    let dst = Shim::start();
    let target = scratch("pull-no-tls").join("in");
    let mut spec = pull_spec("https://127.0.0.1:9", &target, "t", &target);
    spec.source_pin = Some("ab".repeat(32));
    let err = dst.client.pull("tls", &spec, None).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("400") && text.contains("built without TLS"),
        "{text}"
    );
}
