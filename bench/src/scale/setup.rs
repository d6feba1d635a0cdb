//! The scale benchmark's scene on the cluster, and its removal: a namespace of its own, the worker's
//! service account with exactly `stepctl manifests`' pod verbs and a kubeconfig holding its token,
//! the FlowSchemas that count its requests (see `requests`), and thousands of step pods that stay
//! Pending without any component touching them again.
//!
//! A pod stays Pending untouched when no scheduler claims it: `schedulerName` names a scheduler that
//! does not run, so kube-scheduler never binds it (and writes no `PodScheduled` condition), no kubelet
//! sees it, and the pod GC leaves unbound pods alone. Being unbound, it is deleted at once (no
//! graceful termination), so a deletion reaches the worker's watch as one event. The node selector
//! `kubernetes.io/hostname: nowhere` is a second guard should a scheduler claim every name.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::TryStreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::proxy::Proxy;
use super::requests::CLASSES;
use controller::manifests::POD_VERBS;
use controller::podspec::{Delivery, StepSpec, build_pod};
use controller::token::Key;

/// The scheduler no one runs.
pub const NO_SCHEDULER: &str = "stepshim-scale-none";
/// The worker's name (and service account's).
pub const WORKER: &str = "scale";
/// Name prefix of the desired pods.
pub const PREFIX: &str = "scale-";

/// What was created; `teardown` removes it.
pub struct Scene {
    /// Admin client.
    pub client: Client,
    /// Namespace.
    pub namespace: String,
    /// The worker's kubeconfig file.
    pub kubeconfig: PathBuf,
    /// The worker's key file.
    pub key_file: PathBuf,
    /// The key, for the pods' token hashes.
    pub key: Key,
    /// Prefix of the FlowSchema names, `<namespace>`.
    pub schema_prefix: String,
    /// The counting proxy the drivers reach the apiserver through.
    pub proxy: Proxy,
}

impl std::fmt::Debug for Scene {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scene")
            .field("namespace", &self.namespace)
            .finish()
    }
}

fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).context("building an API object")
}

/// Fails if the namespace exists already (the benchmark deletes it at the end: never someone else's).
pub async fn check_free(client: &Client, namespace: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(namespace).await?.is_some() {
        bail!("namespace {namespace} exists (an earlier run?): delete it first");
    }
    Ok(())
}

