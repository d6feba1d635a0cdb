//! One target of the controller: a kubeconfig (or in-cluster service account), a namespace and a
//! worker name. Creates step pods, waits for them on the shared pod watch, hands out shim clients
//! with each pod's token (to the pod IP or through the apiserver, see [`crate::via`]), and deletes
//! pods. Pods are the only API objects it touches but the NetworkPolicies of hermetic pods
//! ([`crate::hermetic`]; the image-pull Secrets of images from step pods are
//! [`crate::image_source`]'s).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use thiserror::Error;

use crate::podspec::{self, SHIM_PORT, StepSpec, WORKER_LABEL};
pub use crate::progress::{Progress, failing_container, progress};
use crate::token::Key;
use crate::via::{self, ApiProxy, Via};
use crate::watch::{PodWatch, WatchError};
use client::{ClientError, ShimClient, TokenHeader};

pub(crate) mod policy;
mod ready;

/// What identifies a target.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// Kubeconfig file; `None` infers (`KUBECONFIG`, `~/.kube/config`, then in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the step pods.
    pub namespace: String,
    /// Worker name, the value of the `org.concourse-ci.worker` label.
    pub worker: String,
}

/// Errors of the runtime.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig was given and none could be inferred (`KUBECONFIG`, `~/.kube/config`, in-cluster).
    #[error("kubernetes configuration: {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// An API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The pod cache could not be filled.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The pod cannot start, with Kubernetes' own reason.
    #[error("pod {name} cannot start: {reason}{}: {message}", in_container(.container))]
    PodFailed {
        /// Pod name.
        name: String,
        /// Kubernetes' reason (`ErrImagePull`, `Unschedulable`, ...).
        reason: String,
        /// The container that cannot start and the image its spec names, when one is to blame.
        container: Option<(String, String)>,
        /// Kubernetes' message.
        message: String,
    },
    /// The pod was not ready in time; `last` says what it was waiting for.
    #[error("pod {name} not ready after {waited:?}: {last}")]
    Timeout {
        /// Pod name.
        name: String,
        /// How long we waited.
        waited: Duration,
        /// Its last known state.
        last: String,
    },
    /// No such pod of this worker.
    #[error("no pod {0} of this worker")]
    NotFound(String),
    /// A shim call failed.
    #[error(transparent)]
    Shim(#[from] ClientError),
    /// The step spec cannot make a pod.
    #[error("{0}")]
    BadSpec(String),
    /// A Kubernetes call on a hermetic pod's NetworkPolicy failed.
    #[error("network policy {name}: {source}")]
    Policy {
        /// The policy.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// ` (container C, image I)` for [`RuntimeError::PodFailed`], or nothing.
fn in_container(container: &Option<(String, String)>) -> String {
    container
        .as_ref()
        .map(|(c, image)| format!(" (container {c}, image {image})"))
        .unwrap_or_default()
}

/// `ip:port` of a pod's shim, IPv6 in brackets.
fn shim_addr(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{SHIM_PORT}")
    } else {
        format!("{ip}:{SHIM_PORT}")
    }
}

/// The runtime of one target.
pub struct Runtime {
    /// The Kubernetes client (for health checks and extra calls).
    pub client: Client,
    /// Namespace of the step pods.
    pub namespace: String,
    /// Worker name.
    pub worker: String,
    key: Key,
    pods: Api<Pod>,
    watch: PodWatch,
    proxy: Arc<ApiProxy>,
    via: Via,
    probe: Duration,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("namespace", &self.namespace)
            .field("worker", &self.worker)
            .finish()
    }
}

/// A client for a target's kubeconfig.
pub async fn kube_client(kubeconfig: Option<&std::path::Path>) -> Result<Client, RuntimeError> {
    Client::try_from(kube_config(kubeconfig).await?).map_err(RuntimeError::Kube)
}

/// The configuration a target's kubeconfig (or the inferred one) describes.
pub async fn kube_config(kubeconfig: Option<&std::path::Path>) -> Result<Config, RuntimeError> {
    Ok(match kubeconfig {
        Some(path) => {
            let bad = |source| RuntimeError::Kubeconfig {
                path: path.to_owned(),
                source,
            };
            let kc = Kubeconfig::read_from(path).map_err(bad)?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(bad)?
        }
        None => Config::infer().await.map_err(RuntimeError::Infer)?,
    })
}

