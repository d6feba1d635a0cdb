//! What an operator applies once per namespace: the worker's ServiceAccount, a Role granting pods
//! get/list/watch/create/delete (and configmaps get, for ConfigMap delivery, secrets
//! list/create/patch/delete, for the image-pull Secrets of images from step pods,
//! persistentvolumeclaims get/create/delete, for the claim the worker's volume holder keeps its
//! volumes on so that they outlive the holder pod, and networkpolicies list/create/patch/delete,
//! for hermetic step pods) and nothing of `pods/exec`, `pods/attach` or `pods/portforward`, the
//! RoleBinding, and optionally the ConfigMap carrying the shim binary. A worker that reaches shims
//! through the apiserver (`--via proxy` or `auto`) also gets `pods/proxy` with exactly the verbs
//! the shim's methods map to. A NetworkPolicy closes the worker's step pods to everything but the
//! controller and the worker's own step pods (pulls go pod to pod), on the shim's port only. Once
//! per cluster: the node-local forwarder's DaemonSet ([`forwarder`]).

pub mod forwarder;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::podspec::{CONFIGMAP_KEY, SHIM_PORT, WORKER_LABEL, label_value};

fn meta(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/part-of".to_owned(),
            "stepshim".to_owned(),
        )])),
        ..Default::default()
    }
}

/// The verbs on pods a worker needs, and `stepctl check` asks for.
pub const POD_VERBS: &[&str] = &["get", "list", "watch", "create", "delete"];
/// The verbs on `pods/proxy` that reaching shims through the apiserver needs: the apiserver
/// authorizes a proxied request by its method (GET is `get`, POST `create`, PUT `update`, DELETE
/// `delete`), and the protocol uses those four methods (PUT for spawns and files in).
pub const PROXY_VERBS: &[&str] = &["get", "create", "update", "delete"];
/// The verbs on secrets that images from step pods need (`stepctl run --image-from`): create
/// an image-pull Secret, make the pod its owner, and let gc list and delete those left behind.
pub const SECRET_VERBS: &[&str] = &["list", "create", "patch", "delete"];
/// The verbs on persistentvolumeclaims that the worker's volume holder needs: read its claim,
/// create it if missing, and delete it with the worker, the claim being what lets kept volumes
/// outlive the holder pod.
pub const CLAIM_VERBS: &[&str] = &["get", "create", "delete"];
/// The verbs on networkpolicies (networking.k8s.io) that hermetic step pods need (`stepctl run
/// --hermetic`): create the pod's policy, make the pod its owner, and let gc list and delete
/// those left behind.
pub const POLICY_VERBS: &[&str] = &["list", "create", "patch", "delete"];
/// Rights a worker never uses: holding them is over-privileged, and `stepctl check` warns.
pub const UNNEEDED: &[(&str, &str)] = &[
    ("pods/exec", "create"),
    ("pods/attach", "create"),
    ("pods/portforward", "create"),
];

/// The rules of the worker's Role; `proxy` adds the `pods/proxy` rule.
pub fn rules(proxy: bool) -> Vec<PolicyRule> {
    let mut rules = vec![
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods".into()]),
            verbs: POD_VERBS.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into()]),
            verbs: SECRET_VERBS.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["persistentvolumeclaims".into()]),
            verbs: CLAIM_VERBS.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(vec!["networking.k8s.io".into()]),
            resources: Some(vec!["networkpolicies".into()]),
            verbs: POLICY_VERBS.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        },
    ];
    if proxy {
        rules.push(PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods/proxy".into()]),
            verbs: PROXY_VERBS.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        });
    }
    rules
}

/// ServiceAccount, Role and RoleBinding for worker identity `name` in `namespace`, as YAML documents.
pub fn rbac(name: &str, namespace: &str) -> Result<String, serde_norway::Error> {
    rbac_for(name, namespace, false)
}

/// [`rbac`], with the `pods/proxy` rule when `proxy` (a worker reaching shims through the apiserver).
pub fn rbac_for(name: &str, namespace: &str, proxy: bool) -> Result<String, serde_norway::Error> {
    let sa = ServiceAccount {
        metadata: meta(name, namespace),
        automount_service_account_token: Some(true),
        ..Default::default()
    };
    let role = Role {
        metadata: meta(name, namespace),
        rules: Some(rules(proxy)),
    };
    let binding = RoleBinding {
        metadata: meta(name, namespace),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: name.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: name.to_owned(),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        }]),
    };
    Ok([
        doc("v1", "ServiceAccount", &sa)?,
        doc("rbac.authorization.k8s.io/v1", "Role", &role)?,
        doc("rbac.authorization.k8s.io/v1", "RoleBinding", &binding)?,
    ]
    .join("---\n"))
}

/// The most a ConfigMap's data may hold (the apiserver refuses more): the plain builds fit, the
/// build with TLS does not.
pub const CONFIGMAP_MAX_BYTES: usize = 1 << 20;

/// The ConfigMap carrying the shim binary under the key `stepshim`.
pub fn shim_configmap(
    name: &str,
    namespace: &str,
    binary: Vec<u8>,
) -> Result<String, serde_norway::Error> {
    let cm = ConfigMap {
        metadata: meta(name, namespace),
        binary_data: Some(BTreeMap::from([(
            CONFIGMAP_KEY.to_owned(),
            ByteString(binary),
        )])),
        ..Default::default()
    };
    doc("v1", "ConfigMap", &cm)
}

