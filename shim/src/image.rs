//! Images from a step's directories (PROTOCOL.md 4.12): finds what a manifest or blob request asks
//! for in an image directory, read-only, on the blocking pool. Two formats: an OCI image layout
//! served as it is (`image/layout.rs`), and Concourse's `rootfs/` + `metadata.json` turned into a
//! one-layer image (`image/rootfs.rs`), whose digests are kept per tree ETag in [`Images`].
//!
//! The directory is opened once per request; everything in it is reached from that fd one
//! component at a time without following a symlink, and only regular files are read, so a step
//! process cannot make the shim serve a file from outside its image directory.

mod layout;
mod rootfs;

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

use bytes::Bytes;
use protocol::registry::Reference;
use sha2::Digest;

use crate::files::{ArchiveSource, FilesError, Validator};
use crate::sys::fs as sysfs;

/// Why an image request found nothing to serve; each maps to one OCI error code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImageError {
    /// The directory is missing or is not an image.
    #[error("{0}")]
    NameUnknown(String),
    /// No manifest by that tag or digest.
    #[error("{0}")]
    ManifestUnknown(String),
    /// No blob by that digest.
    #[error("{0}")]
    BlobUnknown(String),
    /// The image directory holds something unusable (a broken `index.json`, `metadata.json`).
    #[error("{0}")]
    Invalid(String),
    /// The path to the image directory, or its `rootfs`, goes through a symlink: never followed.
    #[error("{0}")]
    Denied(String),
    /// The file system failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being read.
        context: String,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

/// What an answer sends.
#[derive(Debug)]
pub(crate) enum Content {
    /// A manifest, index or config, read whole and verified.
    Bytes(Bytes),
    /// A blob of a layout, verified by the sender as it streams.
    File(File),
    /// A `rootfs/` layer: the archive of the tree with this validator.
    Layer(Box<ArchiveSource>, Validator),
}

/// A manifest or blob found.
#[derive(Debug)]
pub(crate) struct Found {
    /// Its media type.
    pub(crate) media_type: String,
    /// Its SHA-256.
    pub(crate) digest: [u8; 32],
    /// Its length.
    pub(crate) len: u64,
    /// Its bytes.
    pub(crate) content: Content,
}

/// Digests of `rootfs/` images, kept per directory and tree ETag: a tree is hashed once until it
/// changes.
#[derive(Debug, Default)]
pub(crate) struct Images {
    built: Mutex<Vec<rootfs::Built>>,
    /// Held while a tree is hashed: requests for the same image wait for one hash, not each
    /// make their own.
    hashing: Mutex<()>,
    /// Layout blobs whose content was found to match their digest, by what `fstat` says of them:
    /// sent again unchanged, they are not hashed again.
    verified: Mutex<Vec<(FileKey, [u8; 32])>>,
}

/// What identifies a file's content without reading it: a write moves its change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileKey([i64; 6]);

impl FileKey {
    /// The key of an open file.
    pub(crate) fn of(file: &File) -> io::Result<FileKey> {
        let m = file.metadata()?;
        Ok(FileKey([
            m.dev() as i64,
            m.ino() as i64,
            m.size() as i64,
            m.ctime(),
            m.ctime_nsec(),
            m.mtime_nsec(),
        ]))
    }
}

/// How many verified blobs are remembered.
const VERIFIED: usize = 256;

/// How many `rootfs/` images keep their digests.
const KEPT: usize = 16;

/// The two formats.
enum Format {
    Layout(OwnedFd),
    RootFs(OwnedFd),
}

impl Images {
    /// The manifest `reference` names in the image directory `dir`.
    pub(crate) fn manifest(
        &self,
        dir: &Path,
        reference: Reference<'_>,
    ) -> Result<Found, ImageError> {
        match format(dir)? {
            Format::Layout(fd) => layout::manifest(fd.as_fd(), reference),
            Format::RootFs(fd) => {
                let (built, _) = self.rootfs(dir, fd.as_fd())?;
                built.manifest(reference)
            }
        }
    }

    /// The blob `digest` of the image directory `dir`.
    pub(crate) fn blob(&self, dir: &Path, digest: &[u8; 32]) -> Result<Found, ImageError> {
        match format(dir)? {
            Format::Layout(fd) => layout::blob(fd.as_fd(), digest),
            Format::RootFs(fd) => {
                let (built, now) = self.rootfs(dir, fd.as_fd())?;
                built.blob(now, digest)
            }
        }
    }