impl Runtime {
    /// Connects to a target and fills the pod cache.
    pub async fn connect(target: &TargetConfig, key: Key) -> Result<Self, RuntimeError> {
        let config = kube_config(target.kubeconfig.as_deref()).await?;
        let proxy = Arc::new(ApiProxy::new(&config)?);
        let client = Client::try_from(config)?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &target.namespace);
        let selector = format!("{WORKER_LABEL}={}", podspec::label_value(&target.worker));
        let watch = PodWatch::start(
            pods.clone(),
            &target.namespace,
            &selector,
            Duration::from_secs(30),
        )
        .await?;
        Ok(Runtime {
            client,
            namespace: target.namespace.clone(),
            worker: target.worker.clone(),
            key,
            pods,
            watch,
            proxy,
            via: Via::Direct,
            probe: Duration::from_secs(1),
        })
    }

    /// The same runtime reaching shims `via` that way; `probe` bounds the connection attempt to the
    /// pod IP with which [`Via::Auto`] decides.
    pub fn with_via(mut self, via: Via, probe: Duration) -> Self {
        self.via = via;
        self.probe = probe;
        self
    }

    /// How this runtime reaches shims.
    pub fn via(&self) -> Via {
        self.via
    }

    /// The bearer token of one of this target's pods.
    pub fn token(&self, pod: &str) -> String {
        self.key.token(&self.namespace, pod)
    }

    /// Creates the step pod for `spec`.
    pub async fn create(&self, spec: &StepSpec) -> Result<(), RuntimeError> {
        self.create_pod(spec).await.map(|_| ())
    }

    /// Creates the step pod for `spec` and returns it as the apiserver made it (with its UID). A
    /// hermetic pod's NetworkPolicy comes first ([`hermetic`]): a pod that cannot be created takes
    /// it along, and a pod created becomes its owner.
    pub async fn create_pod(&self, spec: &StepSpec) -> Result<Pod, RuntimeError> {
        let token = self.token(&spec.name);
        let hash = protocol::token::sha256_hex(&token);
        let seed = spec.tls.then(|| client::Seed::for_token(&token).to_hex());
        let pod = podspec::build_pod(spec, &self.worker, &hash, seed.as_deref());
        if !spec.hermetic {
            return Ok(self.pods.create(&PostParams::default(), &pod).await?);
        }
        policy::create(self, spec, &self.pods).await?;
        match self.pods.create(&PostParams::default(), &pod).await {
            Ok(created) => {
                let uid = created.metadata.uid.clone().unwrap_or_default();
                policy::own(self, &spec.name, &uid).await;
                Ok(created)
            }
            Err(e) => {
                // A pod of that name already there may be the policy's: leave the policy to gc.
                if !matches!(&e, kube::Error::Api(a) if a.code == 409) {
                    let _ = policy::delete(self, &crate::hermetic::policy_name(&spec.name)).await;
                }
                Err(e.into())
            }
        }
    }

    /// The cached pod `name` of this worker.
    pub fn pod(&self, name: &str) -> Option<Arc<Pod>> {
        self.watch.get(name)
    }

    /// The TLS pin of pod `name`'s shim (when it serves TLS), derived from its token.
    pub fn pin(&self, name: &str) -> client::Pin {
        client::Seed::for_token(&self.token(name)).pin()
    }

    /// Whether the shim of pod `name` serves TLS, by the cached pod's spec (PROTOCOL.md 1.1).
    fn serves_tls(&self, name: &str) -> bool {
        self.watch
            .get(name)
            .is_some_and(|pod| podspec::serves_tls(&pod))
    }

    /// A client for the shim of pod `name` at `ip`, straight to the pod IP: over TLS with the key
    /// derived from the pod's token pinned when the pod serves TLS.
    pub fn shim_at(&self, name: &str, ip: &str) -> Result<ShimClient, RuntimeError> {
        let token = self.token(name);
        let addr = shim_addr(ip);
        Ok(if self.serves_tls(name) {
            let pin = client::Seed::for_token(&token).pin();
            ShimClient::new_pinned(&format!("https://{addr}"), Some(token), pin)?
        } else {
            ShimClient::new(&format!("http://{addr}"), Some(token))?
        })
    }

    /// A client for the shim of pod `name` through the apiserver's `pods/proxy` (its `https:`
    /// form when the pod serves TLS).
    pub fn shim_proxy(&self, name: &str) -> Result<ShimClient, RuntimeError> {
        Ok(ShimClient::with_transport(
            &via::proxy_base(&self.namespace, name, self.serves_tls(name)),
            Some(self.token(name)),
            TokenHeader::Proxy,
            self.proxy.clone(),
        )?)
    }

    /// A client for the shim of pod `name` at `ip` the way this runtime is set to reach shims;
    /// [`Via::Auto`] takes the pod IP if it accepts a connection within the probe timeout. The shim
    /// has been asked its protocol version once, and one of another version is refused
    /// ([`ClientError::Incompatible`], `docs/compatibility.md`).
    pub async fn shim_via(&self, name: &str, ip: &str) -> Result<ShimClient, RuntimeError> {
        let shim = self.shim_via_unchecked(name, ip).await?;
        shim.check_protocol().await?;
        Ok(shim)
    }

    async fn shim_via_unchecked(&self, name: &str, ip: &str) -> Result<ShimClient, RuntimeError> {
        let direct = match self.via {
            Via::Direct => true,
            Via::Proxy => false,
            Via::Auto => match shim_addr(ip).parse() {
                Ok(addr) => via::answers(addr, self.probe).await,
                Err(_) => false,
            },
        };
        if direct {
            self.shim_at(name, ip)
        } else {
            tracing::debug!(pod = name, "reaching the shim through the apiserver");
            self.shim_proxy(name)
        }
    }

    /// A client for the shim of the cached pod `name`, the way this runtime reaches shims, its
    /// protocol version checked as [`Runtime::shim_via`] does.
    pub async fn shim(&self, name: &str) -> Result<ShimClient, RuntimeError> {
        let pod = self
            .watch
            .get(name)
            .ok_or_else(|| RuntimeError::NotFound(name.to_owned()))?;
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        let shim = match (ip, self.via) {
            (_, Via::Proxy) => self.shim_proxy(name)?,
            (Some(ip), _) => self.shim_via_unchecked(name, &ip).await?,
            (None, _) => return Err(RuntimeError::NotFound(name.to_owned())),
        };
        shim.check_protocol().await?;
        Ok(shim)
    }

    /// Deletes pod `name`; a pod already gone is not an error.
    pub async fn delete(&self, name: &str) -> Result<(), RuntimeError> {
        match self.pods.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes pod `name` without a grace period: a pod on a lost node, whose kubelet cannot end it
    /// (it kills what is left when it comes back). A pod already gone is not an error.
    pub async fn delete_now(&self, name: &str) -> Result<(), RuntimeError> {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        match self.pods.delete(name, &now).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits (up to `timeout`) until pod `name` is being taken away by someone else: evicted (a
    /// drain, the taint manager, preemption: its `DisruptionTarget` condition's reason and message)
    /// or deleted; `None` if that does not happen in time.
    pub async fn disrupted(&self, name: &str, timeout: Duration) -> Option<String> {
        self.watch
            .wait_for(name, timeout, |pod| {
                // Gone already: its last state may still say why.
                let departed = pod.is_none().then(|| self.watch.departed(name)).flatten();
                let pod = pod.or(departed.as_deref())?;
                let cond = pod.status.as_ref()?.conditions.as_ref().and_then(|cs| {
                    cs.iter()
                        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
                });
                match cond {
                    Some(c) => Some(format!(
                        "{}: {}",
                        c.reason.as_deref().unwrap_or("Disrupted"),
                        c.message.as_deref().unwrap_or("")
                    )),
                    None => pod
                        .metadata
                        .deletion_timestamp
                        .as_ref()
                        .map(|_| "Deleted: the pod is being deleted".to_owned()),
                }
            })
            .await
    }

    /// The node pod `name` is bound to, from the cache.
    pub fn node_of(&self, name: &str) -> Option<String> {
        self.watch
            .get(name)
            .and_then(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
    }

    /// Every pod of this worker, from the cache.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.watch.list()
    }

    /// The names of this worker's pods, from the cache: what gc keeps a pod's Secret or policy for.
    pub fn pod_names(&self) -> std::collections::HashSet<String> {
        self.pods()
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    }

    /// Waits until pod `name` is gone from the cache, up to `timeout`; true if it is.
    pub async fn wait_gone(&self, name: &str, timeout: Duration) -> bool {
        self.watch
            .wait_for(name, timeout, |p| p.is_none().then_some(()))
            .await
            .is_some()
    }
}
