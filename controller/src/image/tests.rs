//! Tests of the pure part of images from step pods.
#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn pod_and_path_and_the_name_they_give() {
    let f: ImageFrom = "build-1:/tmp/build/out/my-image/".parse().unwrap();
    assert_eq!(f.pod, "build-1");
    assert_eq!(f.path, "/tmp/build/out/my-image");
    assert_eq!(f.name().unwrap(), "my-image");
    for bad in [
        "build-1",
        "build-1:rel/dir",
        ":/x",
        "a/b:/x",
        "p:/",
        "p:///",
    ] {
        assert!(bad.parse::<ImageFrom>().is_err(), "{bad}");
    }
    for ok in ["a", "0", "a.b", "a__b", "a---b", "v1.2.3"] {
        let f: ImageFrom = format!("p:/out/{ok}").parse().unwrap();
        assert_eq!(f.name().unwrap(), ok);
    }
    for bad in ["A", "a_", "a___b", "a..b", "-a", "a b", "a:b", "a._b"] {
        let f: ImageFrom = format!("p:/out/{bad}").parse().unwrap();
        assert!(f.name().is_err(), "{bad}");
    }
    let f: ImageFrom = "p:/out/My_Image".parse().unwrap();
    let e = f.name().unwrap_err().to_string();
    assert!(
        e.contains("\"My_Image\"") && e.contains("OCI name component"),
        "{e}"
    );
}

#[test]
fn the_reference_names_the_forwarder_the_source_and_the_digest() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    assert_eq!(
        reference(7779, "p", "10.244.0.17", "out", &digest).unwrap(),
        format!("127.0.0.1:7779/10.244.0.17/out@{digest}")
    );
    assert_eq!(
        reference(9000, "p", "10.0.0.1", "a.b", &digest).unwrap(),
        format!("127.0.0.1:9000/10.0.0.1/a.b@{digest}")
    );
    let e = reference(7779, "p", "fd00::1", "out", &digest).unwrap_err();
    assert!(e.to_string().contains("IPv4 pods only"), "{e}");
    assert!(reference(7779, "p", "10.0.0.1", "out", "sha256:AB").is_err());
    let upper = format!("sha256:{}", "AB".repeat(32));
    assert!(reference(7779, "p", "10.0.0.1", "out", &upper).is_err());
}

fn digest(byte: &str) -> String {
    format!("sha256:{}", byte.repeat(32))
}

#[test]
fn the_docker_config_is_what_the_kubelet_reads() {
    let token = "00".repeat(32);
    let plain = Credentials::new(None, &token);
    let image = format!("127.0.0.1:7779/10.244.0.17/img@{}", digest("ab"));
    let json = String::from_utf8(docker_config_json(&[(&image, &plain)]).unwrap()).unwrap();
    // base64("plain:" + 64 zeros)
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("plain:{token}"));
    assert_eq!(
        json,
        format!(
            r#"{{"auths":{{"127.0.0.1:7779/10.244.0.17/img":{{"username":"plain","password":"{token}","auth":"{auth}"}}}}}}"#
        )
    );
    let pin = "1f".repeat(32);
    let tls = Credentials::new(Some(&pin), &token);
    assert_eq!(tls.username, format!("tls-{pin}"));
    let other = format!("127.0.0.1:7000/10.0.0.1/a.b@{}", digest("cd"));
    let v: serde_json::Value =
        serde_json::from_slice(&docker_config_json(&[(&other, &tls)]).unwrap()).unwrap();
    let entry = &v["auths"]["127.0.0.1:7000/10.0.0.1/a.b"];
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(entry["auth"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, format!("tls-{pin}:{token}").as_bytes());
    assert!(
        !format!("{tls:?}").contains(&token),
        "Debug shows the token"
    );
}