/// Creates the namespace, the worker's account, kubeconfig (to the apiserver through `proxy`) and
/// key, and the FlowSchemas. On error, the caller runs `teardown`.
pub async fn scene(client: Client, proxy: Proxy, namespace: &str, dir: &Path) -> Result<Scene> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": namespace}}))?,
        )
        .await?;
    let pp = PostParams::default();
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    crate::access::wait_default_service_account(&client, namespace).await?;
    sa.create(&pp, &obj(json!({"metadata": {"name": WORKER}}))?)
        .await?;
    let role = json!({"metadata": {"name": WORKER},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": POD_VERBS}]});
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(&pp, &obj(role)?)
        .await?;
    let binding = json!({"metadata": {"name": WORKER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": WORKER},
        "subjects": [{"kind": "ServiceAccount", "name": WORKER, "namespace": namespace}]});
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(&pp, &obj(binding)?)
        .await?;
    let schemas: Api<FlowSchema> = Api::all(client.clone());
    for (i, class) in CLASSES.iter().enumerate() {
        let rule = match *class {
            "other" => json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                "namespaces": ["*"], "clusterScope": true}),
            verb => json!({"verbs": [verb], "apiGroups": [""], "resources": ["pods"],
                "namespaces": [namespace]}),
        };
        let fs = json!({"metadata": {"name": format!("{namespace}-{class}")}, "spec": {
        "priorityLevelConfiguration": {"name": "workload-low"},
        "matchingPrecedence": 1000 + i,
        "rules": [{
            "subjects": [{"kind": "ServiceAccount",
                "serviceAccount": {"name": WORKER, "namespace": namespace}}],
            "resourceRules": [rule],
            "nonResourceRules": if *class == "other" {
                json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}])
            } else { json!([]) },
        }]}});
        schemas.create(&pp, &obj(fs)?).await?;
    }
    wait_schemas_seen(&schemas, namespace).await?;
    let token = sa
        .create_token_request(
            WORKER,
            &pp,
            &TokenRequest {
                spec: TokenRequestSpec {
                    audiences: Vec::new(),
                    expiration_seconds: Some(3 * 3600),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?
        .status
        .context("token request without a status")?
        .token;
    let kubeconfig = dir.join("worker.kubeconfig");
    write_kubeconfig(proxy.port, &kubeconfig, namespace, &token)?;
    let bytes = rand::random::<[u8; 32]>();
    let key_file = dir.join("key");
    std::fs::write(&key_file, bytes)?;
    let key = Key::from_bytes(bytes.to_vec()).map_err(|n| anyhow::anyhow!("key of {n} bytes"))?;
    Ok(Scene {
        client,
        namespace: namespace.to_owned(),
        kubeconfig,
        key_file,
        key,
        schema_prefix: namespace.to_owned(),
        proxy,
    })
}

/// APF's configuration controller marks each FlowSchema it has taken in with a `Dangling`
/// condition; requests are classified by it only from then on.
async fn wait_schemas_seen(schemas: &Api<FlowSchema>, namespace: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for class in CLASSES {
        let name = format!("{namespace}-{class}");
        loop {
            let fs = schemas.get(&name).await?;
            let seen = fs
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_.as_deref() == Some("Dangling")));
            if seen {
                break;
            }
            if Instant::now() > deadline {
                bail!("FlowSchema {name} not taken in by the apiserver within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// A kubeconfig for the counting proxy on `port` with the worker's token as its user.
fn write_kubeconfig(port: u16, out: &Path, namespace: &str, token: &str) -> Result<()> {
    let doc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "proxy", "cluster": {"server": format!("http://127.0.0.1:{port}")}}],
        "users": [{"name": WORKER, "user": {"token": token}}],
        "contexts": [{"name": WORKER, "context": {"cluster": "proxy", "user": WORKER, "namespace": namespace}}],
        "current-context": WORKER,
    });
    // JSON is YAML: both clients read it.
    std::fs::write(out, serde_json::to_vec_pretty(&doc)?)?;
    Ok(())
}

impl Scene {
    /// The pending step pod `name` of the worker.
    pub fn pod(&self, name: &str) -> Pod {
        let mut spec = StepSpec::new(
            name,
            "stepshim.local/step:dev",
            Delivery::InitContainer {
                image: "stepshim.local/stepshim:dev".into(),
            },
        );
        spec.build = Some("scale".into());
        spec.step = Some("task".into());
        spec.node_selector
            .insert("kubernetes.io/hostname".into(), "nowhere".into());
        let token = self.key.token(&self.namespace, name);
        let hash = protocol::token::sha256_hex(&token);
        let seed = client::Seed::for_token(&token).to_hex();
        let mut pod = build_pod(&spec, WORKER, &hash, Some(&seed));
        if let Some(s) = pod.spec.as_mut() {
            s.scheduler_name = Some(NO_SCHEDULER.into());
        }
        pod
    }

    /// Creates `names` with at most `parallel` creations in flight; returns the seconds it took.
    pub async fn create(&self, names: Vec<String>, parallel: usize) -> Result<f64> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let started = Instant::now();
        let total = names.len();
        let done = std::sync::atomic::AtomicUsize::new(0);
        futures_util::stream::iter(names.into_iter().map(Ok::<_, anyhow::Error>))
            .try_for_each_concurrent(parallel.max(1), |name| {
                let (api, done) = (&api, &done);
                async move {
                    let pod = self.pod(&name);
                    api.create(&PostParams::default(), &pod)
                        .await
                        .with_context(|| format!("creating {name}"))?;
                    let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    if n % 1000 == 0 {
                        eprintln!("scale: {n} of {total} pods created");
                    }
                    Ok(())
                }
            })
            .await?;
        Ok(started.elapsed().as_secs_f64())
    }

    /// Deletes pod `name` (admin client); returns when the apiserver answered.
    pub async fn delete(&self, name: &str) -> Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        api.delete(name, &DeleteParams::default()).await?;
        Ok(())
    }
}

/// Deletes the FlowSchemas and the namespace (with its pods), waiting up to 5 minutes for the
/// namespace to be gone so no pods are left to slow the apiserver for others.
pub async fn teardown(client: &Client, namespace: &str) -> Result<()> {
    let schemas: Api<FlowSchema> = Api::all(client.clone());
    for class in CLASSES {
        let _ = schemas
            .delete(&format!("{namespace}-{class}"), &DeleteParams::default())
            .await;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let started = Instant::now();
    // One DELETE for every pod: the namespace controller alone deletes them one by one at its
    // client's rate (about 20 a second), minutes for thousands.
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let _ = pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = namespaces.delete(namespace, &DeleteParams::default()).await;
    while namespaces.get_opt(namespace).await?.is_some() {
        if started.elapsed() > Duration::from_secs(300) {
            bail!("namespace {namespace} still there after 5 minutes");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "scale: namespace {namespace} deleted in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
