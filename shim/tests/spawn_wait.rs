//! `PUT /v1/processes/{id}?wait=S`: spawn and wait in one request, through the real binary.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Shim, error_code, metric, raw, sh};
use protocol::{Exit, State};

#[tokio::test]
async fn one_request_spawns_and_returns_the_exit() {
    let shim = Shim::start();
    let (p, created) = shim
        .client
        .spawn_wait("w", &sh("sleep 0.2; exit 4"), 10)
        .await
        .unwrap();
    assert!(created);
    assert_eq!(p.state, State::Exited);
    assert_eq!(p.exit, Some(Exit::code(4)));
    // Exactly one request reached the process route (the 201): no follow-up GET was needed.
    let m = shim.client.metrics().await.unwrap();
    let series = |status: &str| {
        metric(
            &m,
            &format!(r#"stepshim_http_requests_total{{route="process",status="{status}"}}"#),
        )
    };
    assert_eq!((series("201"), series("200")), (Some(1), None), "{m}");
    // A retry of the same spawn answers 200 with the same exit, at once.
    let (again, created) = shim
        .client
        .spawn_wait("w", &sh("sleep 0.2; exit 4"), 10)
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again.exit, Some(Exit::code(4)));
}

#[tokio::test]
async fn the_wait_is_bounded_and_a_bad_wait_spawns_nothing() {
    let shim = Shim::start();
    let t = Instant::now();
    let (p, _) = shim
        .client
        .spawn_wait("slow", &sh("sleep 30"), 1)
        .await
        .unwrap();
    let took = t.elapsed();
    assert_eq!(p.state, State::Running);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );
    shim.client.delete("slow", true).await.unwrap();
    let body = br#"{"path":"/bin/true"}"#;
    let (status, _, resp) = raw(
        &shim.addr,
        "PUT",
        "/v1/processes/bad?wait=soon",
        Some(&shim.token),
        body,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&resp), "bad_request");
    assert_eq!(
        shim.client.get("bad").await.unwrap_err().code(),
        Some(protocol::ErrorCode::ProcessNotFound)
    );
}
