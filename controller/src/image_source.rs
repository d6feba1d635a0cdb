//! Images from step pods, the I/O: a read grant on the source pod's shim for the image's
//! directory (a fresh random token, a ttl, no use limit), the image resolved to its digest with
//! that grant (`HEAD /v2/<name>/manifests/latest`), then the consuming pod created with the
//! reference as its image or as image volumes and one image-pull Secret holding the forwarder's
//! credentials for all of them, which the pod then owns
//! (Kubernetes deletes it with the pod; [`collect_secrets`] deletes those a controller that died in
//! between left). The pod's own token never leaves the controller: the Secret holds the grant's.
//! The pure part (names, references, the Secret) is [`crate::image`].

use std::collections::HashSet;
use std::time::Duration;

use client::{ClientError, ManifestHead, ShimClient};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use protocol::artifacts::GrantRequest;

use crate::image::{self, Credentials, IMAGE_FOR, ImageError, ImageFrom, ImageVolume};
use crate::podspec::{self, ImageMount, StepSpec, WORKER_LABEL};
use crate::runtime::{Runtime, RuntimeError};

/// Why an image from a step pod cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The argument, the name or the address cannot make a reference.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The source shim refused the grant or could not be reached.
    #[error("cannot make a grant for {path} on pod {pod}: {source}")]
    Grant {
        /// The source pod.
        pod: String,
        /// The directory.
        path: String,
        /// Why.
        #[source]
        source: ClientError,
    },
    /// The source shim does not serve the directory as an image.
    #[error("{pod}:{path} is not an image the shim serves: {why}")]
    Resolve {
        /// The source pod.
        pod: String,
        /// The directory.
        path: String,
        /// The shim's answer, one line.
        why: String,
    },
    /// The source pod has no address yet.
    #[error("pod {0} has no IP: it is not running")]
    NoAddress(String),
    /// Finding the source pod or reaching its shim failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A Kubernetes call on the Secret failed.
    #[error("image-pull secret {name}: {source}")]
    Secret {
        /// The Secret.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// A grant made for an image, and the image it resolved to.
#[derive(Debug, Clone)]
pub struct Granted {
    /// The grant's token (the registry password the forwarder presents).
    pub token: String,
    /// The grant's id on the source shim.
    pub grant_id: String,
    /// The image's manifest: its digest and media type.
    pub manifest: ManifestHead,
}

/// A fresh grant token: 32 random bytes in hex.
pub fn grant_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Makes a read grant for `from.path` on `shim` (the source pod's shim, with the pod's token) for
/// `ttl`, and resolves the image with it; the grant is revoked if the image does not resolve.
pub async fn grant_and_resolve(
    shim: &ShimClient,
    from: &ImageFrom,
    ttl: Duration,
) -> Result<Granted, SourceError> {
    from.name()?;
    let token = grant_token();
    let grant = shim
        .grant(&GrantRequest {
            path: from.path.clone(),
            token_sha256: protocol::token::sha256_hex(&token),
            ttl_seconds: ttl.as_secs().max(1),
            uses: None,
        })
        .await
        .map_err(|source| SourceError::Grant {
            pod: from.pod.clone(),
            path: from.path.clone(),
            source,
        })?;
    match resolve(&shim.with_grant_token(&token), from).await {
        Ok(manifest) => Ok(Granted {
            token,
            grant_id: grant.id,
            manifest,
        }),
        Err(e) => {
            let _ = shim.revoke_grant(&grant.id).await;
            Err(e)
        }
    }
}

/// `HEAD /v2/<name>/manifests/latest` on `shim`, a client presenting the grant token: the digest
/// to pin the image by, or the shim's refusal in one line.
pub async fn resolve(shim: &ShimClient, from: &ImageFrom) -> Result<ManifestHead, SourceError> {
    let name = from.name()?;
    shim.image_manifest(name, "latest")
        .await
        .map_err(|e| SourceError::Resolve {
            pod: from.pod.clone(),
            path: from.path.clone(),
            why: one_line(&e),
        })
}

/// A refusal as one line: the registry's message and code, or the client's own words.
fn one_line(e: &ClientError) -> String {
    let text = match e {
        ClientError::Api {
            status,
            wire_code,
            message,
            ..
        } if !wire_code.is_empty() => format!("{message} ({wire_code}, HTTP {status})"),
        other => other.to_string(),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An image of a step pod, granted and resolved, ready to be named by a consuming pod.
#[derive(Debug, Clone)]
pub struct SourceImage {
    /// Where it is.
    pub from: ImageFrom,
    /// `127.0.0.1:<port>/<source IP>/<name>@<digest>`.
    pub reference: String,
    /// The forwarder's port the reference names.
    pub port: u16,
    /// What the kubelet presents to the forwarder.
    pub credentials: Credentials,
    /// The grant's id on the source shim.
    pub grant_id: String,
    shim: ShimClient,
}

impl SourceImage {
    /// Revokes the grant, if the source shim can still be reached (else it expires by its ttl).
    pub async fn revoke(&self) -> Result<(), ClientError> {
        self.shim.revoke_grant(&self.grant_id).await
    }
}

/// Grants and resolves the image in `from` (a directory of one of the worker's pods) for pods that
/// pull it through the forwarder on `port`, the grant lasting `ttl`.
pub async fn prepare(
    rt: &Runtime,
    from: &ImageFrom,
    port: u16,
    ttl: Duration,
) -> Result<SourceImage, SourceError> {
    let name = from.name()?;
    let pod = rt
        .pod(&from.pod)
        .ok_or_else(|| RuntimeError::NotFound(from.pod.clone()))?;
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| SourceError::NoAddress(from.pod.clone()))?;
    // Refuse an address no reference can name before anything is granted.
    let zero = format!("sha256:{}", "0".repeat(64));
    image::reference(port, &from.pod, &ip, name, &zero)?;
    let shim = rt.shim(&from.pod).await?;
    let granted = grant_and_resolve(&shim, from, ttl).await?;
    let pin = podspec::serves_tls(&pod).then(|| rt.pin(&from.pod).to_string());
    Ok(SourceImage {
        from: from.clone(),
        reference: image::reference(port, &from.pod, &ip, name, &granted.manifest.digest)?,
        port,
        credentials: Credentials::new(pin.as_deref(), &granted.token),
        grant_id: granted.grant_id,
        shim,
    })
}

/// The images of one step pod from step pods: its own image and its image volumes (with their
/// mount paths), each granted and resolved once per source directory.
#[derive(Debug, Clone, Default)]
pub struct StepImages {
    /// The main container's image (`--image-from`).
    pub image: Option<SourceImage>,
    /// The images mounted read-only, and where (`--image-volume`).
    pub volumes: Vec<(SourceImage, String)>,
}

impl StepImages {
    /// Whether the pod names no image of a step pod.
    pub fn is_empty(&self) -> bool {
        self.image.is_none() && self.volumes.is_empty()
    }

    fn all(&self) -> impl Iterator<Item = &SourceImage> {
        self.image.iter().chain(self.volumes.iter().map(|(s, _)| s))
    }

    /// The pod's pull Secret's entries: each image's reference and credentials.
    fn entries(&self) -> Vec<(&str, &Credentials)> {
        self.all()
            .map(|s| (s.reference.as_str(), &s.credentials))
            .collect()
    }

    /// The image in `from`: one already granted, else granted and resolved now.
    async fn granted(
        &self,
        rt: &Runtime,
        from: &ImageFrom,
        port: u16,
        ttl: Duration,
    ) -> Result<SourceImage, SourceError> {
        match self.all().find(|s| s.from == *from) {
            Some(s) => Ok(s.clone()),
            None => prepare(rt, from, port, ttl).await,
        }
    }

    /// Revokes every grant once (a source shim that no longer answers lets it expire by its ttl).
    pub async fn revoke(&self) {
        let mut done = HashSet::new();
        for s in self.all() {
            if done.insert((s.from.pod.as_str(), s.grant_id.as_str()))
                && let Err(e) = s.revoke().await
            {
                tracing::debug!("revoking the image grant on {}: {e}", s.from.pod);
            }
        }
    }
}

/// Grants and resolves `image` and each of `volumes` (see [`prepare`]); a directory named twice is
/// granted once. Anything that fails revokes the grants already made.
pub async fn prepare_all(
    rt: &Runtime,
    image: Option<&ImageFrom>,
    volumes: &[ImageVolume],
    port: u16,
    ttl: Duration,
) -> Result<StepImages, SourceError> {
    let mut images = StepImages::default();
    let result = async {
        if let Some(from) = image {
            images.image = Some(images.granted(rt, from, port, ttl).await?);
        }
        for v in volumes {
            let source = images.granted(rt, &v.from, port, ttl).await?;
            images.volumes.push((source, v.mount_path.clone()));
        }
        // Two directories of one pod with one name cannot share the Secret: refuse now.
        image::docker_config_json(&images.entries())?;
        Ok::<_, SourceError>(())
    }
    .await;
    match result {
        Ok(()) => Ok(images),
        Err(e) => {
            images.revoke().await;
            Err(e)
        }
    }
}

/// Creates the pod of `spec` with `images`: its image-pull Secret first (replacing one left by an
/// earlier attempt), then the pod naming the images and the Secret, then the pod as the Secret's
/// owner. A pod that cannot be created takes its Secret with it; an owner that cannot be set
/// leaves the Secret to `stepctl gc`. Without images it is the plain pod.
pub async fn create_pod(
    rt: &Runtime,
    spec: &StepSpec,
    images: &StepImages,
) -> Result<Pod, SourceError> {
    if images.is_empty() {
        return Ok(rt.create_pod(spec).await?);
    }
    let secrets: Api<Secret> = Api::namespaced(rt.client.clone(), &rt.namespace);
    let secret = image::pull_secret(&rt.worker, &spec.name, &images.entries())?;
    let name = image::secret_name(&spec.name);
    let failed = |source| SourceError::Secret {
        name: name.clone(),
        source,
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {
            delete_secret(&secrets, &name).await.map_err(failed)?;
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .map_err(failed)?;
        }
        other => {
            other.map_err(failed)?;
        }
    }
    let mut spec = spec.clone();
    if let Some(s) = &images.image {
        spec.image = s.reference.clone();
    }
    spec.image_volumes = images
        .volumes
        .iter()
        .map(|(s, mount)| ImageMount {
            reference: s.reference.clone(),
            mount_path: mount.clone(),
        })
        .collect();
    spec.image_pull_secrets.push(name.clone());
    let pod = match rt.create_pod(&spec).await {
        Ok(p) => p,
        Err(e) => {
            let _ = delete_secret(&secrets, &name).await;
            return Err(e.into());
        }
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let patch = Patch::Merge(image::owner_patch(&spec.name, &uid));
    if let Err(e) = secrets.patch(&name, &PatchParams::default(), &patch).await {
        tracing::warn!(
            secret = name,
            "cannot make pod {} its owner: {e}",
            spec.name
        );
    }
    Ok(pod)
}

/// Deletes Secret `name`; one already gone is not an error.
async fn delete_secret(secrets: &Api<Secret>, name: &str) -> Result<(), kube::Error> {
    match secrets.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the worker's image-pull Secrets whose pod is gone, once at least `grace` old; returns
/// their names. Their grants are not revoked (their shims may be gone): they expire by their ttl.
pub async fn collect_secrets(rt: &Runtime, grace: Duration) -> Result<Vec<String>, SourceError> {
    let secrets: Api<Secret> = Api::namespaced(rt.client.clone(), &rt.namespace);
    let selector = format!(
        "{WORKER_LABEL}={},{IMAGE_FOR}",
        podspec::label_value(&rt.worker)
    );
    let failed = |source| SourceError::Secret {
        name: format!("list {selector}"),
        source,
    };
    let list = secrets
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(failed)?;
    let pods = rt.pod_names();
    let chosen = image::select_secrets(&list.items, &pods, grace, Timestamp::now());
    for name in &chosen {
        delete_secret(&secrets, name)
            .await
            .map_err(|source| SourceError::Secret {
                name: name.clone(),
                source,
            })?;
    }
    Ok(chosen)
}
