//! Images from step pods, the pure part: a step's directory `POD:/PATH` becomes the image of a later
//! step's pod, or an image volume of it, pulled by the kubelet through the node-local forwarder on
//! `127.0.0.1` from the source pod's shim. Here: the `POD:/PATH` and `POD:/PATH=/MOUNT` arguments,
//! the image's name (`basename(PATH)`, an OCI name component), the reference the pod names
//! (`127.0.0.1:<port>/<source IP>/<name>@<digest>`), the forwarder's credentials, the
//! `kubernetes.io/dockerconfigjson` Secret holding them (one entry per image repository, labelled
//! for `stepctl gc`), the owner reference that lets Kubernetes delete it with the pod, and the rule
//! by which gc picks the Secrets whose pod is gone. The I/O is in [`crate::image_source`].

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::podspec::{WORKER_LABEL, label_value};

/// The forwarder's port on every node's loopback, unless set otherwise.
pub const FORWARDER_PORT: u16 = protocol::forward::PORT;
/// How long a grant for an image lasts, unless set otherwise: the kubelet pulls within it.
pub const GRANT_TTL: Duration = Duration::from_secs(3600);
/// Label (the pod's name as a label value) and annotation (its exact name) of an image-pull Secret:
/// gc selects on the label and reads the pod from the annotation.
pub const IMAGE_FOR: &str = "stepshim.dev/image-for";
/// The Secret type the kubelet reads registry credentials from.
pub const SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// The key of the credentials in such a Secret.
pub const SECRET_KEY: &str = ".dockerconfigjson";
/// The username for a source shim serving plain HTTP.
pub const PLAIN_USER: &str = protocol::forward::USER_PLAIN;

/// Why an image cannot be named or used.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The argument is not `POD:/PATH`.
    #[error("--image-from {0:?}: want POD:/PATH (an absolute path in the pod)")]
    Spec(String),
    /// The directory's name cannot name an image.
    #[error(
        "{path}: the image would be named {name:?}, which is not an OCI name component \
         (lowercase letters and digits, joined by '.', '_', '__' or '-'); rename the directory"
    )]
    Name {
        /// The directory.
        path: String,
        /// Its last component.
        name: String,
    },
    /// The source pod's address cannot appear in an image reference.
    #[error(
        "pod {pod} has the address {ip}, which an image reference cannot name (IPv4 pods only)"
    )]
    Address {
        /// The source pod.
        pod: String,
        /// Its IP.
        ip: String,
    },
    /// The digest is not `sha256:<64 hex>`.
    #[error("{0:?} is not a sha256 digest")]
    Digest(String),
    /// The argument is not `POD:/PATH=/MOUNT`.
    #[error("--image-volume {0:?}: want POD:/PATH=/MOUNT (absolute paths, MOUNT not /)")]
    Volume(String),
    /// Two images of one pod's Secret would share a repository but not their credentials.
    #[error(
        "two images named {0} (the same pod and directory name, other directories): \
         rename one directory"
    )]
    Clash(String),
}

/// `POD:/PATH`: a directory of a step pod that holds an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFrom {
    /// The source pod, one of this worker's.
    pub pod: String,
    /// The directory in it: an OCI image layout, or Concourse's `rootfs/` and `metadata.json`.
    pub path: String,
}

impl std::str::FromStr for ImageFrom {
    type Err = ImageError;

    fn from_str(s: &str) -> Result<Self, ImageError> {
        match s.split_once(':') {
            Some((pod, path)) if !pod.is_empty() && !pod.contains('/') && path.starts_with('/') => {
                let path = path.trim_end_matches('/');
                if path.is_empty() {
                    return Err(ImageError::Spec(s.to_owned()));
                }
                Ok(ImageFrom {
                    pod: pod.to_owned(),
                    path: path.to_owned(),
                })
            }
            _ => Err(ImageError::Spec(s.to_owned())),
        }
    }
}

impl std::fmt::Display for ImageFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.pod, self.path)
    }
}

impl ImageFrom {
    /// The image's name: the directory's last component, which must be an OCI name component.
    pub fn name(&self) -> Result<&str, ImageError> {
        let name = self.path.rsplit('/').next().unwrap_or_default();
        if protocol::registry::valid_component(name) {
            Ok(name)
        } else {
            Err(ImageError::Name {
                path: self.path.clone(),
                name: name.to_owned(),
            })
        }
    }
}

/// `POD:/PATH=/MOUNT`: the image in a directory of a step pod, mounted read-only at MOUNT in a
/// step's main container (a Kubernetes image volume).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageVolume {
    /// Where the image is.
    pub from: ImageFrom,
    /// Where the main container sees its files.
    pub mount_path: String,
}

impl std::str::FromStr for ImageVolume {
    type Err = ImageError;

    fn from_str(s: &str) -> Result<Self, ImageError> {
        let bad = || ImageError::Volume(s.to_owned());
        let (from, mount) = s.rsplit_once('=').ok_or_else(bad)?;
        let mount = mount.trim_end_matches('/');
        if !mount.starts_with('/') {
            return Err(bad());
        }
        Ok(ImageVolume {
            from: from.parse().map_err(|_| bad())?,
            mount_path: mount.to_owned(),
        })
    }
}

