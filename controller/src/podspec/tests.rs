//! Tests of the step pod spec.

use super::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

#[test]
fn init_container_delivery_runs_the_shim_as_pid_1_of_the_user_image() {
    let mut spec = StepSpec::new(
        "step-1",
        "busybox:latest",
        Delivery::InitContainer {
            image: "shim:dev".into(),
        },
    );
    spec.build = Some("main/build #42".into());
    spec.env = vec![("CI".into(), "true".into())];
    spec.cpu = Some("250m".into());
    let pod = build_pod(&spec, "worker-a", "abc123", None);
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels[WORKER_LABEL], "worker-a");
    assert_eq!(labels[BUILD_LABEL], "main_build__42");
    assert_eq!(
        pod.metadata.annotations.unwrap()[BUILD_LABEL],
        "main/build #42"
    );
    let ps = pod.spec.unwrap();
    assert_eq!(ps.automount_service_account_token, Some(false));
    assert_eq!(ps.restart_policy.as_deref(), Some("Never"));
    let init = &ps.init_containers.unwrap()[0];
    assert_eq!(init.image.as_deref(), Some("shim:dev"));
    assert_eq!(
        init.command.clone().unwrap(),
        ["/stepshim", "install", "/.stepshim/stepshim"]
    );
    let main = &ps.containers[0];
    assert_eq!(main.image.as_deref(), Some("busybox:latest"));
    assert_eq!(main.command.clone().unwrap(), ["/.stepshim/stepshim"]);
    let env = main.env.clone().unwrap();
    assert!(
        env.iter()
            .any(|e| e.name == "STEPSHIM_TOKEN_SHA256" && e.value.as_deref() == Some("abc123"))
    );
    assert!(env.iter().any(|e| e.name == "CI"));
    assert!(!env.iter().any(|e| {
        e.value
            .as_deref()
            .is_some_and(|v| v.len() == 64 && v != "abc123")
    }));
    let probe = main.readiness_probe.clone().unwrap().http_get.unwrap();
    assert_eq!(probe.path.as_deref(), Some("/healthz"));
    assert_eq!(
        main.resources.clone().unwrap().limits.unwrap()["cpu"].0,
        "250m"
    );
}

#[test]
fn configmap_delivery_mounts_the_binary_executable() {
    let spec = StepSpec::new(
        "s",
        "img",
        Delivery::ConfigMap {
            name: "stepshim-bin".into(),
        },
    );
    let ps = build_pod(&spec, "w", "h", None).spec.unwrap();
    assert!(ps.init_containers.is_none());
    let cm = ps.volumes.unwrap()[0].config_map.clone().unwrap();
    assert_eq!(cm.name, "stepshim-bin");
    assert_eq!(cm.items.unwrap()[0].mode, Some(0o555));
}

#[test]
fn label_values_are_valid() {
    assert_eq!(label_value("--a b--"), "a_b");
    assert_eq!(label_value(&"x".repeat(100)).len(), 63);
    assert_eq!(label_value("#"), "");
}

#[test]
fn a_cpu_request_alone_sets_no_limit() {
    let mut spec = StepSpec::new("s", "busybox", Delivery::ConfigMap { name: "c".into() });
    spec.cpu_request = Some("100m".into());
    let pod = build_pod(&spec, "w", "t", None);
    let r = pod.spec.unwrap().containers[0].resources.clone().unwrap();
    assert_eq!(r.requests.unwrap()["cpu"], Quantity("100m".into()));
    assert_eq!(r.limits, None);
    // With a memory limit, the CPU request still brings no CPU limit.
    spec.memory = Some("1Gi".into());
    let pod = build_pod(&spec, "w", "t", None);
    let r = pod.spec.unwrap().containers[0].resources.clone().unwrap();
    assert_eq!(r.requests.unwrap().len(), 2);
    assert_eq!(r.limits.unwrap().keys().collect::<Vec<_>>(), ["memory"]);
    // `cpu` (request and limit) wins over a request alone.
    spec.cpu = Some("250m".into());
    let pod = build_pod(&spec, "w", "t", None);
    let r = pod.spec.unwrap().containers[0].resources.clone().unwrap();
    assert_eq!(r.requests.unwrap()["cpu"], Quantity("250m".into()));
    assert_eq!(r.limits.unwrap()["cpu"], Quantity("250m".into()));
}

