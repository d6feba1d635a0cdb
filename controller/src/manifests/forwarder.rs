//! The node-local forwarder's DaemonSet (`stepshim-forward`, docs/operator-guide.md): one pod per
//! node, every node (it tolerates every taint), on the host's network but listening on 127.0.0.1
//! only, so containerd pulls step images from `127.0.0.1:7779` with no registry configuration.
//! It runs as a non-root user with no capability, no privilege escalation, a read-only root and no
//! service account token: it holds no credentials and needs no RBAC.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, HTTPGetAction, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use protocol::forward as F;

/// The forwarder's path in the shim image.
pub const BINARY: &str = "/stepshim-forward";
/// The label its pods are selected by.
const NAME_LABEL: &str = "app.kubernetes.io/name";
/// The user it runs as (no account of the scratch image: any non-root id will do).
const USER: i64 = 65532;

/// What the DaemonSet is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarder {
    /// Name of the DaemonSet (and its pods' name label).
    pub name: String,
    /// Namespace it runs in.
    pub namespace: String,
    /// The shim image, which carries [`BINARY`].
    pub image: String,
    /// The pod networks (IPv4 CIDRs) sources may lie in: `STEPSHIM_FORWARD_ALLOW`.
    pub pod_cidrs: Vec<String>,
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// The DaemonSet.
pub fn daemon_set(f: &Forwarder) -> DaemonSet {
    let labels = BTreeMap::from([
        (NAME_LABEL.to_owned(), f.name.clone()),
        (
            "app.kubernetes.io/part-of".to_owned(),
            "stepshim".to_owned(),
        ),
    ]);
    let container = container(f);
    let pod = PodSpec {
        host_network: Some(true),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        // Every node pulls step images, tainted ones too.
        tolerations: Some(vec![Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }]),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(USER),
            run_as_group: Some(USER),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        containers: vec![container],
        ..Default::default()
    };
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(f.name.clone()),
            namespace: Some(f.namespace.clone()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(NAME_LABEL.to_owned(), f.name.clone())])),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The forwarder's container: loopback only, probed by the kubelet there, no capabilities, a
/// read-only root.
fn container(f: &Forwarder) -> Container {
    let env = |name: &str, value: String| EnvVar {
        name: name.to_owned(),
        value: Some(value),
        ..Default::default()
    };
    Container {
        name: "forward".into(),
        image: Some(f.image.clone()),
        command: Some(vec![BINARY.into()]),
        env: Some(vec![
            env(F::LISTEN, format!("127.0.0.1:{}", F::PORT)),
            env(F::ALLOW, f.pod_cidrs.join(",")),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("registry".into()),
            container_port: F::PORT.into(),
            host_port: Some(F::PORT.into()),
            host_ip: Some("127.0.0.1".into()),
            protocol: Some("TCP".into()),
        }]),
        // The probe comes from the kubelet, on the node: loopback reaches the forwarder.
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                host: Some("127.0.0.1".into()),
                path: Some(F::PROBE_PATH.into()),
                port: IntOrString::Int(F::PORT.into()),
                ..Default::default()
            }),
            period_seconds: Some(10),
            ..Default::default()
        }),
        // A pull streams through without buffering: memory stays a few MiB per connection.
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[("cpu", "50m"), ("memory", "32Mi")])),
            limits: Some(quantities(&[("cpu", "1"), ("memory", "256Mi")])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarder_runs_everywhere_on_loopback_with_nothing_granted() {
        let ds = daemon_set(&Forwarder {
            name: "stepshim-forward".into(),
            namespace: "stepshim-system".into(),
            image: "r/stepshim@sha256:00".into(),
            pod_cidrs: vec!["10.244.0.0/16".into(), "10.245.0.0/16".into()],
        });
        let pod = ds.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.host_network, Some(true));
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.service_account_name, None, "no account, no RBAC");
        let tol = &pod.tolerations.unwrap()[0];
        assert_eq!(
            (tol.operator.as_deref(), tol.key.as_deref()),
            (Some("Exists"), None)
        );
        assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
        let c = &pod.containers[0];
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop,
            Some(vec!["ALL".into()])
        );
        assert_eq!(sc.capabilities.as_ref().unwrap().add, None);
        let env: BTreeMap<_, _> = c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e.value.as_deref().unwrap()))
            .collect();
        assert_eq!(env[F::LISTEN], "127.0.0.1:7779");
        assert_eq!(env[F::ALLOW], "10.244.0.0/16,10.245.0.0/16");
        let probe = c
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(probe.host.as_deref(), Some("127.0.0.1"));
        assert_eq!(probe.path.as_deref(), Some("/healthz"));
        let r = c.resources.as_ref().unwrap();
        assert!(r.requests.is_some() && r.limits.as_ref().unwrap().contains_key("memory"));
        assert_eq!(c.command.as_deref(), Some(&[BINARY.to_owned()][..]));
    }
}
