//! The image routes under `/v2/` (PROTOCOL.md 4.12): the pull side of the OCI distribution spec,
//! as the shim serves a granted directory as an image. Paths, names, references and digests as the
//! spec spells them, the JSON documents the shim reads (`index.json`, Concourse's `metadata.json`)
//! and writes (a manifest and an image config), and the error body. No I/O.

use serde::{Deserialize, Serialize};

mod basic;

pub use basic::{base64_decode, base64_encode, basic_credentials, basic_password};

/// Prefix of every image route.
pub const PREFIX: &str = "/v2/";
/// Longest repository name (the spec advises clients to stay under 255 bytes with the host).
pub const MAX_NAME_LEN: usize = 255;
/// Largest manifest, image index or `index.json` the shim reads.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Largest `metadata.json`.
pub const MAX_METADATA_BYTES: u64 = 1 << 20;

/// `application/vnd.oci.image.manifest.v1+json`
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// `application/vnd.oci.image.index.v1+json`
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// `application/vnd.oci.image.config.v1+json`
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// An uncompressed layer: exactly the deterministic tar of a directory (4.8.1).
pub const LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// Docker's manifest and manifest list, which OCI layouts written by older tools may hold.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// See [`DOCKER_MANIFEST`].
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The annotation of an `index.json` entry naming its tag.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The tag every image answers to.
pub const LATEST: &str = "latest";
/// Header carrying a manifest's or blob's digest.
pub const DIGEST_HEADER: &str = "docker-content-digest";
/// Header every `/v2/` answer carries.
pub const API_VERSION_HEADER: &str = "docker-distribution-api-version";

/// What a path under `/v2/` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// `/v2/`: the API version check.
    Base,
    /// `/v2/<name>/manifests/<reference>`
    Manifest {
        /// The repository name.
        name: &'a str,
        /// A tag or a digest.
        reference: Reference<'a>,
    },
    /// `/v2/<name>/blobs/<digest>`
    Blob {
        /// The repository name.
        name: &'a str,
        /// The blob's SHA-256.
        digest: [u8; 32],
    },
}

/// A manifest's reference: a tag or a digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference<'a> {
    /// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`
    Tag(&'a str),
    /// `sha256:<64 hex>`
    Digest([u8; 32]),
}

/// Why a `/v2/` path was refused, with the spec's error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// No route of the pull side has this shape (or it is a push route).
    NotFound,
    /// The repository name breaks the grammar.
    NameInvalid(String),
    /// A digest that is not `sha256:<64 lowercase hex>`.
    DigestInvalid(String),
    /// A tag that breaks the grammar.
    TagInvalid(String),
}

/// Parses a request path that starts with `/v2/` (the `/v2` without slash counts as the base).
pub fn parse(path: &str) -> Result<Request<'_>, PathError> {
    let rest = match path {
        "/v2" | PREFIX => return Ok(Request::Base),
        _ => path.strip_prefix(PREFIX).ok_or(PathError::NotFound)?,
    };
    for kind in ["/manifests/", "/blobs/"] {
        if let Some(at) = rest.rfind(kind) {
            let (name, arg) = (&rest[..at], &rest[at + kind.len()..]);
            if !valid_name(name) {
                return Err(PathError::NameInvalid(format!(
                    "{name:?} is not a valid repository name"
                )));
            }
            return if kind == "/blobs/" {
                let digest = parse_digest(arg)?;
                Ok(Request::Blob { name, digest })
            } else {
                Ok(Request::Manifest {
                    name,
                    reference: parse_reference(arg)?,
                })
            };
        }
    }
    Err(PathError::NotFound)
}

/// A tag or a `sha256:` digest.
pub fn parse_reference(s: &str) -> Result<Reference<'_>, PathError> {
    if s.contains(':') {
        return parse_digest(s).map(Reference::Digest);
    }
    let b = s.as_bytes();
    let ok = (1..=128).contains(&b.len())
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok {
        Ok(Reference::Tag(s))
    } else {
        Err(PathError::TagInvalid(format!("{s:?} is not a valid tag")))
    }
}

/// `sha256:<64 lowercase hex>` (the only algorithm served).
pub fn parse_digest(s: &str) -> Result<[u8; 32], PathError> {
    let bad = || PathError::DigestInvalid(format!("{s:?} is not a sha256:<64 hex> digest"));
    let hex = s.strip_prefix("sha256:").ok_or_else(bad)?;
    if hex.bytes().any(|c| c.is_ascii_uppercase()) {
        return Err(bad());
    }
    crate::token::parse_sha256_hex(hex).ok_or_else(bad)
}

/// `sha256:<64 hex>` of a digest.
pub fn digest_string(d: &[u8; 32]) -> String {
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Whether `name` is a repository name: components `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*` joined by
/// `/`, at most [`MAX_NAME_LEN`] bytes.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && name.split('/').all(valid_component)
}

