//! Files in and out (PROTOCOL.md 4.8): extracting an untrusted tar stream under a directory
//! ([`extract_with`], in `files/unpack.rs`), writing a tar stream of a path ([`archive`], in
//! `files/pack.rs`) and removing a path without following symlinks ([`remove`], in
//! `files/remove.rs`). This file owns the error type and the checks on paths: the one a request names
//! and the names inside a tar stream.
//!
//! Both directions are synchronous `std::io`: the HTTP layer runs them in `spawn_blocking` with the
//! request body bridged to a `Read` and the response to a `Write`. Memory stays bounded whatever the
//! size of the files: contents are streamed through a fixed buffer, never held whole; only a small
//! record per directory (extracting) or per multiply-linked file (archiving) is remembered.
//!
//! The tar stream of an extraction is hostile input, and a step process may change the target
//! directory while it is extracted. The invariants: nothing is ever created, modified or linked
//! outside the target directory (every operation is relative to a directory fd reached without
//! symlinks: `beneath.rs` over `sys/fs.rs`); a stream that fails leaves the target as it was
//! (`commit.rs`); memory and disk stay under the upload's caps (`guard.rs`). See `unpack.rs` for how
//! each entry is checked.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

mod beneath;
mod commit;
mod guard;
mod meta;
mod open;
mod pack;
mod remove;
mod sink;
mod unpack;

pub use beneath::Resolve;
pub use guard::Limits;
pub(crate) use open::{check_no_symlink, make_dirs, open_dir};
#[cfg(test)]
pub(crate) use pack::archive;
pub(crate) use pack::{ArchiveSource, prepare_archive};
pub(crate) use remove::remove;
pub(crate) use sink::Validator;
#[cfg(test)]
pub(crate) use unpack::extract;
pub use unpack::{ExtractStats, Options, extract_with};

/// Errors of files in/out. Each variant maps to one wire error (PROTOCOL.md 4.8).
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The path named by the request is unusable: not absolute, contains a NUL byte, has no last
    /// component, or (for an extraction) names something that is not a directory or goes through a
    /// symlink. Answered 400
    /// `invalid_path`; the message names the path and what is wrong with it.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// The path to archive does not exist (or ends with `/` but is not a directory). Answered 404
    /// `file_not_found`.
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// A component of the path named by a download or a grant is a symlink: such paths are never
    /// followed (PROTOCOL.md 4.8). Answered 400 `invalid_path`, or 403 `forbidden` to a grant
    /// token; the message names the component.
    #[error("invalid path: {0}")]
    Symlinked(String),
    /// The tar stream is corrupt or truncated, or an entry was refused: an absolute or `..` path, a
    /// parent that is a symlink, a hard link leaving the directory or going through a symlink, a
    /// device or FIFO, an entry that would replace a non-empty directory. Nothing was written.
    /// Answered 400 `invalid_tar`.
    #[error("invalid tar: {0}")]
    InvalidTar(String),
    /// The upload went over a cap (`STEPSHIM_FILES_MAX_BYTES` on the stream or a file's apparent
    /// size, `STEPSHIM_FILES_MAX_HEADER_BYTES` on an extension header). Nothing was written.
    /// Answered 413 `body_too_large`.
    #[error("upload too large: {0}")]
    TooLarge(String),
    /// The file system (or the response writer) failed. Answered 500 `internal`; `context` names the
    /// operation and at most the path involved.
    #[error("{context}")]
    Io {
        /// What was being done, e.g. `creating /build/out/a.txt`.
        context: String,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
}

impl FilesError {
    /// An [`FilesError::Io`] for `what` (a verb phrase) on `path`.
    fn io(what: &str, path: &Path, source: io::Error) -> Self {
        FilesError::Io {
            context: format!("{what} {}", path.display()),
            source,
        }
    }
}

/// The refusal of the entry `shown` for `why`: `"name": why` (one formatting site for the many
/// reasons).
fn refused(shown: &str, why: &str) -> FilesError {
    FilesError::InvalidTar(format!("{shown:?}: {why}"))
}

/// Checks a path given by the request: absolute and free of NUL bytes.
fn check_request_path(path: &Path) -> Result<(), FilesError> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.contains(&0) {
        return Err(FilesError::InvalidPath(format!(
            "{} contains a NUL byte",
            path.display()
        )));
    }
    if !path.is_absolute() {
        return Err(FilesError::InvalidPath(format!(
            "{:?} is not absolute",
            path.display().to_string()
        )));
    }
    Ok(())
}

/// Splits a name from the tar stream into the components it has below the target directory.
///
/// `.` components and repeated `/` are dropped; an empty result names the directory itself.
/// Refuses what could leave the directory (a leading `/`, any `..`) and NUL bytes, which no file
/// name can hold.
fn entry_components<'a>(what: &str, name: &'a [u8]) -> Result<Vec<&'a OsStr>, FilesError> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.contains(&0) {
        return Err(FilesError::InvalidTar(format!(
            "{what} {:?} contains a NUL byte",
            shown()
        )));
    }
    let mut out = Vec::new();
    for component in Path::new(OsStr::from_bytes(name)).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(FilesError::InvalidTar(format!(
                    "{what} {:?} is absolute",
                    shown()
                )));
            }
            Component::ParentDir => {
                return Err(FilesError::InvalidTar(format!(
                    "{what} {:?} contains `..`",
                    shown()
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
