//! Hermetic step pods ([`StepSpec::hermetic`]), as the Go kit's hermetic.go: the pod's own
//! NetworkPolicy, created before the pod so that the step never runs without it, then owned by the
//! pod (Kubernetes deletes it with the pod; [`collect_policies`] deletes those a controller that
//! died in between left).
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

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};

use crate::podspec::{SHIM_PORT, StepSpec, WORKER_LABEL, label_value};
use crate::runtime::{Runtime, RuntimeError};

/// The label, valued with the pod's name, of a hermetic pod and of its policy: the policy selects
/// the pod by it and gc lists the policies by it.
pub const HERMETIC_LABEL: &str = "stepshim.dev/hermetic";

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
    crate::gc::select_objects(
        policies.into_iter().map(|p| &p.metadata),
        |m| m.labels.as_ref()?.get(HERMETIC_LABEL),
        pods,
        grace,
        now,
    )
}

fn api(rt: &Runtime) -> Api<NetworkPolicy> {
    Api::namespaced(rt.client.clone(), &rt.namespace)
}

/// Deletes policy `name`; one already gone is not an error.
pub(crate) async fn delete(rt: &Runtime, name: &str) -> Result<(), kube::Error> {
    match api(rt).delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the policy of hermetic `spec`, replacing one an earlier attempt left unless its pod is
/// still there (then nothing changes, and the pod's create answers 409).
pub(crate) async fn create(
    rt: &Runtime,
    spec: &StepSpec,
    pods: &Api<Pod>,
) -> Result<(), RuntimeError> {
    check(&spec.name).map_err(RuntimeError::BadSpec)?;
    let policies = api(rt);
    let policy = policy(&rt.worker, &spec.name);
    let name = policy_name(&spec.name);
    let failed = |source| RuntimeError::Policy {
        name: name.clone(),
        source,
    };
    match policies.create(&PostParams::default(), &policy).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {
            if pods.get_opt(&spec.name).await?.is_some() {
                // The pod's own create answers 409, and the policy stays.
                return Ok(());
            }
            delete(rt, &name).await.map_err(failed)?;
            policies
                .create(&PostParams::default(), &policy)
                .await
                .map_err(failed)?;
        }
        other => {
            other.map_err(failed)?;
        }
    }
    Ok(())
}

/// Makes pod `pod` (of `uid`) the owner of its policy; a failure is logged (gc deletes the
/// policy once the pod is gone).
pub(crate) async fn own(rt: &Runtime, pod: &str, uid: &str) {
    let patch = Patch::Merge(crate::image::owner_patch(pod, uid));
    let name = policy_name(pod);
    if let Err(e) = api(rt).patch(&name, &PatchParams::default(), &patch).await {
        tracing::warn!(policy = name, "cannot make pod {pod} its owner: {e}");
    }
}

/// Deletes the worker's hermetic pods' policies whose pod is gone, once at least `grace` old;
/// returns their names. Credentials without rights on networkpolicies (a Role from before hermetic
/// pods) make it a no-op.
pub async fn collect_policies(rt: &Runtime, grace: Duration) -> Result<Vec<String>, RuntimeError> {
    let selector = format!(
        "{WORKER_LABEL}={},{HERMETIC_LABEL}",
        label_value(&rt.worker)
    );
    let list = match api(rt).list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list,
        Err(kube::Error::Api(e)) if e.code == 403 => return Ok(Vec::new()),
        Err(source) => {
            return Err(RuntimeError::Policy {
                name: format!("list {selector}"),
                source,
            });
        }
    };
    let pods: HashSet<String> = rt
        .pods()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let chosen = select_policies(&list.items, &pods, grace, Timestamp::now());
    for name in &chosen {
        delete(rt, name)
            .await
            .map_err(|source| RuntimeError::Policy {
                name: name.clone(),
                source,
            })?;
    }
    Ok(chosen)
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
