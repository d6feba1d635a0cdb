//! The shim over TLS (PROTOCOL.md 1.1), against the real binary built with TLS: every kind of
//! request through a pinned client, clear text and other keys refused, the handshake under the
//! authentication deadline, a captured connection that shows no secret and opens nothing when
//! replayed, and pulls between TLS shims that pin their source.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Shim;
use common::artifacts::{grant, listing, pull_spec, scratch, tree};
use protocol::artifacts::PullState;
use test_support::process::{follow, sh};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_shim_serves_processes_stdin_output_and_files() {
    let shim = Shim::start_tls(&[]);
    assert!(shim.url().starts_with("https://"));
    let c = &shim.client;
    c.check_protocol().await.unwrap();
    let mut spec = sh("cat; echo done >&2");
    spec.stdin = true;
    c.spawn("cat", &spec).await.unwrap();
    c.stdin("cat", 0, Bytes::from_static(b"over tls\n"), true)
        .await
        .unwrap();
    let ran = follow(c, "cat").await;
    assert_eq!(ran.stdout, b"over tls\n");
    assert_eq!(ran.stderr, b"done\n");
    assert_eq!(ran.exit.unwrap().code, Some(0));

    let dir = scratch("tls-files");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1);
    b.append_data(&mut h, "a.txt", &b"hello"[..]).unwrap();
    let tar = Bytes::from(b.into_inner().unwrap());
    c.files_in_bytes(dir.to_str().unwrap(), tar).await.unwrap();
    assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), b"hello");
    let out = c
        .files_out_resumed(&format!("{}/", dir.display()), 1)
        .await
        .unwrap();
    assert!(out.windows(5).any(|w| w == b"hello"));
    assert!(
        c.metrics()
            .await
            .unwrap()
            .contains("stepshim_processes_spawned_total 1")
    );
}

#[tokio::test]
async fn clear_text_and_other_keys_are_refused_and_the_shim_serves_on() {
    let shim = Shim::start_tls(&[]);
    // Plain HTTP to the TLS port: no HTTP answer, only the end of the connection (or an alert).
    let mut s = TcpStream::connect(&shim.addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
    assert!(!got.starts_with(b"HTTP/"), "answered clear text: {got:?}");

    // A client that pins another key refuses the shim before sending its token.
    let other = client::Seed::for_token("another pod's token").pin();
    let wrong =
        client::ShimClient::new_pinned(&shim.url(), Some(shim.token.clone()), other).unwrap();
    let err = wrong.info().await.unwrap_err().to_string();
    assert!(err.contains("pinned key"), "{err}");

    // A client for plain HTTP cannot take an https:// URL, nor a pinned one an http:// URL.
    assert!(client::ShimClient::new(&shim.url(), None).is_err());
    let plain = format!("http://{}", shim.addr);
    assert!(client::ShimClient::new_pinned(&plain, None, shim.local.pin.unwrap()).is_err());

    shim.client.healthz().await.unwrap();
    shim.client.info().await.unwrap();
    // Both refusals are counted for the operator (the second once the shim has read the
    // client's alert).
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = shim.client.metrics().await.unwrap();
        if metrics.contains("stepshim_tls_handshake_failures_total 2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        metrics.contains("stepshim_tls_handshake_failures_total 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_silent_connection_is_closed_at_the_authentication_deadline() {
    let shim = Shim::start_tls(&[("STEPSHIM_AUTH_TIMEOUT_SECONDS", "1")]);
    let mut s = TcpStream::connect(&shim.addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    // No ClientHello: the handshake never starts, the connection is closed with nothing sent.
    let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf))
        .await
        .expect("the shim closed the connection")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert!(started.elapsed() >= Duration::from_millis(900));
    shim.client.healthz().await.unwrap();
}

/// A loopback forwarder to `target` that records every byte the client sends.
async fn recording_proxy(target: String) -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let record = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut outbound = TcpStream::connect(&target).await.unwrap();
            let record = record.clone();
            tokio::spawn(async move {
                let (mut ri, mut wi) = inbound.split();
                let (mut ro, mut wo) = outbound.split();
                let up = async {
                    let mut buf = vec![0u8; 16 << 10];
                    loop {
                        let n = ri.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            let _ = wo.shutdown().await;
                            break;
                        }
                        record.lock().unwrap().extend_from_slice(&buf[..n]);
                        if wo.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                let down = tokio::io::copy(&mut ro, &mut wi);
                let _ = tokio::join!(up, down);
            });
        }
    });
    (addr, sent)
}

/// What a capture of one client's exchanges with `shim` (through the recording proxy) shows, and
/// what sending its client bytes again on a new connection does.
struct Replayed {
    /// The client's bytes as captured.
    captured: Vec<u8>,
    /// Whether the replay got an HTTP answer.
    answered: bool,
    /// How many times the process ran, the replay's run included.
    runs: usize,
    secret: &'static str,
}