/// One component of a repository name (see [`valid_name`]).
pub fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: &u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(&b[0]) || !alnum(&b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(&b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(&b[i]) {
            i += 1;
        }
        let sep = &b[start..i];
        let ok = sep == b"." || sep == b"_" || sep == b"__" || sep.iter().all(|&x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The media type of the content.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Bytes.
    pub size: u64,
    /// Annotations: only the tag of an `index.json` entry is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
}

/// The annotations of a [`Descriptor`] the shim reads; others are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotations {
    /// `org.opencontainers.image.ref.name`: the entry's tag.
    #[serde(
        rename = "org.opencontainers.image.ref.name",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ref_name: Option<String>,
}

/// An image index (`index.json` of a layout): only what the shim reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Index {
    /// The manifests it lists.
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
}

/// What a manifest or index says of itself: enough to tell one from an image config or any other
/// JSON blob (an image config also has a `config` field, but not a descriptor in it).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelfDescribed {
    /// 2 for both.
    #[serde(default)]
    pub schema_version: Option<u32>,
    /// Its own media type, when it names one.
    #[serde(default)]
    pub media_type: Option<String>,
    /// Present in an index.
    #[serde(default)]
    pub manifests: Option<Vec<serde::de::IgnoredAny>>,
    /// Present in a manifest: a descriptor.
    #[serde(default)]
    pub config: Option<DescriptorShape>,
}

/// A descriptor's required fields, for [`SelfDescribed`].
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DescriptorShape {
    /// Its media type.
    pub media_type: String,
    /// Its digest.
    pub digest: String,
}

impl SelfDescribed {
    /// The media type to answer a manifest with: its own, else what its fields make it; `None`
    /// for anything that is not a schema 2 manifest or index.
    pub fn media_type(&self) -> Option<&str> {
        if self.schema_version != Some(2) {
            return None;
        }
        match (&self.media_type, &self.manifests, &self.config) {
            (Some(_), None, None) => None,
            (Some(t), _, _) => Some(t),
            (None, Some(_), None) => Some(INDEX),
            (None, None, Some(_)) => Some(MANIFEST),
            _ => None,
        }
    }
}

/// An image manifest the shim writes for a `rootfs/` directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`MANIFEST`].
    pub media_type: String,
    /// The image config.
    pub config: Descriptor,
    /// The layers, base first.
    pub layers: Vec<Descriptor>,
}

/// Concourse's `metadata.json` beside a `rootfs/` (what `registry-image` writes), and the
/// optional fields the shim also takes from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Metadata {
    /// `K=V` entries.
    #[serde(default)]
    pub env: Vec<String>,
    /// User name or `uid[:gid]`.
    #[serde(default)]
    pub user: String,
    /// The image's entrypoint.
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    /// The image's default arguments.
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    /// The working directory.
    #[serde(default)]
    pub working_dir: Option<String>,
}

/// The image config the shim writes for a `rootfs/` directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `amd64`, `arm64`, ...
    pub architecture: String,
    /// `linux`.
    pub os: String,
    /// How to run it.
    pub config: RunConfig,
    /// The layers' uncompressed digests.
    pub rootfs: RootFs,
}

/// The `config` of an [`ImageConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    /// The user.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// `K=V` entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The entrypoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// The default arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// The working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
}

/// The `rootfs` of an [`ImageConfig`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootFs {
    /// `layers`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `sha256:<hex>` of each uncompressed layer.
    pub diff_ids: Vec<String>,
}

impl ImageConfig {
    /// The config of a one-layer image from `metadata.json`, for the architecture `arch`.
    pub fn of(meta: &Metadata, arch: &str, layer: &[u8; 32]) -> Self {
        ImageConfig {
            architecture: arch.to_owned(),
            os: "linux".into(),
            config: RunConfig {
                user: meta.user.clone(),
                env: meta.env.clone(),
                entrypoint: meta.entrypoint.clone(),
                cmd: meta.cmd.clone(),
                working_dir: meta.working_dir.clone(),
            },
            rootfs: RootFs {
                kind: "layers".into(),
                diff_ids: vec![digest_string(layer)],
            },
        }
    }
}

/// The error body of a `/v2/` answer: `{"errors":[{"code":..,"message":..}]}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Errors {
    /// Usually one.
    pub errors: Vec<ErrorItem>,
}

/// One error of [`Errors`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorItem {
    /// `NAME_UNKNOWN`, `MANIFEST_UNKNOWN`, `BLOB_UNKNOWN`, `UNAUTHORIZED`, ...
    pub code: String,
    /// What went wrong.
    pub message: String,
}

#[cfg(test)]
mod tests;