#[test]
fn an_image_from_a_step_pod_names_its_pull_secret() {
    let image = format!("127.0.0.1:7779/10.244.0.9/out@sha256:{}", "0f".repeat(32));
    let mut spec = StepSpec::new(
        "consumer",
        image.clone(),
        Delivery::ConfigMap { name: "c".into() },
    );
    assert!(
        build_pod(&spec, "w", "t", None)
            .spec
            .unwrap()
            .image_pull_secrets
            .is_none()
    );
    spec.image_pull_secrets = vec!["consumer-image".into()];
    let pod = serde_json::to_value(build_pod(&spec, "w", "t", None)).unwrap();
    assert_eq!(
        pod["spec"]["imagePullSecrets"],
        serde_json::json!([{"name": "consumer-image"}])
    );
    assert_eq!(pod["spec"]["containers"][0]["image"], image.as_str());
}

#[test]
fn image_volumes_are_mounted_read_only_into_the_main_container() {
    let tools = format!("127.0.0.1:7779/10.244.0.9/tools@sha256:{}", "0f".repeat(32));
    let data = format!("127.0.0.1:7779/10.244.0.8/data@sha256:{}", "1e".repeat(32));
    let mut spec = StepSpec::new(
        "consumer",
        "busybox",
        Delivery::ConfigMap { name: "c".into() },
    );
    spec.image_volumes = vec![
        ImageMount {
            reference: tools.clone(),
            mount_path: "/tools".into(),
        },
        ImageMount {
            reference: data.clone(),
            mount_path: "/data/in".into(),
        },
    ];
    let pod = serde_json::to_value(build_pod(&spec, "w", "t", None)).unwrap();
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 3, "{volumes:?}");
    assert_eq!(
        volumes[1..],
        [
            serde_json::json!({"name": "image-0", "image": {"reference": tools, "pullPolicy": "IfNotPresent"}}),
            serde_json::json!({"name": "image-1", "image": {"reference": data, "pullPolicy": "IfNotPresent"}}),
        ]
    );
    assert_eq!(
        pod["spec"]["containers"][0]["volumeMounts"],
        serde_json::json!([
            {"name": "stepshim", "mountPath": SHIM_DIR, "readOnly": true},
            {"name": "image-0", "mountPath": "/tools", "readOnly": true},
            {"name": "image-1", "mountPath": "/data/in", "readOnly": true},
        ])
    );
    let plain = serde_json::to_value(build_pod(
        &StepSpec::new("p", "busybox", Delivery::ConfigMap { name: "c".into() }),
        "w",
        "t",
        None,
    ))
    .unwrap();
    assert_eq!(plain["spec"]["volumes"].as_array().unwrap().len(), 1);
}

#[test]
fn certs_come_from_the_configmap_read_only_and_hermetic_pods_are_labelled_by_name() {
    let mut spec = StepSpec::new("s", "busybox", Delivery::ConfigMap { name: "c".into() });
    let plain = build_pod(&spec, "w", "t", None);
    assert!(
        !plain
            .metadata
            .labels
            .unwrap()
            .contains_key(crate::podspec::HERMETIC_LABEL)
    );
    spec.certs_configmap = Some("worker-ca".into());
    spec.hermetic = true;
    let pod = build_pod(&spec, "w", "t", None);
    assert_eq!(
        pod.metadata.labels.unwrap()[crate::podspec::HERMETIC_LABEL],
        "s"
    );
    let podspec = pod.spec.unwrap();
    let volume = podspec.volumes.unwrap().pop().unwrap();
    assert_eq!(volume.name, CERTS_VOLUME);
    assert_eq!(volume.config_map.unwrap().name, "worker-ca");
    let mount = podspec.containers[0]
        .volume_mounts
        .clone()
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        (
            mount.name.as_str(),
            mount.mount_path.as_str(),
            mount.read_only
        ),
        (CERTS_VOLUME, "/etc/ssl/certs", Some(true))
    );
}
