//! The HTTP surface against hostile or careless clients: authentication on every route but
//! `/healthz`, malformed JSON, bad ids, oversized bodies, wrong methods, unknown routes; and info and
//! metrics. Every refusal is a 4xx with a JSON error body, and the shim keeps serving.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use client::ShimClient;
use common::{Shim, error_code, raw, run, sh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_but_healthz_needs_the_token() {
    let shim = Shim::start();
    let (status, _, body) = raw(&shim.addr, "GET", "/healthz", None, b"").await;
    assert_eq!((status, body.as_slice()), (200, b"ok\n".as_slice()));
    // A running process that a refused stdin write, signal or delete would change.
    let mut spec = sh("echo private; cat");
    spec.stdin = true;
    shim.client.spawn("secret", &spec).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let before = loop {
        let p = shim.client.get("secret").await.unwrap();
        if p.output_end > 0 {
            break p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no output from secret"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let upload = std::env::temp_dir().join(format!("stepshim-api-{}", common::random_hex(4)));
    let put_files = format!("/v1/files?path={}", upload.display());
    let routes = [
        ("GET", "/v1/info"),
        ("GET", "/v1/processes"),
        ("PUT", "/v1/processes/x"),
        ("GET", "/v1/processes/secret"),
        ("GET", "/v1/processes/secret/output"),
        ("POST", "/v1/processes/secret/stdin?offset=0"),
        ("POST", "/v1/processes/secret/signal"),
        ("POST", "/v1/processes/secret/resize"),
        ("DELETE", "/v1/processes/secret?force=1"),
        ("GET", "/v1/files?path=/etc/hostname"),
        ("PUT", put_files.as_str()),
        ("GET", "/metrics"),
        ("GET", "/no/such/route"),
    ];
    for token in [None, Some("wrong-token"), Some("")] {
        for &(method, path) in &routes {
            let (status, head, body) = raw(&shim.addr, method, path, token, b"{}").await;
            assert_eq!(status, 401, "{method} {path} with {token:?}");
            assert_eq!(error_code(&body), "unauthorized");
            assert!(
                head.to_ascii_lowercase()
                    .contains("www-authenticate: bearer")
            );
        }
    }
    // Nothing was touched by the refused requests: no stdin fed, no signal or delete, no spawn,
    // no upload.
    let after = shim.client.get("secret").await.unwrap();
    assert_eq!(
        (after.state, after.output_end, after.stdin_offset),
        (protocol::State::Running, before.output_end, 0),
        "{after:?}"
    );
    let err = shim.client.get("x").await.unwrap_err();
    assert_eq!(
        err.code(),
        Some(protocol::ErrorCode::ProcessNotFound),
        "{err}"
    );
    assert!(
        !upload.exists(),
        "a refused upload wrote {}",
        upload.display()
    );
    shim.client.delete("secret", true).await.unwrap();
    let wrong = ShimClient::new(&shim.url(), Some("nope".into())).unwrap();
    assert_eq!(
        wrong.info().await.unwrap_err().code(),
        Some(protocol::ErrorCode::Unauthorized)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_clear_4xx_and_the_shim_keeps_serving() {
    let shim = Shim::start();
    let t = Some(shim.token.as_str());
    run(&shim.client, "ok", &sh("echo fine")).await;
    let cases: Vec<(&str, String, Vec<u8>, u16, &str)> = vec![
        (
            "PUT",
            "/v1/processes/a".into(),
            b"{not json".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "PUT",
            "/v1/processes/a".into(),
            b"{}".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "PUT",
            "/v1/processes/a".into(),
            br#"{"path":"/bin/true","bogus":1}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "PUT",
            "/v1/processes/a".into(),
            br#"{"path":"/bin/true","args":[1]}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "PUT",
            "/v1/processes/a".into(),
            br#"{"path":"/bin/tr\u0000ue"}"#.to_vec(),
            400,
            "invalid_spec",
        ),
        (
            "PUT",
            "/v1/processes/a".into(),
            br#"{"path":"/bin/true","env":["NOEQUALS"]}"#.to_vec(),
            400,
            "invalid_spec",
        ),
        (
            "PUT",
            "/v1/processes/a%2Fb".into(),
            b"{}".to_vec(),
            400,
            "invalid_id",
        ),
        (
            "PUT",
            "/v1/processes/..".into(),
            b"{}".to_vec(),
            400,
            "invalid_id",
        ),
        (
            "PUT",
            format!("/v1/processes/{}", "x".repeat(129)),
            b"{}".to_vec(),
            400,
            "invalid_id",
        ),
        ("GET", "/v1/processes/a$b".into(), vec![], 400, "invalid_id"),
        (
            "PUT",
            "/v1/processes/big".into(),
            vec![b' '; 2 << 20],
            413,
            "body_too_large",
        ),
        (
            "GET",
            "/v1/processes/ok/output?offset=1".into(),
            vec![],
            400,
            "invalid_offset",
        ),
        (
            "GET",
            "/v1/processes/ok/output?offset=-1".into(),
            vec![],
            400,
            "bad_request",
        ),
        (
            "GET",
            "/v1/processes/ok/output?offset=%zz".into(),
            vec![],
            400,
            "bad_request",
        ),
        (
            "GET",
            "/v1/processes/ok?wait=soon".into(),
            vec![],
            400,
            "bad_request",
        ),
        (
            "POST",
            "/v1/processes/ok/signal".into(),
            br#"{"signal":"FOO"}"#.to_vec(),
            400,
            "invalid_signal",
        ),
        (
            "POST",
            "/v1/processes/ok/signal".into(),
            br#"{"signal":0}"#.to_vec(),
            400,
            "invalid_signal",
        ),
        (
            "POST",
            "/v1/processes/ok/resize".into(),
            br#"{"cols":-1,"rows":2}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/processes/ok/stdin".into(),
            vec![],
            409,
            "no_stdin",
        ),
        (
            "POST",
            "/v1/processes/ok".into(),
            vec![],
            405,
            "method_not_allowed",
        ),
        (
            "DELETE",
            "/v1/info".into(),
            vec![],
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/v1/processes/none".into(),
            vec![],
            404,
            "process_not_found",
        ),
        ("GET", "/v3/anything".into(), vec![], 404, "no_route"),
        ("GET", "/v1/files".into(), vec![], 400, "bad_request"),
        (
            "GET",
            "/v1/files?path=relative".into(),
            vec![],
            400,
            "invalid_path",
        ),
        (
            "GET",
            "/v1/files?path=/no/such/file".into(),
            vec![],
            404,
            "file_not_found",
        ),
        (
            "GET",
            "/v1/files?path=/etc/hostname/".into(),
            vec![],
            404,
            "file_not_found",
        ),
    ];
    for (method, path, body, want_status, want_code) in cases {
        let (status, _, resp) = raw(&shim.addr, method, &path, t, &body).await;
        assert_eq!(
            status,
            want_status,
            "{method} {path}: {}",
            String::from_utf8_lossy(&resp)
        );
        assert_eq!(error_code(&resp), want_code, "{method} {path}");
    }
    // Still alive and the earlier process is intact.
    let (status, _, _) = raw(&shim.addr, "GET", "/healthz", None, b"").await;
    assert_eq!(status, 200);
    assert_eq!(common::follow(&shim.client, "ok").await.stdout, b"fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_and_metrics_describe_the_shim() {
    let shim = Shim::start();
    let info = shim.client.info().await.unwrap();
    assert_eq!(info.protocol, 1);
    assert_eq!(info.boot_id.len(), 32);
    run(&shim.client, "m1", &sh("echo x")).await;
    shim.client.spawn("m2", &sh("sleep 30")).await.unwrap();
    let m = shim.client.metrics().await.unwrap();
    for want in [
        "stepshim_processes{state=\"running\"} 1",
        "stepshim_processes{state=\"exited\"} 1",
        "stepshim_processes_spawned_total 2",
        "stepshim_http_requests_total{route=\"process\",status=\"201\"} 2",
        "# TYPE stepshim_output_streams gauge",
    ] {
        assert!(m.contains(want), "metrics lack {want:?}:\n{m}");
    }
    let other = Shim::start();
    assert_ne!(other.client.info().await.unwrap().boot_id, info.boot_id);
}
