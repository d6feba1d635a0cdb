use super::*;

#[test]
fn paths_parse_as_the_pull_routes() {
    assert_eq!(parse("/v2/"), Ok(Request::Base));
    assert_eq!(parse("/v2"), Ok(Request::Base));
    let d = [0xab; 32];
    let hex = digest_string(&d);
    assert_eq!(
        parse(&format!("/v2/out/sub/blobs/{hex}")),
        Ok(Request::Blob {
            name: "out/sub",
            digest: d
        })
    );
    assert_eq!(
        parse("/v2/a/manifests/latest"),
        Ok(Request::Manifest {
            name: "a",
            reference: Reference::Tag("latest")
        })
    );
    assert_eq!(
        parse(&format!("/v2/a/manifests/{hex}")),
        Ok(Request::Manifest {
            name: "a",
            reference: Reference::Digest(d)
        })
    );
    // A repository may itself be called `manifests`: the last marker wins.
    assert!(matches!(
        parse("/v2/manifests/manifests/v1"),
        Ok(Request::Manifest {
            name: "manifests",
            ..
        })
    ));
    for bad in [
        "/v2/a/tags/list",
        "/v2/a/blobs/uploads/",
        "/v2/_catalog",
        "/v3/a/manifests/x",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    assert!(matches!(
        parse("/v2/A/manifests/x"),
        Err(PathError::NameInvalid(_))
    ));
    assert!(matches!(
        parse("/v2/a/blobs/sha256:ABAB"),
        Err(PathError::DigestInvalid(_))
    ));
    assert!(matches!(
        parse("/v2/a/blobs/sha512:00"),
        Err(PathError::DigestInvalid(_))
    ));
    assert!(matches!(
        parse("/v2/a/manifests/-x"),
        Err(PathError::TagInvalid(_))
    ));
}

#[test]
fn names_follow_the_spec_grammar() {
    for ok in [
        "a",
        "out",
        "a.b",
        "a_b",
        "a__b",
        "a---b",
        "10.244.0.5/out",
        "x/y/z9",
    ] {
        assert!(valid_name(ok), "{ok}");
    }
    for bad in [
        "", "A", "a/", "/a", "a//b", ".a", "a.", "a..b", "a___b", "a-.b", "a b", "a:b",
    ] {
        assert!(!valid_name(bad), "{bad}");
    }
    assert!(!valid_name(&"a".repeat(256)));
}

#[test]
fn basic_credentials_give_their_password() {
    // "user:pa:ss" and "x:" in base64.
    assert_eq!(
        basic_password(b"Basic dXNlcjpwYTpzcw=="),
        Some(b"pa:ss".to_vec())
    );
    assert_eq!(basic_password(b"basic eDo="), Some(Vec::new()));
    assert_eq!(basic_password(b"Bearer dXNlcjpwYTpzcw=="), None);
    assert_eq!(basic_password(b"Basic ***"), None);
    // No colon: not a user:password pair.
    assert_eq!(basic_password(b"Basic dXNlcg=="), None);
    assert_eq!(base64_decode(b"YWJj"), Some(b"abc".to_vec()));
    assert_eq!(base64_decode(b"YWI"), Some(b"ab".to_vec()));
    assert_eq!(base64_decode(b"Y"), None);
    for s in ["", "a", "ab", "abc", "user:pa:ss", "\u{e9}t\u{e9}"] {
        assert_eq!(
            base64_decode(base64_encode(s.as_bytes()).as_bytes()),
            Some(s.as_bytes().to_vec())
        );
    }
    assert_eq!(base64_encode(b"x:"), "eDo=");
    assert_eq!(
        basic_password(basic_credentials("u", "p:w").as_bytes()),
        Some(b"p:w".to_vec())
    );
}

#[test]
fn a_config_carries_the_metadata() {
    let meta: Metadata =
        serde_json::from_str(r#"{"env":["A=b"],"user":"builder","cmd":["/bin/sh"],"extra":1}"#)
            .unwrap();
    let c = ImageConfig::of(&meta, "amd64", &[1; 32]);
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(
        json,
        format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"User":"builder","Env":["A=b"],"Cmd":["/bin/sh"]}},"rootfs":{{"type":"layers","diff_ids":["{}"]}}}}"#,
            digest_string(&[1; 32])
        )
    );
}

#[test]
fn a_manifest_says_what_it_is() {
    let of = |s: &str| {
        serde_json::from_str::<SelfDescribed>(s)
            .ok()
            .and_then(|m| m.media_type().map(str::to_owned))
    };
    let desc = r#"{"mediaType":"a/b","digest":"sha256:00","size":1}"#;
    assert_eq!(
        of(r#"{"schemaVersion":2,"manifests":[]}"#).as_deref(),
        Some(INDEX)
    );
    assert_eq!(
        of(&format!(
            r#"{{"schemaVersion":2,"config":{desc},"layers":[]}}"#
        ))
        .as_deref(),
        Some(MANIFEST)
    );
    assert_eq!(
        of(&format!(
            r#"{{"schemaVersion":2,"mediaType":"x/y","config":{desc}}}"#
        ))
        .as_deref(),
        Some("x/y")
    );
    // An image config has a `config` too, but not a descriptor; a bare mediaType is no manifest.
    assert_eq!(
        of(r#"{"architecture":"amd64","config":{"Env":["A=b"]}}"#),
        None
    );
    assert_eq!(of(r#"{"schemaVersion":2,"config":{"Env":[]}}"#), None);
    assert_eq!(of(r#"{"schemaVersion":2,"mediaType":"x/y"}"#), None);
    assert_eq!(of(r#"{"manifests":[]}"#), None);
    assert_eq!(of(r#"{"schemaVersion":2,"layers":[]}"#), None);
}