/// Who may reach the shim port of a worker's step pods, besides the worker's own step pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShimPeers {
    /// Labels the operator puts on the controller's pods; empty admits no pod by label.
    pub controller_labels: BTreeMap<String, String>,
    /// Namespace of those pods when it is not the step pods' own.
    pub controller_namespace: Option<String>,
    /// Address blocks (CIDR) admitted as well: a controller outside the pod network, or the
    /// apiserver's addresses when shims are reached through `pods/proxy`.
    pub cidrs: Vec<String>,
    /// Other workers whose step pods pull from these (P2P between workers of one cluster).
    pub workers: Vec<PeerWorker>,
}

/// A worker whose step pods are admitted: by its worker label, in `namespace` or the policy's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerWorker {
    pub worker: String,
    pub namespace: Option<String>,
}

/// The namespace label Kubernetes sets on every namespace (1.21 and later).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The NetworkPolicy `name` for the step pods of `worker` in `namespace`: ingress to them only on
/// the shim port, from `peers`, from the worker's own step pods and from the step pods of the peer
/// workers. Egress is left open.
pub fn network_policy(
    name: &str,
    namespace: &str,
    worker: &str,
    peers: &ShimPeers,
) -> NetworkPolicy {
    let worker_pods = selector(WORKER_LABEL, &label_value(worker));
    let in_namespace =
        |ns: &Option<String>| ns.as_ref().map(|ns| selector(NAMESPACE_NAME_LABEL, ns));
    let mut from = Vec::new();
    if !peers.controller_labels.is_empty() {
        from.push(NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(peers.controller_labels.clone()),
                ..Default::default()
            }),
            namespace_selector: in_namespace(&peers.controller_namespace),
            ..Default::default()
        });
    }
    from.extend(peers.cidrs.iter().map(|cidr| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.clone(),
            except: None,
        }),
        ..Default::default()
    }));
    from.push(NetworkPolicyPeer {
        pod_selector: Some(worker_pods.clone()),
        ..Default::default()
    });
    from.extend(peers.workers.iter().map(|w| NetworkPolicyPeer {
        pod_selector: Some(selector(WORKER_LABEL, &label_value(&w.worker))),
        namespace_selector: in_namespace(&w.namespace),
        ..Default::default()
    }));
    NetworkPolicy {
        metadata: meta(name, namespace),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(worker_pods),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(from),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(SHIM_PORT.into())),
                    protocol: Some("TCP".into()),
                    end_port: None,
                }]),
            }]),
            egress: None,
        }),
    }
}

/// The selector of one label `key=value`.
fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
        ..Default::default()
    }
}

/// The forwarder's DaemonSet as a YAML document.
pub fn forwarder_yaml(f: &forwarder::Forwarder) -> Result<String, serde_norway::Error> {
    doc("apps/v1", "DaemonSet", &forwarder::daemon_set(f))
}

/// [`network_policy`] as a YAML document.
pub fn network_policy_yaml(
    name: &str,
    namespace: &str,
    worker: &str,
    peers: &ShimPeers,
) -> Result<String, serde_norway::Error> {
    doc(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        &network_policy(name, namespace, worker, peers),
    )
}

fn doc<T: serde::Serialize>(
    api_version: &str,
    kind: &str,
    obj: &T,
) -> Result<String, serde_norway::Error> {
    let mut v = serde_norway::to_value(obj)?;
    if let serde_norway::Value::Mapping(m) = &mut v {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
    }
    serde_norway::to_string(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rbac_grants_pod_lifecycle_and_nothing_of_exec() {
        let y = rbac("ci-worker", "steps").unwrap();
        assert_eq!(
            y.matches("kind: ").count(),
            5,
            "three objects, the roleRef and the subject"
        );
        assert!(
            y.contains("kind: Role\n")
                && y.contains("kind: RoleBinding")
                && y.contains("kind: ServiceAccount")
        );
        for verb in ["get", "list", "watch", "create", "delete"] {
            assert!(y.contains(&format!("- {verb}")), "{verb}");
        }
        for forbidden in [
            "pods/exec",
            "pods/attach",
            "pods/portforward",
            "'*'",
            "deletecollection",
        ] {
            assert!(!y.contains(forbidden), "{forbidden} must not be granted");
        }
        assert!(!y.contains("pods/proxy"), "only with --via proxy");
        let (plain, proxied) = (rules(false), rules(true));
        assert_eq!(proxied[..plain.len()], plain[..], "the same rules first");
        assert_eq!(proxied.len(), plain.len() + 1, "exactly one more rule");
        let rule = &proxied[plain.len()];
        assert_eq!(rule.api_groups.as_deref(), Some(&[String::new()][..]));
        assert_eq!(
            rule.resources.as_deref(),
            Some(&["pods/proxy".to_owned()][..])
        );
        assert_eq!(rule.verbs, ["get", "create", "update", "delete"]);
        assert!(
            rbac_for("ci-worker", "steps", true)
                .unwrap()
                .contains("- pods/proxy")
        );
        let policies = plain
            .iter()
            .find(|r| r.resources.as_deref() == Some(&["networkpolicies".to_owned()][..]))
            .expect("a networkpolicies rule");
        assert_eq!(
            policies.api_groups.as_deref(),
            Some(&["networking.k8s.io".to_owned()][..])
        );
        assert_eq!(policies.verbs, ["list", "create", "patch", "delete"]);
        let names: Vec<_> = plain
            .iter()
            .map(|r| r.resources.as_deref().unwrap_or_default()[0].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "pods",
                "configmaps",
                "secrets",
                "persistentvolumeclaims",
                "networkpolicies"
            ]
        );
        let claims = &plain[3];
        assert_eq!(claims.api_groups.as_deref(), Some(&[String::new()][..]));
        assert_eq!(claims.verbs, ["get", "create", "delete"]);
        let cm = shim_configmap("stepshim", "steps", vec![0, 1, 2, 255]).unwrap();
        assert!(cm.contains("binaryData") && cm.contains("stepshim: AAEC/w=="));
    }
}