    /// Whether `file` (with `key`) was already found to hold `digest`.
    pub(crate) fn is_verified(&self, key: FileKey, digest: &[u8; 32]) -> bool {
        let v = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().any(|(k, d)| *k == key && d == digest)
    }

    /// Remembers that the file with `key` holds `digest`, if it had not changed for a while when
    /// it was opened: a change time within the clock's coarse tick of a rewrite could hide it.
    pub(crate) fn verified(&self, key: FileKey, digest: [u8; 32]) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if now - key.0[3] < 2 {
            return;
        }
        let mut v = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|(k, _)| *k != key);
        if v.len() >= VERIFIED {
            v.remove(0);
        }
        v.push((key, digest));
    }

    /// The image of `dir/rootfs/` as it is now, from the cache when its tree and metadata have not
    /// changed, and the tree's state to serve its layer from.
    fn rootfs(
        &self,
        dir: &Path,
        fd: BorrowedFd<'_>,
    ) -> Result<(rootfs::Built, rootfs::State), ImageError> {
        let now = rootfs::State::of(dir, fd)?;
        let lock = || self.built.lock().unwrap_or_else(|e| e.into_inner());
        let cached = |now: &rootfs::State| lock().iter().find(|b| b.is(now)).cloned();
        if let Some(b) = cached(&now) {
            return Ok((b, now));
        }
        let _one = self.hashing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = cached(&now) {
            return Ok((b, now));
        }
        let built = rootfs::Built::hash(&now)?;
        let mut kept = lock();
        kept.retain(|b| b.dir != built.dir);
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push(built.clone());
        Ok((built, now))
    }
}

/// Opens the image directory `dir` (without following a symlink on the way: the grant was checked
/// against the path as written) and says which format it holds.
fn format(dir: &Path) -> Result<Format, ImageError> {
    let unknown = |why: &str| ImageError::NameUnknown(format!("{}: {why}", dir.display()));
    let fd = crate::files::open_dir(dir).map_err(|e| match e {
        FilesError::NotFound(_) => unknown("no such directory"),
        FilesError::Symlinked(m) => ImageError::Denied(m),
        FilesError::Io { context, source } => ImageError::Io { context, source },
        other => unknown(&other.to_string()),
    })?;
    let kind = |name: &str| {
        sysfs::stat_at(fd.as_fd(), OsStr::new(name))
            .map(|s| s.kind)
            .ok()
    };
    if kind("oci-layout") == Some(sysfs::Kind::File) {
        return Ok(Format::Layout(fd));
    }
    if kind("rootfs") == Some(sysfs::Kind::Dir) {
        return Ok(Format::RootFs(fd));
    }
    Err(unknown(
        "not an image: neither an OCI layout (oci-layout, index.json, blobs/) nor a rootfs/ directory",
    ))
}

/// Opens the regular file `name` in `dir` without following a symlink; `Ok(None)` when missing.
fn open_regular(dir: BorrowedFd<'_>, name: &str) -> Result<Option<(File, u64)>, ImageError> {
    let file = match sysfs::open_file_at(dir, OsStr::new(name)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(ImageError::Invalid(format!("{name} is a symlink")));
        }
        Err(source) => return Err(io_error(name, source)),
    };
    let meta = file.metadata().map_err(|e| io_error(name, e))?;
    if !meta.file_type().is_file() {
        return Err(ImageError::Invalid(format!("{name} is not a regular file")));
    }
    Ok(Some((file, meta.size())))
}

/// Reads the regular file `name` in `dir` whole, if it is at most `max` bytes.
fn read_small(dir: BorrowedFd<'_>, name: &str, max: u64) -> Result<Option<Vec<u8>>, ImageError> {
    let Some((file, size)) = open_regular(dir, name)? else {
        return Ok(None);
    };
    if size > max {
        return Err(ImageError::Invalid(format!(
            "{name} is {size} bytes, over the {max} this reads"
        )));
    }
    let mut out = Vec::with_capacity(size as usize);
    file.take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| io_error(name, e))?;
    if out.len() as u64 > max {
        return Err(ImageError::Invalid(format!("{name} grew over {max} bytes")));
    }
    Ok(Some(out))
}

fn io_error(what: &str, source: io::Error) -> ImageError {
    ImageError::Io {
        context: format!("reading {what}"),
        source,
    }
}

/// SHA-256 of `data`.
fn sha256(data: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(data).into()
}

/// A manifest or config answer held in memory.
fn bytes_found(media_type: &str, data: Bytes) -> Found {
    Found {
        media_type: media_type.to_owned(),
        digest: sha256(&data),
        len: data.len() as u64,
        content: Content::Bytes(data),
    }
}