#[test]
fn several_images_have_an_entry_each_keyed_by_repository() {
    let (a, b) = (Credentials::new(None, "ta"), Credentials::new(None, "tb"));
    let img = format!("127.0.0.1:7779/10.244.0.17/img@{}", digest("ab"));
    let tools = format!("127.0.0.1:7779/10.244.0.18/tools@{}", digest("cd"));
    let json = docker_config_json(&[(&img, &a), (&tools, &b), (&img, &a)]).unwrap();
    let enc = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    assert_eq!(
        String::from_utf8(json).unwrap(),
        format!(
            concat!(
                r#"{{"auths":{{"127.0.0.1:7779/10.244.0.17/img":{{"username":"plain","password":"ta","auth":"{}"}},"#,
                r#""127.0.0.1:7779/10.244.0.18/tools":{{"username":"plain","password":"tb","auth":"{}"}}}}}}"#
            ),
            enc("plain:ta"),
            enc("plain:tb")
        )
    );
    // One repository, two grants: the kubelet could not tell them apart.
    let again = format!("127.0.0.1:7779/10.244.0.17/img@{}", digest("ef"));
    let e = docker_config_json(&[(&img, &a), (&again, &b)]).unwrap_err();
    assert!(
        e.to_string().contains("127.0.0.1:7779/10.244.0.17/img"),
        "{e}"
    );
    assert_eq!(repository(&img), "127.0.0.1:7779/10.244.0.17/img");
}

#[test]
fn an_image_volume_is_a_source_and_a_mount() {
    let v: ImageVolume = "make:/build/img/=/img/".parse().unwrap();
    assert_eq!(v.from.to_string(), "make:/build/img");
    assert_eq!(v.mount_path, "/img");
    let v: ImageVolume = "p:/a=b/c=/mnt/x".parse().unwrap();
    assert_eq!(
        (v.from.path.as_str(), v.mount_path.as_str()),
        ("/a=b/c", "/mnt/x")
    );
    for bad in [
        "make:/build/img",
        "make:/build/img=",
        "make:/build/img=/",
        "make:/b=rel",
        "make=/img",
        ":/b=/m",
    ] {
        let e = bad.parse::<ImageVolume>().unwrap_err().to_string();
        assert!(e.contains("POD:/PATH=/MOUNT"), "{bad}: {e}");
    }
}

#[test]
fn the_secret_is_typed_labelled_and_owned_by_the_pod() {
    let creds = Credentials::new(None, "t0k3n");
    let image = format!("127.0.0.1:7779/10.0.0.1/out@{}", digest("ab"));
    let s = pull_secret("worker a", "step-2", &[(&image, &creds)]).unwrap();
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v["type"], "kubernetes.io/dockerconfigjson");
    assert_eq!(v["metadata"]["name"], "step-2-image");
    assert_eq!(v["metadata"]["labels"][WORKER_LABEL], "worker_a");
    assert_eq!(v["metadata"]["labels"][IMAGE_FOR], "step-2");
    assert_eq!(v["metadata"]["annotations"][IMAGE_FOR], "step-2");
    // `data` goes over the wire in base64, as the apiserver takes it.
    let data = base64::engine::general_purpose::STANDARD
        .decode(v["data"][".dockerconfigjson"].as_str().unwrap())
        .unwrap();
    assert_eq!(data, docker_config_json(&[(&image, &creds)]).unwrap());
    let patch = owner_patch("step-2", "1234-uid");
    assert_eq!(
        patch,
        serde_json::json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "step-2", "uid": "1234-uid"}]}})
    );
}

fn secret(name: &str, pod: Option<&str>, created: &str, deleting: bool) -> Secret {
    let mut meta = serde_json::json!({"name": name, "creationTimestamp": created});
    if let Some(p) = pod {
        meta["annotations"] = serde_json::json!({ IMAGE_FOR: p });
    }
    if deleting {
        meta["deletionTimestamp"] = "2026-01-01T00:10:00Z".into();
    }
    serde_json::from_value(serde_json::json!({ "metadata": meta })).unwrap()
}

#[test]
fn gc_deletes_the_secrets_whose_pod_is_gone() {
    let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
    let secrets = [
        secret("live-image", Some("live"), "2026-01-01T00:00:00Z", false),
        secret("gone-image", Some("gone"), "2026-01-01T00:00:00Z", false),
        secret("young-image", Some("young"), "2026-01-01T00:09:30Z", false),
        secret("going-image", Some("going"), "2026-01-01T00:00:00Z", true),
        secret("unnamed", None, "2026-01-01T00:00:00Z", false),
    ];
    let pods = HashSet::from(["live".to_owned()]);
    let chosen = select_secrets(&secrets, &pods, Duration::from_secs(60), now);
    assert_eq!(chosen, ["gone-image"]);
    let all = select_secrets(&secrets, &HashSet::new(), Duration::ZERO, now);
    assert_eq!(all, ["live-image", "gone-image", "young-image"]);
}
