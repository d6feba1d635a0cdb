//! `controller::transfer` against two real local shims: a direct copy (a grant on the source and a
//! pull by the destination, the bytes never through the controller), the explicit copy through the
//! controller, and the fallback when the destination cannot use the source's address (here a host
//! name, which a shim does not resolve, while the controller does). Needs the `stepshim` binary
//! beside `stepctl` (`cargo build -p stepshim`) or in `$STEPSHIM_BIN`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::shim;
use std::time::Duration;

use client::ShimClient;
use controller::transfer::{self, How};

fn digest_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_through_the_controller_and_the_fallback() {
    let (mut a, mut b) = (shim(), shim());
    let t = std::env::temp_dir().join(format!("stepctl-transfer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    std::fs::create_dir_all(t.join("src")).unwrap();
    for i in 0..50u8 {
        std::fs::write(
            t.join(format!("src/f{i}")),
            vec![i; 20_000 + usize::from(i)],
        )
        .unwrap();
    }
    let src_path = format!("{}/", t.join("src").display());
    let dir = |name: &str| t.join(name).display().to_string();

    let c = transfer::copy(
        &a.client,
        &src_path,
        &b.client,
        &dir("direct"),
        "t1",
        How::Direct,
    )
    .await
    .unwrap();
    assert!(
        c.direct && c.fallback.is_none() && c.sha256.is_some(),
        "{c:?}"
    );
    assert_eq!(digest_of(&t.join("direct")), digest_of(&t.join("src")));
    // The grant made for the copy is gone.
    assert!(a.client.grants().await.unwrap().is_empty());

    let c = transfer::copy(
        &a.client,
        &src_path,
        &b.client,
        &dir("via"),
        "t2",
        How::Controller,
    )
    .await
    .unwrap();
    assert!(!c.direct, "{c:?}");
    assert_eq!(digest_of(&t.join("via")), digest_of(&t.join("src")));

    // The controller reaches the source as localhost; the destination shim cannot use that name.
    let port = a.addr.rsplit_once(':').unwrap().1;
    let named =
        ShimClient::new(&format!("http://localhost:{port}"), Some(a.token.clone())).unwrap();
    let c = transfer::copy(
        &named,
        &src_path,
        &b.client,
        &dir("fallback"),
        "t3",
        How::Direct,
    )
    .await
    .unwrap();
    assert!(!c.direct && c.fallback.is_some(), "{c:?}");
    assert_eq!(digest_of(&t.join("fallback")), digest_of(&t.join("src")));

    let _ = std::fs::remove_dir_all(&t);
    a.terminate(Duration::from_secs(10));
    b.terminate(Duration::from_secs(10));
}
