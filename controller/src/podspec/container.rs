//! The containers of a step pod: the main container running `stepshim` as PID 1 (its environment,
//! resources, probe and mounts) and the shim's delivery (the init container copying it out of the
//! shim image into an emptyDir, or the ConfigMap volume).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction,
    KeyToPath, Probe, ResourceRequirements, SecurityContext, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use protocol::settings;

use super::{
    CERTS_DIR, CERTS_VOLUME, CONFIGMAP_KEY, Delivery, MAIN_CONTAINER, SHIM_DIR, SHIM_PORT,
    StepSpec, image_volume_name,
};

/// The `stepshim` volume, and the init container that fills it when the shim comes from an image.
pub(super) fn delivery(delivery: &Delivery, tls: bool) -> (Volume, Option<Container>) {
    match delivery {
        Delivery::InitContainer { image } => (
            Volume {
                name: "stepshim".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
            Some(Container {
                name: "stepshim-install".into(),
                image: Some(image.clone()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec![
                    if tls { "/stepshim-tls" } else { "/stepshim" }.into(),
                    "install".into(),
                    format!("{SHIM_DIR}/stepshim"),
                ]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "stepshim".into(),
                    mount_path: SHIM_DIR.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        ),
        Delivery::ConfigMap { name } => (
            Volume {
                name: "stepshim".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: name.clone(),
                    items: Some(vec![KeyToPath {
                        key: CONFIGMAP_KEY.into(),
                        path: "stepshim".into(),
                        mode: Some(0o555),
                    }]),
                    default_mode: Some(0o555),
                    ..Default::default()
                }),
                ..Default::default()
            },
            None,
        ),
    }
}

/// The shim's own settings (token hash, listen address), then the step's environment.
fn environment(spec: &StepSpec, token_sha256: &str, tls_seed: Option<&str>) -> Vec<EnvVar> {
    let mut env = vec![EnvVar {
        name: settings::TOKEN_SHA256.into(),
        value: Some(token_sha256.into()),
        ..Default::default()
    }];
    env.extend(tls_seed.map(|seed| EnvVar {
        name: settings::TLS_SEED.into(),
        value: Some(seed.into()),
        ..Default::default()
    }));
    env.extend([EnvVar {
        name: settings::LISTEN.into(),
        value: Some(format!("0.0.0.0:{SHIM_PORT}")),
        ..Default::default()
    }]);
    env.extend(spec.env.iter().map(|(k, v)| EnvVar {
        name: k.clone(),
        value: Some(v.clone()),
        ..Default::default()
    }));
    env
}

/// Requests and limits: `cpu` and `memory` are both; `cpu_request` (without `cpu`) a request only.
fn resources(spec: &StepSpec) -> Option<ResourceRequirements> {
    let request_only = spec.cpu_request.as_ref().filter(|_| spec.cpu.is_none());
    if spec.cpu.is_none() && spec.memory.is_none() && request_only.is_none() {
        return None;
    }
    let mut q = BTreeMap::new();
    if let Some(c) = &spec.cpu {
        q.insert("cpu".to_owned(), Quantity(c.clone()));
    }
    if let Some(m) = &spec.memory {
        q.insert("memory".to_owned(), Quantity(m.clone()));
    }
    let mut requests = q.clone();
    if let Some(c) = request_only {
        requests.insert("cpu".to_owned(), Quantity(c.clone()));
    }
    Some(ResourceRequirements {
        requests: Some(requests),
        limits: (!q.is_empty()).then_some(q),
        ..Default::default()
    })
}

/// The step's container: its image with the shim as PID 1, the port, the readiness probe, and the
/// shim mounted read-only.
pub(super) fn main_container(
    spec: &StepSpec,
    token_sha256: &str,
    tls_seed: Option<&str>,
) -> Container {
    Container {
        name: MAIN_CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(
            spec.image_pull_policy
                .clone()
                .unwrap_or_else(|| "IfNotPresent".into()),
        ),
        command: Some(vec![format!("{SHIM_DIR}/stepshim")]),
        env: Some(environment(spec, token_sha256, tls_seed)),
        ports: Some(vec![ContainerPort {
            name: Some("stepshim".into()),
            container_port: SHIM_PORT.into(),
            ..Default::default()
        }]),
        readiness_probe: Some(readiness(tls_seed.is_some())),
        security_context: Some(SecurityContext {
            privileged: Some(spec.privileged),
            run_as_user: spec.run_as_user,
            run_as_group: spec.run_as_group,
            ..Default::default()
        }),
        resources: resources(spec),
        volume_mounts: Some(
            std::iter::once(VolumeMount {
                name: "stepshim".into(),
                mount_path: SHIM_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            })
            .chain(
                spec.image_volumes
                    .iter()
                    .enumerate()
                    .map(|(i, m)| VolumeMount {
                        name: image_volume_name(i),
                        mount_path: m.mount_path.clone(),
                        read_only: Some(true),
                        ..Default::default()
                    }),
            )
            .chain(spec.certs_configmap.iter().map(|_| VolumeMount {
                name: CERTS_VOLUME.into(),
                mount_path: CERTS_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            }))
            .collect(),
        ),
        ..Default::default()
    }
}

/// The readiness probe, every second: `GET /healthz` for a plain-HTTP shim; a TCP connection for a
/// TLS shim, whose HTTPS probe would cost a full handshake a second (about 1.1 ms of CPU between
/// the kubelet and the shim against 0.1 ms, `results/tls`) and check no certificate anyway. The
/// shim listens only once it serves. stepctl and the Go kit wait on this probe only when they reach
/// shims through the apiserver; otherwise they ask the shim themselves (`runtime/ready.rs`).
fn readiness(tls: bool) -> Probe {
    let port = IntOrString::Int(SHIM_PORT.into());
    Probe {
        http_get: (!tls).then(|| HTTPGetAction {
            path: Some(settings::PROBE_PATH.into()),
            port: port.clone(),
            ..Default::default()
        }),
        tcp_socket: tls.then(|| TCPSocketAction {
            port,
            ..Default::default()
        }),
        period_seconds: Some(1),
        failure_threshold: Some(3),
        ..Default::default()
    }
}