/// Runs a process fed a secret on stdin through a recording proxy in front of `shim`, then sends
/// the captured client bytes again.
async fn capture_and_replay(shim: &Shim, tls: bool) -> Replayed {
    let (proxy, sent) = recording_proxy(shim.addr.clone()).await;
    let via = match shim.local.pin {
        Some(pin) if tls => {
            let url = format!("https://{proxy}");
            client::ShimClient::new_pinned(&url, Some(shim.token.clone()), pin).unwrap()
        }
        _ => client::ShimClient::new(&format!("http://{proxy}"), Some(shim.token.clone())).unwrap(),
    };
    let marks = scratch("tls-replay").join("runs");
    let secret = "stdin-secret-7f3a9c";
    let mut spec = sh(&format!("cat >/dev/null; echo ran >> {}", marks.display()));
    spec.stdin = true;
    via.spawn("once", &spec).await.unwrap();
    via.stdin("once", 0, Bytes::from(secret), true)
        .await
        .unwrap();
    let ran = follow(&via, "once").await;
    assert_eq!(ran.exit.unwrap().code, Some(0));
    via.delete("once", false).await.unwrap();
    drop(via);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let captured = sent.lock().unwrap().clone();
    let mut s = TcpStream::connect(&shim.addr).await.unwrap();
    let _ = s.write_all(&captured).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let runs = std::fs::read_to_string(&marks).unwrap().lines().count();
    Replayed {
        captured,
        answered: answer.windows(5).any(|w| w == b"HTTP/"),
        runs,
        secret,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_shows_no_secret_and_replayed_opens_nothing() {
    let shim = Shim::start_tls(&[]);
    let r = capture_and_replay(&shim, true).await;
    assert!(
        r.captured.len() > 1000,
        "captured {} bytes",
        r.captured.len()
    );
    for needle in [
        shim.token.as_bytes(),
        r.secret.as_bytes(),
        b"/v1/processes",
        b"Bearer",
    ] {
        assert!(
            !r.captured.windows(needle.len()).any(|w| w == needle),
            "{:?} readable on the wire",
            String::from_utf8_lossy(needle)
        );
    }
    // The client's bytes sent again on a new connection: the server's fresh handshake secrets
    // make them meaningless, so no request is served and the process does not run again.
    assert!(!r.answered, "a replay was answered");
    assert_eq!(r.runs, 1, "the replay ran the process again");
    assert!(
        shim.client.get("once").await.is_err(),
        "the process came back"
    );
}

/// The control of the test above: the same capture and replay against a plain-HTTP shim shows the
/// secret and runs the process a second time, so that test's checks can see a replay work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_plain_http_the_same_capture_shows_the_secret_and_replays() {
    let shim = Shim::start();
    let r = capture_and_replay(&shim, false).await;
    let needle = r.secret.as_bytes();
    assert!(r.captured.windows(needle.len()).any(|w| w == needle));
    assert!(r.answered, "the plain replay got no answer");
    assert_eq!(r.runs, 2, "the plain replay did not run the process again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_between_tls_shims_pin_their_source() {
    let src_shim = Shim::start_tls(&[]);
    let dst_shim = Shim::start_tls(&[]);
    let src = scratch("tls-pull-src");
    tree(&src);
    src_shim
        .client
        .grant(&grant(&src, "tls-tok", 60, None))
        .await
        .unwrap();
    let pin = src_shim.local.pin.unwrap().to_string();
    let https = format!("https://{}", src_shim.addr);

    let dst = scratch("tls-pull-dst").join("in");
    let mut spec = pull_spec(&https, &src, "tls-tok", &dst);
    spec.source_pin = Some(pin.clone());
    let done = dst_shim.client.pull("p1", &spec, Some(60)).await.unwrap();
    assert_eq!(done.state, PullState::Done, "{:?}", done.error);
    assert_eq!(listing(&src), listing(&dst));

    // Another key: failed at once, not retried, nothing extracted.
    let other = scratch("tls-pull-other").join("in");
    let mut wrong = pull_spec(&https, &src, "tls-tok", &other);
    wrong.source_pin = Some(client::Seed::for_token("x").pin().to_string());
    let failed = dst_shim.client.pull("p2", &wrong, Some(30)).await.unwrap();
    assert_eq!(failed.state, PullState::Failed);
    let why = failed.error.unwrap();
    assert!(why.contains("pinned key"), "{why}");
    assert_eq!(failed.resumes, 0);
    assert!(!other.exists());

    // The rules of source and source_pin.
    let mut no_pin = pull_spec(&https, &src, "tls-tok", &other);
    no_pin.source_pin = None;
    let mut pin_on_http = pull_spec(
        &format!("http://{}", src_shim.addr),
        &src,
        "tls-tok",
        &other,
    );
    pin_on_http.source_pin = Some(pin.clone());
    let mut bad_pin = pull_spec(&https, &src, "tls-tok", &other);
    bad_pin.source_pin = Some("zz".into());
    for (i, spec) in [no_pin, pin_on_http, bad_pin].iter().enumerate() {
        let err = dst_shim
            .client
            .pull(&format!("bad{i}"), spec, None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("400"), "{err}");
    }
}
