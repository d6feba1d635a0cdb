//! Builds a step pod: the user's image with `stepshim` as PID 1 of its main container, the shim
//! delivered by an init container (copying it out of the shim image into an emptyDir) or by a
//! ConfigMap, a `/healthz` readiness probe, and the pod's labels, resources and security settings,
//! the CA bundle of a ConfigMap at `/etc/ssl/certs`, and the label of a hermetic pod (its
//! NetworkPolicy is [`crate::hermetic`]'s).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ConfigMapVolumeSource, ImageVolumeSource, LocalObjectReference, NodeAffinity,
    NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSecurityContext, PodSpec,
    PreferredSchedulingTerm, Toleration, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use protocol::settings;

use container::{delivery, main_container};

/// The label every pod of a worker carries; GC and the watcher select on it.
pub const WORKER_LABEL: &str = "org.concourse-ci.worker";
/// The label, valued with the pod's name, of a hermetic pod and of its policy: the policy selects
/// the pod by it and gc lists the policies by it.
pub const HERMETIC_LABEL: &str = "stepshim.dev/hermetic";
/// Label and annotation naming the build.
pub const BUILD_LABEL: &str = "org.concourse-ci.build";
/// Label and annotation naming the step.
pub const STEP_LABEL: &str = "org.concourse-ci.step";
/// Port the shim serves on inside the pod.
pub const SHIM_PORT: u16 = settings::PORT;
/// Where the shim binary is mounted in the main container.
pub const SHIM_DIR: &str = "/.stepshim";
/// The step's container, where the shim is PID 1.
pub const MAIN_CONTAINER: &str = "step";
/// Key of the shim binary in the shim ConfigMap.
pub const CONFIGMAP_KEY: &str = "stepshim";
/// Where [`StepSpec::certs_configmap`] is mounted, read-only, in the main container.
pub const CERTS_DIR: &str = "/etc/ssl/certs";
/// The name of that volume.
pub const CERTS_VOLUME: &str = "certs";

/// How the shim binary reaches the main container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// An init container from this image runs `/stepshim install` into an emptyDir.
    InitContainer {
        /// The shim image (`FROM scratch` plus `/stepshim`).
        image: String,
    },
    /// A ConfigMap holding the binary under the key `stepshim` (see `stepctl manifests`).
    ConfigMap {
        /// The ConfigMap's name.
        name: String,
    },
}

/// What a step pod looks like.
#[derive(Debug, Clone)]
pub struct StepSpec {
    /// Pod name (DNS label).
    pub name: String,
    /// The step's image.
    pub image: String,
    /// Build that owns the step, if any.
    pub build: Option<String>,
    /// Step name, if any.
    pub step: Option<String>,
    /// Environment of the main container; every process inherits it.
    pub env: Vec<(String, String)>,
    /// CPU request and limit, e.g. `500m`.
    pub cpu: Option<String>,
    /// CPU request without a limit (no CFS quota), e.g. `100m`: a weight, as Garden's CPU shares,
    /// never a cap. Ignored when `cpu` is set (`stepctl run` refuses both). A pod with a request is
    /// Burstable, so its cgroup gets `cpu.shares` in proportion to the request instead of
    /// BestEffort's 2.
    pub cpu_request: Option<String>,
    /// Memory request and limit, e.g. `1Gi`.
    pub memory: Option<String>,
    /// User id of the main container (the shim and, by default, every process).
    pub run_as_user: Option<i64>,
    /// Group id of the main container.
    pub run_as_group: Option<i64>,
    /// Privileged main container.
    pub privileged: bool,
    /// Node selector.
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Nodes the scheduler should prefer, the first the most (where the step's inputs or image
    /// already are): a preferred node affinity, never a requirement.
    pub preferred_nodes: Vec<String>,
    /// Service account, if the step needs one.
    pub service_account: Option<String>,
    /// Mount the service account token (off by default: steps should not talk to the cluster).
    pub automount_service_account_token: bool,
    /// Image pull policy of the step image (`IfNotPresent` when unset).
    pub image_pull_policy: Option<String>,
    /// Secrets of registry credentials for the step image and the image volumes
    /// (`imagePullSecrets`).
    pub image_pull_secrets: Vec<String>,
    /// Images mounted read-only into the main container, as volumes `image-0`, `image-1`, ...
    pub image_volumes: Vec<ImageMount>,
    /// Cut the pod off the network: [`crate::runtime::Runtime::create_pod`] first creates the
    /// pod's own NetworkPolicy ([`crate::hermetic`]), which the pod then owns, denying all egress
    /// but to the shim port of the worker's pods. The pod carries the label
    /// [`HERMETIC_LABEL`] with its name, which must be a label value.
    pub hermetic: bool,
    /// A ConfigMap mounted read-only at `/etc/ssl/certs` of the main container in place of the
    /// image's directory (the worker's CA bundle).
    pub certs_configmap: Option<String>,
    /// Shim delivery.
    pub delivery: Delivery,
    /// Whether the shim serves TLS (PROTOCOL.md 1.1): on by default with an init container
    /// (the image carries `/stepshim-tls`), off with a ConfigMap (it holds the plain build). The
    /// runtime derives the key's seed from the pod token for a pod that serves TLS.
    pub tls: bool,
}

impl StepSpec {
    /// A spec with defaults for everything but name, image and delivery.
    pub fn new(name: impl Into<String>, image: impl Into<String>, delivery: Delivery) -> Self {
        StepSpec {
            name: name.into(),
            image: image.into(),
            build: None,
            step: None,
            env: Vec::new(),
            cpu: None,
            cpu_request: None,
            memory: None,
            run_as_user: None,
            run_as_group: None,
            privileged: false,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            preferred_nodes: Vec::new(),
            service_account: None,
            automount_service_account_token: false,
            image_pull_policy: None,
            image_pull_secrets: Vec::new(),
            image_volumes: Vec::new(),
            hermetic: false,
            certs_configmap: None,
            tls: matches!(delivery, Delivery::InitContainer { .. }),
            delivery,
        }
    }
}

/// An image mounted as a volume of a step pod (`volumes[].image`, Kubernetes 1.35).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMount {
    /// The image's reference, pulled `IfNotPresent` with the pod's `imagePullSecrets`.
    pub reference: String,
    /// Where the main container sees its files, read-only.
    pub mount_path: String,
}

