//! `stepctl manifests --network-policy`: the NetworkPolicy document is compared byte for byte to
//! `protocol/testdata/networkpolicy-<case>.yaml`, read back into Kubernetes' own `NetworkPolicy`
//! type (k8s-openapi) and checked for what it admits; `--forwarder`: the DaemonSet read back into
//! Kubernetes' `DaemonSet`; bad flags are refused before anything is printed.
//! `STEPSHIM_UPDATE_GOLDEN=1` rewrites the files instead of failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn golden(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../protocol/testdata")
        .join(format!("networkpolicy-{case}.yaml"))
}

/// `stepctl manifests ARGS`: exit code, stdout, stderr.
fn manifests(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stepctl"))
        .env_remove("STEPCTL_NAMESPACE")
        .env_remove("STEPCTL_WORKER")
        .env_remove("STEPCTL_VIA")
        .env_remove("STEPCTL_SHIM_IMAGE")
        .arg("manifests")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The NetworkPolicy document of `stepctl manifests ARGS`, checked against its golden file.
fn policy_of(case: &str, args: &[&str]) -> (String, NetworkPolicy) {
    let (code, out, err) = manifests(args);
    assert_eq!(code, 0, "stderr: {err}");
    let docs: Vec<&str> = out.split("---\n").collect();
    let doc = docs
        .iter()
        .find(|d| d.contains("kind: NetworkPolicy"))
        .unwrap_or_else(|| panic!("no NetworkPolicy in {out}"))
        .to_string();
    assert_eq!(docs.len(), 4, "the RBAC objects and the policy");
    let path = golden(case);
    if std::env::var("STEPSHIM_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &doc).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(doc, want, "{} differs", path.display());
    let value: serde_norway::Value = serde_norway::from_str(&doc).unwrap();
    assert_eq!(value["apiVersion"].as_str(), Some("networking.k8s.io/v1"));
    assert_eq!(value["kind"].as_str(), Some("NetworkPolicy"));
    // Read into Kubernetes' own type and written again (it adds apiVersion and kind itself): the
    // same document, so no field is misspelt or misplaced.
    let policy: NetworkPolicy = serde_norway::from_str(&doc).unwrap();
    let again = serde_norway::to_value(&policy).unwrap();
    assert_eq!(again, value, "a field the Kubernetes type does not know");
    (doc, policy)
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

#[test]
fn the_policy_admits_the_controller_and_the_workers_pods_on_the_shim_port_only() {
    let (_, p) = policy_of(
        "full",
        &[
            "-n",
            "steps",
            "--worker",
            "ci worker",
            "--network-policy",
            "--controller-label",
            "app=concourse-web",
            "--controller-label",
            "tier=web",
            "--controller-namespace",
            "concourse",
            "--controller-cidr",
            "203.0.113.7/32",
            "--controller-cidr",
            "2001:db8::/64",
        ],
    );
    assert_eq!(p.metadata.namespace.as_deref(), Some("steps"));
    let spec = p.spec.unwrap();
    // The worker's step pods, by the label podspec puts on them.
    let workers = labels(&[(controller::podspec::WORKER_LABEL, "ci_worker")]);
    assert_eq!(spec.pod_selector.unwrap().match_labels, workers);
    assert_eq!(spec.policy_types.unwrap(), ["Ingress"]);
    assert!(spec.egress.is_none());
    let rules = spec.ingress.unwrap();
    assert_eq!(rules.len(), 1);
    let ports = rules[0].ports.clone().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(
        ports[0].port,
        Some(IntOrString::Int(protocol::settings::PORT.into()))
    );
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
    let from = rules[0].from.clone().unwrap();
    assert_eq!(from.len(), 4, "{from:?}");
    let controller = &from[0];
    assert_eq!(
        controller.pod_selector.clone().unwrap().match_labels,
        labels(&[("app", "concourse-web"), ("tier", "web")])
    );
    assert_eq!(
        controller.namespace_selector.clone().unwrap().match_labels,
        labels(&[("kubernetes.io/metadata.name", "concourse")])
    );
    let cidrs: Vec<_> = from[1..3]
        .iter()
        .map(|p| p.ip_block.clone().unwrap().cidr)
        .collect();
    assert_eq!(cidrs, ["203.0.113.7/32", "2001:db8::/64"]);
    // Pulls: the worker's own step pods, in the same namespace (no namespace selector).
    assert_eq!(from[3].pod_selector.clone().unwrap().match_labels, workers);
    assert!(from[3].namespace_selector.is_none() && from[3].ip_block.is_none());
}

#[test]
fn by_default_the_controller_is_the_pods_with_the_documented_label() {
    let (doc, p) = policy_of(
        "default",
        &["-n", "ci", "--worker", "stepctl", "--network-policy"],
    );
    let from = p.spec.unwrap().ingress.unwrap()[0].from.clone().unwrap();
    assert_eq!(from.len(), 2);
    assert_eq!(
        from[0].pod_selector.clone().unwrap().match_labels,
        labels(&[("app.kubernetes.io/component", "stepshim-controller")])
    );
    assert!(from[0].namespace_selector.is_none());
    assert!(doc.contains("name: stepshim-worker\n"));
    // Without the flag there is no policy.
    let (code, out, _) = manifests(&["-n", "ci"]);
    assert_eq!(code, 0);
    assert!(!out.contains("NetworkPolicy"));
}

#[test]
fn peer_workers_admit_their_step_pods_in_their_namespaces() {
    let (_, p) = policy_of(
        "peers",
        &[
            "-n",
            "ci",
            "--worker",
            "a",
            "--network-policy",
            "--peer-worker",
            "b",
            "--peer-worker",
            "other/c d",
        ],
    );
    let from = p.spec.unwrap().ingress.unwrap()[0].from.clone().unwrap();
    assert_eq!(from.len(), 4, "{from:?}");
    let worker = controller::podspec::WORKER_LABEL;
    assert_eq!(
        from[1].pod_selector.clone().unwrap().match_labels,
        labels(&[(worker, "a")])
    );
    assert_eq!(
        from[2].pod_selector.clone().unwrap().match_labels,
        labels(&[(worker, "b")])
    );
    assert!(from[2].namespace_selector.is_none());
    // A worker name is a label value as podspec makes it.
    assert_eq!(
        from[3].pod_selector.clone().unwrap().match_labels,
        labels(&[(worker, &controller::podspec::label_value("c d"))])
    );
    assert_eq!(
        from[3].namespace_selector.clone().unwrap().match_labels,
        labels(&[("kubernetes.io/metadata.name", "other")])
    );
}

#[test]
fn bad_peers_are_refused_before_anything_is_printed() {
    for (flag, value, want) in [
        (
            "--controller-label",
            "app",
            "--controller-label \"app\": want KEY=VALUE",
        ),
        (
            "--controller-label",
            "=x",
            "--controller-label \"=x\": want KEY=VALUE",
        ),
        (
            "--controller-cidr",
            "10.0.0.0",
            "--controller-cidr \"10.0.0.0\": want an address block",
        ),
        (
            "--controller-cidr",
            "10.0.0.0/33",
            "--controller-cidr \"10.0.0.0/33\": want an address block",
        ),
        (
            "--controller-cidr",
            "example/8",
            "--controller-cidr \"example/8\": want an address block",
        ),
        (
            "--peer-worker",
            "Bad_NS/w",
            "--peer-worker \"Bad_NS/w\": want WORKER or NAMESPACE/WORKER",
        ),
        (
            "--peer-worker",
            "ns/",
            "--peer-worker \"ns/\": want WORKER or NAMESPACE/WORKER",
        ),
    ] {
        let (code, out, err) = manifests(&["--network-policy", flag, value]);
        assert_eq!(code, 1, "{flag} {value}");
        assert!(out.is_empty(), "{flag} {value}: printed {out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("stepctl: {want}")), "{err}");
    }
}

#[test]
fn the_configmap_says_it_is_plain_http_and_refuses_a_binary_too_large_for_one() {
    let dir = std::env::temp_dir().join(format!("stepctl-cm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let small = dir.join("small");
    std::fs::write(&small, vec![0u8; 1000]).unwrap();
    let (code, out, _) = manifests(&["--shim-configmap", small.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("plain\n# HTTP"), "{out}");
    // The build with TLS (about 1.3 MB) cannot be a ConfigMap: refused before anything is printed.
    let big = dir.join("big");
    std::fs::write(&big, vec![0u8; (1 << 20) + 1]).unwrap();
    let (code, out, err) = manifests(&["--shim-configmap", big.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.is_empty(), "printed {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("over a ConfigMap's 1048576"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_forwarder_daemon_set_is_a_valid_one_and_bad_flags_print_nothing() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let image = "registry.example.com/ci/stepshim@sha256:00";
    let (code, out, err) = manifests(&[
        "--forwarder",
        "--pod-cidr",
        "10.244.0.0/16",
        "--forwarder-image",
        image,
    ]);
    assert_eq!(code, 0, "{err}");
    let doc = out
        .split("---\n")
        .find(|d| d.contains("kind: DaemonSet"))
        .unwrap_or_else(|| panic!("no DaemonSet in {out}"));
    let value: serde_norway::Value = serde_norway::from_str(doc).unwrap();
    assert_eq!(value["apiVersion"].as_str(), Some("apps/v1"));
    // Read into Kubernetes' own type and written again (it adds apiVersion and kind itself): the
    // same document, so no field is misspelt or misplaced.
    let ds: DaemonSet = serde_norway::from_str(doc).unwrap();
    let again = serde_norway::to_value(&ds).unwrap();
    assert_eq!(
        again, value,
        "every field of the document is one of DaemonSet's"
    );
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some(image));
    assert_eq!(
        c.command.as_deref(),
        Some(&["/stepshim-forward".to_owned()][..])
    );

    let env_image = std::process::Command::new(env!("CARGO_BIN_EXE_stepctl"))
        .env("STEPCTL_SHIM_IMAGE", image)
        .args(["manifests", "--forwarder", "--pod-cidr", "10.244.0.0/16"])
        .output()
        .unwrap();
    assert!(
        env_image.status.success(),
        "the image from STEPCTL_SHIM_IMAGE"
    );

    for (args, want) in [
        (
            &["--forwarder", "--forwarder-image", image][..],
            "--forwarder needs --pod-cidr",
        ),
        (
            &[
                "--forwarder",
                "--pod-cidr",
                "10.244.1.0/16",
                "--forwarder-image",
                image,
            ][..],
            "--pod-cidr \"10.244.1.0/16\": host bits set (the network is 10.244.0.0/16)",
        ),
        (
            &[
                "--forwarder",
                "--pod-cidr",
                "fd00::/8",
                "--forwarder-image",
                image,
            ][..],
            "--pod-cidr \"fd00::/8\": not an IPv4 CIDR",
        ),
        (
            &["--forwarder", "--pod-cidr", "10.244.0.0/16"][..],
            "--forwarder needs the shim image",
        ),
    ] {
        let (code, out, err) = manifests(args);
        assert_eq!(code, 1, "{args:?}");
        assert!(out.is_empty(), "{args:?}: printed {out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("stepctl: {want}")), "{err}");
    }
}
