//! Concourse's image format (`rootfs/` and `metadata.json`, as `registry-image` writes it) as a
//! one-layer OCI image: the layer is exactly the deterministic tar of `rootfs/` (PROTOCOL.md
//! 4.8.1, uncompressed), the config carries the metadata's env, user, entrypoint, command and
//! working directory. Its digest needs the whole tree read once; [`Built`] keeps the result for
//! the tree's ETag and the metadata's hash, and a layer is only served while the tree still has
//! the ETag it was hashed with (the archive is cut before its end if the tree changes midway).

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use protocol::registry::{
    self as reg, CONFIG, Descriptor, ImageConfig, LATEST, LAYER_TAR, MANIFEST, Manifest, Metadata,
    Reference, digest_string,
};
use sha2::Digest;

use super::{Content, Found, ImageError, bytes_found, read_small, sha256};
use crate::files::{ArchiveSource, FilesError, Validator};

/// The architecture of the images this shim makes: its own.
const ARCH: &str = match std::env::consts::ARCH.as_bytes() {
    b"x86_64" => "amd64",
    b"aarch64" => "arm64",
    _ => std::env::consts::ARCH,
};

/// A `rootfs/` image directory as it is now: its metadata and its tree's archive.
#[derive(Debug)]
pub(super) struct State {
    dir: PathBuf,
    meta: Metadata,
    meta_hash: [u8; 32],
    source: ArchiveSource,
    validator: Validator,
}

impl State {
    /// Reads `dir/metadata.json` (optional) and walks `dir/rootfs/` without reading contents.
    pub(super) fn of(dir: &Path, fd: BorrowedFd<'_>) -> Result<State, ImageError> {
        let raw = read_small(fd, "metadata.json", reg::MAX_METADATA_BYTES)?;
        let meta = match &raw {
            Some(raw) => serde_json::from_slice(raw)
                .map_err(|e| ImageError::Invalid(format!("metadata.json: {e}")))?,
            None => Metadata::default(),
        };
        let (source, validator) = archive(dir, fd)?;
        Ok(State {
            dir: dir.to_path_buf(),
            meta,
            meta_hash: sha256(raw.as_deref().unwrap_or_default()),
            source,
            validator,
        })
    }
}

/// The archive of `dir/rootfs/` (`dir` open as `fd`) and its validator.
fn archive(dir: &Path, fd: BorrowedFd<'_>) -> Result<(ArchiveSource, Validator), ImageError> {
    let source = ArchiveSource::contents_of(fd, OsStr::new("rootfs"), dir.join("rootfs"))
        .map_err(files_error)?;
    let validator = source.validator().map_err(files_error)?;
    Ok((source, validator))
}

fn files_error(e: FilesError) -> ImageError {
    match e {
        FilesError::NotFound(p) => ImageError::NameUnknown(format!("{p} is gone")),
        FilesError::Symlinked(m) => ImageError::Denied(m),
        FilesError::Io { context, source } => ImageError::Io { context, source },
        other => ImageError::Invalid(other.to_string()),
    }
}

/// The image made of a [`State`]: its documents and digests.
#[derive(Debug, Clone)]
pub(super) struct Built {
    /// The image directory.
    pub(super) dir: PathBuf,
    etag: String,
    meta_hash: [u8; 32],
    layer: [u8; 32],
    layer_len: u64,
    config: Bytes,
    manifest: Bytes,
}

impl Built {
    /// Whether this was built from the tree and metadata `now` has.
    pub(super) fn is(&self, now: &State) -> bool {
        self.dir == now.dir && self.etag == now.validator.etag && self.meta_hash == now.meta_hash
    }

    /// Hashes the layer of `now` (the whole tree is read) and writes the config and manifest.
    pub(super) fn hash(now: &State) -> Result<Built, ImageError> {
        // A source of its own (writing consumes one) of the same opened tree; `now.validator`
        // still says which tree it must be, so the tree is not walked again for it.
        let source = now.source.try_clone().map_err(files_error)?;
        let mut hasher = Hasher(sha2::Sha256::new(), 0);
        source
            .write_from(&mut hasher, 0, Some(&now.validator))
            .map_err(|_| {
                ImageError::BlobUnknown(format!(
                    "{}/rootfs changed while its digest was taken; try again",
                    now.dir.display()
                ))
            })?;
        let layer_len = hasher.1;
        let layer: [u8; 32] = hasher.0.finalize().into();
        let config = serde_json::to_vec(&ImageConfig::of(&now.meta, ARCH, &layer))
            .map_err(|e| ImageError::Invalid(e.to_string()))?;
        let manifest = Manifest {
            schema_version: 2,
            media_type: MANIFEST.into(),
            config: descriptor(CONFIG, &sha256(&config), config.len() as u64),
            layers: vec![descriptor(LAYER_TAR, &layer, layer_len)],
        };
        let manifest =
            serde_json::to_vec(&manifest).map_err(|e| ImageError::Invalid(e.to_string()))?;
        Ok(Built {
            dir: now.dir.clone(),
            etag: now.validator.etag.clone(),
            meta_hash: now.meta_hash,
            layer,
            layer_len,
            config: Bytes::from(config),
            manifest: Bytes::from(manifest),
        })
    }

    /// The manifest, by the tag `latest` or its digest.
    pub(super) fn manifest(&self, reference: Reference<'_>) -> Result<Found, ImageError> {
        let found = bytes_found(MANIFEST, self.manifest.clone());
        match reference {
            Reference::Tag(LATEST) => Ok(found),
            Reference::Digest(d) if d == found.digest => Ok(found),
            Reference::Tag(t) => Err(ImageError::ManifestUnknown(format!(
                "a rootfs/ image has only the tag latest, not {t:?}"
            ))),
            Reference::Digest(d) => Err(ImageError::ManifestUnknown(format!(
                "no manifest {}: the image's is now {}",
                digest_string(&d),
                digest_string(&found.digest)
            ))),
        }
    }

    /// The config or the layer; the layer only while the tree is the one hashed (`now`).
    pub(super) fn blob(&self, now: State, digest: &[u8; 32]) -> Result<Found, ImageError> {
        if *digest == sha256(&self.config) {
            return Ok(bytes_found(CONFIG, self.config.clone()));
        }
        if *digest != self.layer {
            return Err(ImageError::BlobUnknown(format!(
                "no blob {} in this image",
                digest_string(digest)
            )));
        }
        Ok(Found {
            media_type: LAYER_TAR.into(),
            digest: self.layer,
            len: self.layer_len,
            content: Content::Layer(Box::new(now.source), now.validator),
        })
    }
}

fn descriptor(media_type: &str, digest: &[u8; 32], size: u64) -> Descriptor {
    Descriptor {
        media_type: media_type.into(),
        digest: digest_string(digest),
        size,
        annotations: None,
    }
}

/// Counts and hashes what is written.
struct Hasher(sha2::Sha256, u64);

impl Write for Hasher {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        self.1 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
