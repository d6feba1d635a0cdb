//! The pod's properties (PROTOCOL.md 4.13) against the real shim: set, replace, list and delete;
//! values of any UTF-8 (NUL, control characters, quotes, the empty string); names refused by charset
//! and length; the count, value and total limits with the store left as it was; a grant token
//! refused; and many sets that leave exactly what the last ones said.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::collections::BTreeMap;

use common::artifacts::{grant, scratch};
use common::{Shim, error_code, raw};
use protocol::ErrorCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_round_trip_with_any_utf8_value() {
    let shim = Shim::start();
    let c = &shim.client;
    assert!(c.properties().await.unwrap().is_empty());
    let (status, head, body) =
        raw(&shim.addr, "GET", "/v1/properties", Some(&shim.token), b"").await;
    assert_eq!((status, body.as_slice()), (200, b"{}".as_slice()));
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json")
    );
    let result = r#"{"version":{"ref":"abc"},"metadata":[{"name":"m","value":"é ✓"}]}"#;
    let odd: String = (0u8..0x80)
        .map(char::from)
        .chain("\u{2028}😀".chars())
        .collect();
    let mut want = BTreeMap::new();
    for (name, value) in [
        ("concourse:resource-result", result),
        ("user", "root"),
        ("empty", ""),
        ("odd", odd.as_str()),
        ("A.b_c-9:x", "\n\r\t\"\\"),
    ] {
        c.set_property(name, value).await.unwrap();
        want.insert(name.to_owned(), value.to_owned());
    }
    assert_eq!(c.properties().await.unwrap(), want);
    // Replaced, deleted, deleted again (no error), and the others untouched.
    c.set_property("user", "1000").await.unwrap();
    c.delete_property("empty").await.unwrap();
    c.delete_property("empty").await.unwrap();
    c.delete_property("never-set").await.unwrap();
    want.insert("user".into(), "1000".into());
    want.remove("empty");
    assert_eq!(c.properties().await.unwrap(), want);
    let (status, _, _) = raw(
        &shim.addr,
        "GET",
        "/v1/properties/user",
        Some(&shim.token),
        b"",
    )
    .await;
    assert_eq!(status, 405);
    let (status, _, _) = raw(&shim.addr, "POST", "/v1/properties", Some(&shim.token), b"").await;
    assert_eq!(status, 405);
    // A body that is not UTF-8: 400, nothing set.
    let (status, _, body) = raw(
        &shim.addr,
        "PUT",
        "/v1/properties/bin",
        Some(&shim.token),
        b"\xff\xfe",
    )
    .await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (400, "invalid_property")
    );
    assert_eq!(c.properties().await.unwrap(), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_refused_before_anything_is_stored() {
    let shim = Shim::start_with(&[("STEPSHIM_PROPERTIES_MAX_NAME_BYTES", "16")], None);
    let t = Some(shim.token.as_str());
    for name in [
        "",
        ".",
        "..",
        "a%3Ab",
        "a%20b",
        "a b",
        "a/b",
        "../processes/x",
        "%C3%A9",
        "a+b",
        "a@b",
        "x12345678901234567",
    ] {
        let path = format!("/v1/properties/{name}");
        if path.contains(' ') {
            continue; // not a request line a client can send; covered by %20
        }
        for method in ["PUT", "DELETE"] {
            let (status, _, body) = raw(&shim.addr, method, &path, t, b"v").await;
            assert_eq!(
                (status, error_code(&body).as_str()),
                (400, "invalid_property"),
                "{method} {path}"
            );
        }
    }
    let err = shim.client.set_property("a/b", "v").await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidProperty), "{err}");
    shim.client
        .set_property(&"n".repeat(16), "v")
        .await
        .unwrap();
    assert_eq!(shim.client.properties().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_hold_and_a_refused_set_changes_nothing() {
    let shim = Shim::start_with(
        &[
            ("STEPSHIM_PROPERTIES_MAX_COUNT", "3"),
            ("STEPSHIM_PROPERTIES_MAX_VALUE_BYTES", "1000"),
            ("STEPSHIM_PROPERTIES_MAX_BYTES", "2010"),
        ],
        None,
    );
    let c = &shim.client;
    let err = c.set_property("big", &"x".repeat(1001)).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BodyTooLarge), "{err}");
    c.set_property("a", &"x".repeat(1000)).await.unwrap();
    c.set_property("b", &"y".repeat(1000)).await.unwrap();
    // 2002 bytes of names and values: 9 more fit, 10 do not.
    let err = c.set_property("c", &"z".repeat(9)).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PropertiesFull), "{err}");
    c.set_property("c", &"z".repeat(7)).await.unwrap();
    // The count: a fourth name is refused, replacing one of the three is not.
    let err = c.set_property("d", "").await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PropertiesFull), "{err}");
    let status = match &err {
        client::ClientError::Api { status, .. } => *status,
        e => panic!("{e}"),
    };
    assert_eq!(status, 409);
    // Replacing frees the old value's bytes first.
    c.set_property("a", &"w".repeat(1000)).await.unwrap();
    let props = c.properties().await.unwrap();
    assert_eq!(props.len(), 3);
    assert_eq!(props["a"], "w".repeat(1000));
    assert_eq!(props["c"], "z".repeat(7));
    // Deleting makes room again.
    c.delete_property("b").await.unwrap();
    c.set_property("d", &"v".repeat(1000)).await.unwrap();
    assert_eq!(c.properties().await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_token_cannot_touch_properties() {
    let shim = Shim::start();
    shim.client.set_property("secret", "s3cret").await.unwrap();
    let dir = scratch("props-grant");
    shim.client
        .grant(&grant(&dir, "tok-props", 60, None))
        .await
        .unwrap();
    for (method, path) in [
        ("GET", "/v1/properties"),
        ("PUT", "/v1/properties/secret"),
        ("DELETE", "/v1/properties/secret"),
        ("PUT", "/v1/properties/a%2Fb"),
    ] {
        let (status, _, body) = raw(&shim.addr, method, path, Some("tok-props"), b"x").await;
        assert_eq!(
            (status, error_code(&body).as_str()),
            (403, "forbidden"),
            "{method} {path}"
        );
        let (status, _, body) = raw(&shim.addr, method, path, None, b"x").await;
        assert_eq!((status, error_code(&body).as_str()), (401, "unauthorized"));
    }
    let props = shim.client.properties().await.unwrap();
    assert_eq!(props.get("secret").map(String::as_str), Some("s3cret"));
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sets_leave_what_the_last_ones_said() {
    // Far fewer bytes than the sets add up to: only a store that frees replaced values keeps taking
    // them.
    let shim = Shim::start_with(&[("STEPSHIM_PROPERTIES_MAX_BYTES", "65536")], None);
    let mut tasks = Vec::new();
    for w in 0..8 {
        let c = shim.client.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..250 {
                let name = format!("w{w}.k{}", i % 10);
                c.set_property(&name, &format!("{w}:{i}:{}", "v".repeat(i)))
                    .await
                    .unwrap();
                if i % 7 == 0 {
                    c.delete_property(&format!("w{w}.gone")).await.unwrap();
                    c.set_property(&format!("w{w}.gone"), "x").await.unwrap();
                }
            }
            c.delete_property(&format!("w{w}.gone")).await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let props = shim.client.properties().await.unwrap();
    assert_eq!(props.len(), 80);
    for w in 0..8 {
        for k in 0..10 {
            let i = 240 + k;
            assert_eq!(
                props[&format!("w{w}.k{k}")],
                format!("{w}:{i}:{}", "v".repeat(i))
            );
        }
    }
    // The store's bytes are exactly its names and values: what is left of the total fits, one byte
    // more does not.
    let used: usize = props.iter().map(|(k, v)| k.len() + v.len()).sum();
    let err = shim
        .client
        .set_property("last", &"l".repeat(65536 - used - 3))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PropertiesFull), "{err}");
    shim.client
        .set_property("last", &"l".repeat(65536 - used - 4))
        .await
        .unwrap();
}
