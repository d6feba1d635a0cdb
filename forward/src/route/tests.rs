use base64::Engine as _;
use http::HeaderValue;

use super::*;

fn allow() -> Vec<Cidr> {
    vec!["10.244.0.0/16".parse().unwrap()]
}

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[test]
fn pull_routes_are_rewritten_without_the_source_address() {
    let get = |p: &str| route(&Method::GET, p, &allow());
    assert_eq!(
        get("/v2/10.244.1.7/out/manifests/latest").ok(),
        Some(Route::Pull {
            ip: "10.244.1.7".parse().unwrap(),
            path: "/v2/out/manifests/latest".into()
        })
    );
    let blob = format!("/v2/10.244.1.7/out/sub/img/blobs/{DIGEST}");
    assert_eq!(
        route(&Method::HEAD, &blob, &allow()).ok(),
        Some(Route::Pull {
            ip: "10.244.1.7".parse().unwrap(),
            path: format!("/v2/out/sub/img/blobs/{DIGEST}")
        })
    );
    assert_eq!(get("/v2/").ok(), Some(Route::Root));
    assert_eq!(get("/healthz").ok(), Some(Route::Probe));
}

#[test]
fn what_is_not_a_pull_is_refused_before_anything_is_reached() {
    let get = |p: &str| route(&Method::GET, p, &allow()).unwrap_err();
    let m = |p: &str| route(&Method::PUT, p, &allow()).unwrap_err();
    assert!(matches!(
        m("/v2/10.244.1.7/out/manifests/latest"),
        Refusal::Method
    ));
    assert!(matches!(
        route(&Method::POST, "/v2/", &allow()),
        Err(Refusal::Method)
    ));
    assert!(matches!(get("/v1/info"), Refusal::Route));
    assert!(matches!(get("/v2/10.244.1.7/out"), Refusal::Route));
    assert!(matches!(
        get("/v2/10.244.1.7/manifests/latest"),
        Refusal::Route
    ));
    assert!(matches!(
        get("/v2/10.244.1.7/out/tags/list"),
        Refusal::Route
    ));
    assert!(matches!(
        get("/v2/10.244.1.7/out/blobs/uploads/x"),
        Refusal::Route
    ));
    assert!(matches!(
        get("/v2/10.244.1.7/out/blobs/latest"),
        Refusal::Reference(_)
    ));
    assert!(matches!(
        get("/v2/10.244.1.7/out/manifests/.x"),
        Refusal::Reference(_)
    ));
    assert!(matches!(
        get("/v2/10.244.1.7/out/manifests/sha256:00"),
        Refusal::Reference(_)
    ));
    for name in ["..", "Out", "a--", "_a", "a%2fb", "", "a..b"] {
        let p = format!("/v2/10.244.1.7/{name}/manifests/latest");
        assert!(matches!(get(&p), Refusal::Name(_)), "{name}");
    }
    assert!(matches!(
        get("/v2/10.244.1.7//manifests/latest"),
        Refusal::Name(_)
    ));
    for ip in ["fd00::1", "[fd00::1]", "10.244.1", "010.244.1.7", "host"] {
        let p = format!("/v2/{ip}/out/manifests/latest");
        assert!(matches!(get(&p), Refusal::NotIpv4(_)), "{ip}");
    }
    for ip in ["10.245.0.1", "127.0.0.1", "169.254.169.254"] {
        let p = format!("/v2/{ip}/out/manifests/latest");
        assert!(matches!(get(&p), Refusal::NotAllowed(_)), "{ip}");
    }
}

#[test]
fn oci_names_follow_the_grammar() {
    for ok in [
        "a",
        "out",
        "a.b",
        "a_b",
        "a__b",
        "a-b",
        "a---b",
        "v1.2-rc_3",
    ] {
        assert!(is_name_component(ok), "{ok}");
    }
    for bad in ["", "A", "a.", ".a", "a___b", "a._b", "a-", "a/b", "é"] {
        assert!(!is_name_component(bad), "{bad}");
    }
}

fn basic(user: &str, pass: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let v = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Basic {v}")).unwrap(),
    );
    h
}

#[test]
fn credentials_name_the_wire_and_carry_the_token() {
    let pin = "ab".repeat(32);
    let c = credentials(&basic(&format!("tls-{pin}"), "tok:en")).unwrap();
    assert_eq!(c.wire, Wire::Tls(pin.parse().unwrap()));
    assert_eq!(
        c.token, "tok:en",
        "the password is everything after the first colon"
    );
    let c = credentials(&basic("plain", "s3cr3t")).unwrap();
    assert_eq!(c.wire, Wire::Plain);
    assert!(
        !format!("{c:?}").contains("s3cr3t"),
        "Debug hides the token"
    );

    assert!(matches!(
        credentials(&HeaderMap::new()),
        Err(Refusal::NoCredentials)
    ));
    for (user, pass) in [
        ("tls-00", "t"),
        ("someone", "t"),
        ("plain", ""),
        ("plain", "a b"),
    ] {
        assert!(
            matches!(
                credentials(&basic(user, pass)),
                Err(Refusal::Credentials(_))
            ),
            "{user}:{pass}"
        );
    }
    let mut bearer = HeaderMap::new();
    bearer.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
    assert!(matches!(credentials(&bearer), Err(Refusal::Credentials(_))));
    let mut junk = HeaderMap::new();
    junk.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic !!!"));
    assert!(matches!(credentials(&junk), Err(Refusal::Credentials(_))));
}
