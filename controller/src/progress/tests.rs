//! Pod statuses as the apiserver writes them, built as JSON, read into progress.
#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::{Progress, failing_container, progress};

fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
}

fn scheduled() -> serde_json::Value {
    json!({"type": "PodScheduled", "status": "True"})
}

#[test]
fn not_in_the_cache_is_unknown_and_no_status_is_scheduling() {
    assert_eq!(progress(None), Progress::Unknown);
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
    assert_eq!(progress(Some(&p)), Progress::Scheduling(String::new()));
}

#[test]
fn unschedulable_keeps_the_schedulers_message() {
    let p = pod(json!({"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient memory."}]}));
    assert_eq!(
        progress(Some(&p)),
        Progress::Scheduling("0/1 nodes are available: 1 Insufficient memory.".into())
    );
}

#[test]
fn image_pull_errors_are_fatal_with_kubernetes_reason() {
    for reason in [
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
    ] {
        let p = pod(json!({"phase": "Pending", "conditions": [scheduled()],
            "containerStatuses": [{"name": "step", "ready": false, "restartCount": 0, "image": "x",
                "imageID": "", "state": {"waiting": {"reason": reason, "message": "no such image"}}}]}));
        assert_eq!(
            progress(Some(&p)),
            Progress::Failed {
                reason: reason.into(),
                message: "no such image".into()
            },
            "{reason}"
        );
    }
}

#[test]
fn the_failing_container_names_the_image_of_its_spec() {
    let shim = "127.0.0.1:5873/ci/stepshim@sha256:0123";
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"initContainers": [{"name": "stepshim-install", "image": shim}],
            "containers": [{"name": "step", "image": "busybox"}]},
        "status": {"phase": "Pending", "conditions": [scheduled()],
            "initContainerStatuses": [{"name": "stepshim-install", "ready": false, "restartCount": 0,
                "image": "resolved", "imageID": "",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}],
            "containerStatuses": [{"name": "step", "ready": false, "restartCount": 0,
                "image": "busybox", "imageID": "",
                "state": {"waiting": {"reason": "PodInitializing"}}}]}}))
    .unwrap();
    assert_eq!(
        failing_container(&p),
        Some(("stepshim-install".into(), shim.into()))
    );
    // Without a spec, the status's image; a pod failed as a whole names no container.
    let p = pod(json!({"phase": "Pending", "conditions": [scheduled()],
        "containerStatuses": [{"name": "step", "ready": false, "restartCount": 0, "image": "x:1",
            "imageID": "", "state": {"waiting": {"reason": "InvalidImageName", "message": "bad"}}}]}));
    assert_eq!(failing_container(&p), Some(("step".into(), "x:1".into())));
    let p = pod(json!({"phase": "Failed", "reason": "Evicted", "message": "disk"}));
    assert_eq!(failing_container(&p), None);
}

#[test]
fn a_failing_init_container_and_a_dead_pod_are_fatal() {
    let p = pod(json!({"phase": "Pending", "conditions": [scheduled()],
        "initContainerStatuses": [{"name": "shim", "ready": false, "restartCount": 0, "image": "x",
            "imageID": "", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}));
    assert_eq!(
        progress(Some(&p)),
        Progress::Failed {
            reason: "container shim exited 2".into(),
            message: "Error".into()
        }
    );
    let p = pod(json!({"phase": "Failed", "reason": "OOMKilled", "message": "out of memory"}));
    assert_eq!(
        progress(Some(&p)),
        Progress::Failed {
            reason: "OOMKilled".into(),
            message: "out of memory".into()
        }
    );
}

#[test]
fn creating_then_starting_then_ready() {
    let p = pod(json!({"phase": "Pending", "conditions": [scheduled()],
        "containerStatuses": [{"name": "step", "ready": false, "restartCount": 0, "image": "x",
            "imageID": "", "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
    assert_eq!(
        progress(Some(&p)),
        Progress::Pulling("step: ContainerCreating".into())
    );
    let running = |ready: &str| {
        pod(
            json!({"phase": "Running", "podIP": "10.0.0.7", "conditions": [scheduled(),
            {"type": "Ready", "status": ready}],
            "containerStatuses": [{"name": "step", "ready": ready == "True", "restartCount": 0,
                "image": "x", "imageID": "", "state": {"running": {}}}]}),
        )
    };
    assert_eq!(
        progress(Some(&running("False"))),
        Progress::Starting("waiting for the shim's readiness".into())
    );
    assert_eq!(
        progress(Some(&running("True"))),
        Progress::Ready("10.0.0.7".into())
    );
    assert_eq!(
        Progress::Ready("10.0.0.7".into()).to_string(),
        "ready at 10.0.0.7"
    );
}

#[test]
fn a_refused_pull_from_a_step_pod_fails_at_once_naming_the_reference() {
    // The main container's image comes from another step pod through the forwarder; its init
    // container is done. The first ErrImagePull is the end: no waiting for a back-off.
    let image = format!("127.0.0.1:7779/10.244.0.9/out@sha256:{}", "0f".repeat(32));
    let message = "failed to resolve reference: pulling from host 127.0.0.1:7779 failed with \
                   status code 404 Not Found";
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "step", "image": image}]},
        "status": {"phase": "Pending", "conditions": [scheduled()],
            "initContainerStatuses": [{"name": "stepshim-install", "ready": true, "restartCount": 0,
                "image": "shim", "imageID": "", "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [{"name": "step", "ready": false, "restartCount": 0,
                "image": image, "imageID": "",
                "state": {"waiting": {"reason": "ErrImagePull", "message": message}}}]}}))
    .unwrap();
    assert_eq!(
        progress(Some(&p)),
        Progress::Failed {
            reason: "ErrImagePull".into(),
            message: message.into()
        }
    );
    assert_eq!(failing_container(&p), Some(("step".into(), image)));
}