/// The image reference a consuming pod names: `127.0.0.1:<port>/<source IP>/<name>@<digest>`.
pub fn reference(
    port: u16,
    pod: &str,
    ip: &str,
    name: &str,
    digest: &str,
) -> Result<String, ImageError> {
    // Dotted decimal is an OCI name component; an IPv6 address is not.
    let ip4: Ipv4Addr = ip.parse().map_err(|_| ImageError::Address {
        pod: pod.to_owned(),
        ip: ip.to_owned(),
    })?;
    if protocol::registry::parse_digest(digest).is_err() {
        return Err(ImageError::Digest(digest.to_owned()));
    }
    Ok(format!("127.0.0.1:{port}/{ip4}/{name}@{digest}"))
}

/// The repository of `reference`, what precedes its `@<digest>`: `127.0.0.1:<port>/<ip>/<name>`.
/// The kubelet picks a pull Secret's entry for an image by the longest key that is a prefix of
/// its repository, so an entry under this key serves this image alone.
pub fn repository(reference: &str) -> &str {
    reference
        .split_once('@')
        .map_or(reference, |(repo, _)| repo)
}

/// What the kubelet presents to the forwarder.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `tls-<64 hex pin>` for a source serving TLS (the forwarder pins that key), else `plain`.
    pub username: String,
    /// The grant token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// The credentials for a source with TLS pin `pin` (hex; `None`: plain HTTP) and grant token.
    pub fn new(pin: Option<&str>, token: &str) -> Self {
        Credentials {
            username: pin.map_or_else(
                || PLAIN_USER.to_owned(),
                |p| format!("{}{p}", protocol::forward::USER_TLS_PREFIX),
            ),
            password: token.to_owned(),
        }
    }
}

#[derive(Serialize)]
struct DockerConfig<'a> {
    auths: BTreeMap<String, Auth<'a>>,
}

#[derive(Serialize, PartialEq)]
struct Auth<'a> {
    username: &'a str,
    password: &'a str,
    auth: String,
}

/// The `.dockerconfigjson` the kubelet reads, one entry per image `(reference, credentials)`,
/// keyed by its repository: `{"auths":{"127.0.0.1:<port>/<ip>/<name>":{"username":..,
/// "password":..,"auth":base64(user:pass)}}}`. The kubelet tries every entry whose key is a prefix
/// of an image's repository, longest first; keyed by repository, each image gets its own
/// credentials at the first try. Two images of one repository must share their credentials.
pub fn docker_config_json(images: &[(&str, &Credentials)]) -> Result<Vec<u8>, ImageError> {
    let mut auths = BTreeMap::new();
    for (reference, creds) in images {
        let repo = repository(reference);
        let auth = Auth {
            username: &creds.username,
            password: &creds.password,
            auth: base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", creds.username, creds.password)),
        };
        match auths.get(repo) {
            Some(other) if *other != auth => return Err(ImageError::Clash(repo.to_owned())),
            _ => auths.insert(repo.to_owned(), auth),
        };
    }
    Ok(serde_json::to_vec(&DockerConfig { auths }).unwrap_or_default())
}

/// The name of pod `pod`'s image-pull Secret.
pub fn secret_name(pod: &str) -> String {
    format!("{pod}-image")
}

/// The image-pull Secret of pod `pod` of `worker`: the forwarder's credentials for each image
/// `(reference, credentials)` the pod names, labelled for gc.
pub fn pull_secret(
    worker: &str,
    pod: &str,
    images: &[(&str, &Credentials)],
) -> Result<Secret, ImageError> {
    let config = docker_config_json(images)?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(pod)),
            labels: Some(BTreeMap::from([
                (WORKER_LABEL.to_owned(), label_value(worker)),
                (IMAGE_FOR.to_owned(), label_value(pod)),
            ])),
            annotations: Some(BTreeMap::from([(IMAGE_FOR.to_owned(), pod.to_owned())])),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_owned(),
            ByteString(config),
        )])),
        ..Default::default()
    })
}

/// The merge patch making pod `pod` (of `uid`) the Secret's owner: Kubernetes' garbage collector
/// deletes the Secret once the pod is gone.
pub fn owner_patch(pod: &str, uid: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"ownerReferences": [{
        "apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid,
    }]}})
}

/// The image-pull Secrets to delete at `now`: labelled as such, not already going, at least
/// `grace` old (the pod may be being created), and naming a pod not in `pods`. Pure, so the rule
/// is tested apart.
pub fn select_secrets<'a>(
    secrets: impl IntoIterator<Item = &'a Secret>,
    pods: &HashSet<String>,
    grace: Duration,
    now: Timestamp,
) -> Vec<String> {
    crate::selection::select_objects(
        secrets.into_iter().map(|s| &s.metadata),
        |m| {
            m.annotations
                .as_ref()
                .and_then(|a| a.get(IMAGE_FOR))
                .or_else(|| m.labels.as_ref()?.get(IMAGE_FOR))
        },
        pods,
        grace,
        now,
    )
}

#[cfg(test)]
mod tests;
