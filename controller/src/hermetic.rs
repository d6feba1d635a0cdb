//! Hermetic step pods (`StepSpec::hermetic`), as the Go kit's hermetic.go, the pure part: the
//! pod's own NetworkPolicy, which the runtime creates before the pod so that the step never runs
//! without it and then makes the pod its owner (Kubernetes deletes it with the pod;
//! `gc::collect_policies` deletes those a controller that died in between left, by
//! [`select_policies`]).
//!
//! The policy selects exactly that pod, by the label [`HERMETIC_LABEL`]`=<pod name>` that only a
//! hermetic pod carries, and is of type Egress only: everything the pod sends is denied but TCP to
//! the shim port of the worker's own pods (a pull of an input from another step pod is the
//! destination shim's outbound connection). DNS is denied too: a resolver forwarding outside the
//! cluster is a way out, and nothing a hermetic step needs has a name. Ingress is left to the
//! namespace's other policies (`stepctl manifests --network-policy`): the controller, pulls by other
//! step pods, the forwarder and the kubelet's probe reach the shim as before, and the replies are
//! part of those connections, which an Egress rule does not cut.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

pub use crate::podspec::HERMETIC_LABEL;
use crate::podspec::{SHIM_PORT, WORKER_LABEL, label_value};

/// The name of pod `pod`'s NetworkPolicy.
pub fn policy_name(pod: &str) -> String {
    format!("{pod}-hermetic")
}

/// Why pod `name` cannot be hermetic: it is not a label value, which the policy selects it by.
pub fn check(name: &str) -> Result<(), String> {
    if label_value(name) != name {
        return Err(format!(
            "hermetic pod {name}: the name must be a label value (at most 63 characters of \
             [A-Za-z0-9._-]), its NetworkPolicy selects the pod by it"
        ));
    }
    Ok(())
}

/// The NetworkPolicy of hermetic pod `pod` of `worker`: egress only to the shim port of the
/// worker's pods.
pub fn policy(worker: &str, pod: &str) -> NetworkPolicy {
    let labels = BTreeMap::from([
        (WORKER_LABEL.to_owned(), label_value(worker)),
        (HERMETIC_LABEL.to_owned(), pod.to_owned()),
    ]);
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(policy_name(pod)),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(labels),
                ..Default::default()
            }),
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            WORKER_LABEL.to_owned(),
                            label_value(worker),
                        )])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(SHIM_PORT.into())),
                    protocol: Some("TCP".into()),
                    end_port: None,
                }]),
            }]),
            ingress: None,
        }),
    }
}

/// The policies to delete at `now`: a hermetic pod's, not already going, at least `grace` old (the
/// pod may be being created), and selecting a pod not in `pods`. Pure, so the rule is tested apart.
pub fn select_policies<'a>(
    policies: impl IntoIterator<Item = &'a NetworkPolicy>,
    pods: &HashSet<String>,
    grace: Duration,
    now: Timestamp,
) -> Vec<String> {
    crate::selection::select_objects(
        policies.into_iter().map(|p| &p.metadata),
        |m| m.labels.as_ref()?.get(HERMETIC_LABEL),
        pods,
        grace,
        now,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn np(name: &str, pod: Option<&str>, created: &str, deleting: bool) -> NetworkPolicy {
        let mut meta = serde_json::json!({"name": name, "creationTimestamp": created});
        if let Some(pod) = pod {
            meta["labels"] = serde_json::json!({ HERMETIC_LABEL: pod });
        }
        if deleting {
            meta["deletionTimestamp"] = "2026-01-01T00:10:00Z".into();
        }
        serde_json::from_value(serde_json::json!({ "metadata": meta })).unwrap()
    }

    #[test]
    fn collects_only_old_policies_of_pods_gone() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let old = "2026-01-01T00:00:00Z";
        let policies = [
            np("live-hermetic", Some("live"), old, false),
            np("gone-hermetic", Some("gone"), old, false),
            np(
                "young-hermetic",
                Some("young"),
                "2026-01-01T00:09:30Z",
                false,
            ),
            np("going-hermetic", Some("going"), old, true),
            np("other", None, old, false),
        ];
        let pods = HashSet::from(["live".to_owned()]);
        let chosen = select_policies(&policies, &pods, Duration::from_secs(60), now);
        assert_eq!(chosen, ["gone-hermetic"]);
        let all = select_policies(&policies, &HashSet::new(), Duration::ZERO, now);
        assert_eq!(all, ["live-hermetic", "gone-hermetic", "young-hermetic"]);
    }

    #[test]
    fn a_hermetic_name_must_be_a_label_value() {
        let e = check(&"x".repeat(64)).unwrap_err();
        assert!(e.contains("label value"), "{e}");
        assert!(check("-x").is_err() && check("a.b").is_ok());
        assert!(check(&"x".repeat(63)).is_ok());
    }
}
