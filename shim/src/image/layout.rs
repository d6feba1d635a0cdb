//! An OCI image layout served as it is: tags from `index.json` (each entry's ref.name annotation,
//! and `latest` for its only manifest, or for `index.json` itself when it lists several), manifests
//! and blobs from `blobs/sha256/`. A manifest is read whole and checked against its digest before
//! it is answered; a blob is opened here and checked by the sender as it streams.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};

use bytes::Bytes;
use protocol::registry::{
    self as reg, Descriptor, INDEX, Index, LATEST, Reference, SelfDescribed, digest_string,
};

use super::{Content, Found, ImageError, bytes_found, open_regular, read_small, sha256};
use crate::sys::fs as sysfs;

/// The manifest `reference` names.
pub(super) fn manifest(dir: BorrowedFd<'_>, reference: Reference<'_>) -> Result<Found, ImageError> {
    let raw = read_small(dir, "index.json", reg::MAX_MANIFEST_BYTES)?
        .ok_or_else(|| ImageError::Invalid("the OCI layout has no index.json".into()))?;
    let index: Index = serde_json::from_slice(&raw)
        .map_err(|e| ImageError::Invalid(format!("index.json is not an image index: {e}")))?;
    let desc = match reference {
        Reference::Tag(tag) => match by_tag(&index, tag) {
            Some(d) => d.clone(),
            None if tag == LATEST && index.manifests.len() > 1 => {
                return Ok(bytes_found(INDEX, Bytes::from(raw)));
            }
            None => {
                return Err(ImageError::ManifestUnknown(format!(
                    "no manifest is tagged {tag:?}"
                )));
            }
        },
        Reference::Digest(d) if d == sha256(&raw) => {
            return Ok(bytes_found(INDEX, Bytes::from(raw)));
        }
        Reference::Digest(d) => match by_digest(&index, &d) {
            Some(desc) => desc.clone(),
            None => return manifest_blob(dir, &d, None),
        },
    };
    let digest = reg::parse_digest(&desc.digest).map_err(|_| {
        ImageError::Invalid(format!("index.json names the digest {:?}", desc.digest))
    })?;
    manifest_blob(dir, &digest, Some(&desc.media_type))
}

/// The entry of `index` tagged `tag`; `latest` is also its only entry.
fn by_tag<'a>(index: &'a Index, tag: &str) -> Option<&'a Descriptor> {
    let named = index.manifests.iter().find(|d| {
        d.annotations
            .as_ref()
            .and_then(|a| a.ref_name.as_deref())
            .is_some_and(|n| n == tag)
    });
    named.or(match index.manifests.as_slice() {
        [only] if tag == LATEST => Some(only),
        _ => None,
    })
}

fn by_digest<'a>(index: &'a Index, digest: &[u8; 32]) -> Option<&'a Descriptor> {
    let want = digest_string(digest);
    index.manifests.iter().find(|d| d.digest == want)
}

/// The manifest stored as blob `digest`, read whole and checked; `media_type` from the index
/// entry naming it, else from the manifest itself.
fn manifest_blob(
    dir: BorrowedFd<'_>,
    digest: &[u8; 32],
    media_type: Option<&str>,
) -> Result<Found, ImageError> {
    let unknown = || ImageError::ManifestUnknown(format!("no manifest {}", digest_string(digest)));
    let blobs = blobs_dir(dir)?.ok_or_else(unknown)?;
    let data =
        read_small(blobs.as_fd(), &hex(digest), reg::MAX_MANIFEST_BYTES)?.ok_or_else(unknown)?;
    if sha256(&data) != *digest {
        return Err(ImageError::ManifestUnknown(format!(
            "the blob stored as {} does not match its digest",
            digest_string(digest)
        )));
    }
    let own = serde_json::from_slice::<SelfDescribed>(&data).ok();
    let media_type = media_type
        .map(str::to_owned)
        .or_else(|| own.as_ref().and_then(|m| m.media_type().map(str::to_owned)))
        .ok_or_else(|| {
            ImageError::ManifestUnknown(format!("{} is not a manifest", digest_string(digest)))
        })?;
    Ok(bytes_found(&media_type, Bytes::from(data)))
}

/// Blob `digest`, opened; the sender checks its content.
pub(super) fn blob(dir: BorrowedFd<'_>, digest: &[u8; 32]) -> Result<Found, ImageError> {
    let unknown = || ImageError::BlobUnknown(format!("no blob {}", digest_string(digest)));
    let blobs = blobs_dir(dir)?.ok_or_else(unknown)?;
    let (file, len) = open_regular(blobs.as_fd(), &hex(digest))?.ok_or_else(unknown)?;
    Ok(Found {
        media_type: "application/octet-stream".into(),
        digest: *digest,
        len,
        content: Content::File(file),
    })
}

/// `blobs/sha256`, reached without symlinks; `None` when missing.
fn blobs_dir(dir: BorrowedFd<'_>) -> Result<Option<std::os::fd::OwnedFd>, ImageError> {
    let open = |at: BorrowedFd<'_>, name: &str| match sysfs::open_dir_at(at, OsStr::new(name)) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(_) => Err(ImageError::Invalid(format!(
            "{name} is not a directory (or is a symlink)"
        ))),
    };
    let Some(blobs) = open(dir, "blobs")? else {
        return Ok(None);
    };
    open(blobs.as_fd(), "sha256")
}

fn hex(d: &[u8; 32]) -> String {
    digest_string(d)["sha256:".len()..].to_owned()
}
