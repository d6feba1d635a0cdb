use http::HeaderValue;

use super::*;

fn allow() -> Vec<Cidr> {
    vec!["10.244.0.0/16".parse().unwrap()]
}

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn get(path: &str) -> Result<Route, Refusal> {
    route(&Method::GET, path, &allow())
}

#[test]
fn pull_routes_are_rewritten_without_the_source_address() {
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
    assert_eq!(get("/v2").ok(), Some(Route::Root));
    assert_eq!(get("/healthz").ok(), Some(Route::Probe));
}

#[test]
fn what_is_not_a_pull_is_refused_before_anything_is_reached() {
    let refused = |p: &str| get(p).unwrap_err();
    let put = route(
        &Method::PUT,
        "/v2/10.244.1.7/out/manifests/latest",
        &allow(),
    );
    assert!(matches!(put, Err(Refusal::Method)));
    assert!(matches!(
        route(&Method::POST, "/v2/", &allow()),
        Err(Refusal::Method)
    ));
    for path in [
        "/v1/info",
        "/v2/10.244.1.7",
        "/v2/10.244.1.7/",
        "/v2/10.244.1.7/out",
        "/v2/10.244.1.7/out/tags/list",
        "/v2/_catalog",
    ] {
        assert!(matches!(refused(path), Refusal::Route), "{path}");
    }
    assert!(matches!(
        refused("/v2/10.244.1.7/out/blobs/latest"),
        Refusal::Digest(_)
    ));
    assert!(matches!(
        refused("/v2/10.244.1.7/out/blobs/uploads/x"),
        Refusal::Digest(_)
    ));
    assert!(matches!(
        refused("/v2/10.244.1.7/out/manifests/.x"),
        Refusal::Tag(_)
    ));
    let short = "/v2/10.244.1.7/out/manifests/sha256:00";
    assert!(matches!(refused(short), Refusal::Digest(_)));
    for name in ["..", "Out", "a--", "_a", "a%2fb", "a..b", "a//b", ""] {
        let p = format!("/v2/10.244.1.7/{name}/manifests/latest");
        assert!(matches!(refused(&p), Refusal::Name(_)), "{name}");
    }
    for ip in ["fd00::1", "[fd00::1]", "10.244.1", "010.244.1.7", "host"] {
        let p = format!("/v2/{ip}/out/manifests/latest");
        assert!(matches!(refused(&p), Refusal::NotIpv4(_)), "{ip}");
    }
    for ip in ["10.245.0.1", "127.0.0.1", "169.254.169.254"] {
        let p = format!("/v2/{ip}/out/manifests/latest");
        assert!(matches!(refused(&p), Refusal::NotAllowed(_)), "{ip}");
    }
}

fn basic(user: &str, pass: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let v = protocol::registry::basic_credentials(user, pass);
    let v = HeaderValue::from_str(&v).unwrap();
    h.insert(header::AUTHORIZATION, v);
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
        let got = credentials(&basic(user, pass));
        assert!(matches!(got, Err(Refusal::Credentials(_))), "{user}:{pass}");
    }
    for value in ["Bearer t", "Basic !!!", "Basic"] {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
        assert!(
            matches!(credentials(&h), Err(Refusal::Credentials(_))),
            "{value}"
        );
    }
}

proptest::proptest! {
    /// Whatever the path, the route never panics, and a pull it lets through names an allowed
    /// IPv4 source and goes upstream as the path without that source, under /v2/, with nothing
    /// that could climb out of it or carry a query.
    #[test]
    fn any_path_routes_safely(
        ip in "(10\\.244\\.[0-9]{1,3}\\.[0-9]{1,3}|[0-9.:a-f]{1,15})",
        rest in "([a-z0-9._-]{1,8}/){1,3}(manifests|blobs)/(latest|v1\\.0|sha256:[0-9a-f]{64}|[a-zA-Z0-9._%:-]{1,10})|[a-zA-Z0-9._/:%?#-]{0,80}",
        head in proptest::bool::ANY,
    ) {
        let method = if head { Method::HEAD } else { Method::GET };
        let path = format!("/v2/{ip}/{rest}");
        if let Ok(Route::Pull { ip: got, path: upstream }) = route(&method, &path, &allow()) {
            proptest::prop_assert!(allow()[0].contains(got));
            proptest::prop_assert_eq!(got.to_string(), ip.clone());
            proptest::prop_assert_eq!(upstream, format!("/v2/{rest}"));
            proptest::prop_assert!(!rest.contains("..") && !rest.contains('%'));
            proptest::prop_assert!(!rest.contains('?') && !rest.contains('#'));
        }
    }
}

#[test]
fn the_networks_own_broadcast_and_the_nodes_addresses_are_refused() {
    for edge in ["10.244.0.0", "10.244.255.255"] {
        let refused = get(&format!("/v2/{edge}/out/manifests/latest"));
        assert!(matches!(refused, Err(Refusal::NetworkEdge(_))), "{edge}");
    }
    let node: Vec<Ipv4Addr> = ["10.244.0.1", "192.0.2.2"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let gateway = "10.244.0.1".parse().unwrap();
    assert!(matches!(
        not_the_node(gateway, &node),
        Err(Refusal::Node(ip)) if ip == gateway
    ));
    assert!(not_the_node("10.244.0.2".parse().unwrap(), &node).is_ok());
    let refusal = not_the_node(gateway, &node).unwrap_err();
    assert_eq!(refusal.status_code().1, "DENIED");
    assert!(
        refusal
            .body()
            .contains("10.244.0.1 is an address of this node")
    );
}