/// The name of the volume of `spec.image_volumes[i]`.
pub fn image_volume_name(i: usize) -> String {
    format!("image-{i}")
}

/// A label value from free text: at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at the ends.
pub fn label_value(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    cleaned
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Whether pod `pod`'s shim serves TLS: its main container's environment has the seed.
pub fn serves_tls(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter(|c| c.name == MAIN_CONTAINER)
        .flat_map(|c| c.env.iter().flatten())
        .any(|e| e.name == settings::TLS_SEED)
}

/// The pod for `spec`, owned by `worker`, whose shim accepts the token hashing to `token_sha256`
/// and, given `tls_seed` (hex, PROTOCOL.md 1.1), serves TLS only with that seed's key: the init
/// container then installs `/stepshim-tls` and the readiness probe is a TCP connection.
pub fn build_pod(spec: &StepSpec, worker: &str, token_sha256: &str, tls_seed: Option<&str>) -> Pod {
    let (volume, init) = delivery(&spec.delivery, tls_seed.is_some());
    Pod {
        metadata: metadata(spec, worker),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(spec.automount_service_account_token),
            service_account_name: spec.service_account.clone(),
            // The shim TERMs its processes and waits its own grace (10 s) on SIGTERM.
            termination_grace_period_seconds: Some(15),
            enable_service_links: Some(false),
            init_containers: init.map(|c| vec![c]),
            containers: vec![main_container(spec, token_sha256, tls_seed)],
            volumes: Some(
                std::iter::once(volume)
                    .chain(spec.image_volumes.iter().enumerate().map(|(i, m)| Volume {
                        name: image_volume_name(i),
                        image: Some(ImageVolumeSource {
                            reference: Some(m.reference.clone()),
                            pull_policy: Some("IfNotPresent".into()),
                        }),
                        ..Default::default()
                    }))
                    .chain(spec.certs_configmap.iter().map(|name| Volume {
                        name: CERTS_VOLUME.into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: name.clone(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }))
                    .collect(),
            ),
            node_selector: (!spec.node_selector.is_empty()).then(|| spec.node_selector.clone()),
            tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
            affinity: prefer_nodes(&spec.preferred_nodes),
            security_context: Some(PodSecurityContext::default()),
            image_pull_secrets: (!spec.image_pull_secrets.is_empty()).then(|| {
                spec.image_pull_secrets
                    .iter()
                    .map(|name| LocalObjectReference { name: name.clone() })
                    .collect()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// A node affinity preferring `nodes`, the first with weight 100 and one less for each next (at
/// least 1); `None` for none.
fn prefer_nodes(nodes: &[String]) -> Option<Affinity> {
    if nodes.is_empty() {
        return None;
    }
    let terms = nodes
        .iter()
        .zip((1..=100).rev().chain(std::iter::repeat(1)))
        .map(|(node, weight)| PreferredSchedulingTerm {
            weight,
            preference: NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "kubernetes.io/hostname".into(),
                    operator: "In".into(),
                    values: Some(vec![node.clone()]),
                }]),
                match_fields: None,
            },
        })
        .collect();
    Some(Affinity {
        node_affinity: Some(NodeAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(terms),
            required_during_scheduling_ignored_during_execution: None,
        }),
        ..Default::default()
    })
}

/// Name, the worker's label, and the build and step as labels (cleaned) and annotations (as given).
fn metadata(spec: &StepSpec, worker: &str) -> ObjectMeta {
    let mut labels = BTreeMap::from([(WORKER_LABEL.to_owned(), label_value(worker))]);
    let mut annotations = BTreeMap::new();
    for (key, value) in [(BUILD_LABEL, &spec.build), (STEP_LABEL, &spec.step)] {
        if let Some(v) = value {
            labels.insert(key.to_owned(), label_value(v));
            annotations.insert(key.to_owned(), v.clone());
        }
    }
    if spec.hermetic {
        labels.insert(HERMETIC_LABEL.to_owned(), spec.name.clone());
    }
    ObjectMeta {
        name: Some(spec.name.clone()),
        labels: Some(labels),
        annotations: Some(annotations),
        ..Default::default()
    }
}

mod container;

#[cfg(test)]
mod tests;
