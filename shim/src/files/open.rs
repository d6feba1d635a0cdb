//! The path a download names (`GET /v1/files`, a grant's path, an image directory), opened from `/`
//! without following any symlink: one `openat2(RESOLVE_NO_SYMLINKS)` call, or one
//! `openat(O_NOFOLLOW | O_DIRECTORY)` per component where the kernel lacks it (`beneath.rs`). A
//! symlink anywhere in the path is refused, so what is opened is the path as written, whatever a
//! process of the pod renames or swaps meanwhile, and a grant's lexical prefix check is all the
//! check it needs. Everything below is then reached from these descriptors (`pack.rs`).

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use super::beneath::{Blocked, Missing, Resolve, open_dirs};
use super::commit::request_components;
use super::{FilesError, check_request_path};
use crate::sys::fs as sysfs;

/// `path`'s parent directory, opened, and its last component (`None` for `/`).
pub(crate) fn open_parent(path: &Path) -> Result<(OwnedFd, Option<OsString>), FilesError> {
    check_request_path(path)?;
    let mut comps = request_components(path)?;
    let last = comps.pop();
    let parent = open_components(path, &comps)?;
    Ok((parent, last))
}

/// The directory `path` itself, opened.
pub(crate) fn open_dir(path: &Path) -> Result<OwnedFd, FilesError> {
    check_request_path(path)?;
    let comps = request_components(path)?;
    open_components(path, &comps)
}

/// Creates the directory `path` and its missing parents (mode 0755, the shim's owner), never
/// through a symlink: a spawn's working directory, which the shim creates before the process
/// runs, so a step that planted a symlink on the way cannot make it create directories elsewhere.
/// A path that exists already (symlinks followed: the process enters it as its own user) needs
/// nothing; a relative path is taken from the shim's working directory.
pub(crate) fn make_dirs(path: &Path) -> Result<(), FilesError> {
    if path.is_dir() {
        return Ok(());
    }
    let comps = request_components(path)?;
    let start = if path.is_absolute() { "/" } else { "." };
    let at = sysfs::open_dir_path(start).map_err(|e| FilesError::io("opening", path, e))?;
    let refs: Vec<&OsStr> = comps.iter().map(OsString::as_os_str).collect();
    match open_dirs(at.as_fd(), &refs, Missing::Create(None), Resolve::Walk) {
        Ok(_) => Ok(()),
        Err(b) => Err(blocked(path, &refs, b)),
    }
}

/// Whether some existing component of `path` is a symlink (a missing one ends the check): a grant
/// on such a path could never be used, so it is refused when made.
pub(crate) fn check_no_symlink(path: &Path) -> Result<(), FilesError> {
    let (parent, last) = match open_parent(path) {
        Err(FilesError::NotFound(_)) => return Ok(()),
        other => other?,
    };
    match last.map(|l| sysfs::stat_at(parent.as_fd(), &l)) {
        Some(Ok(st)) if st.kind == sysfs::Kind::Symlink => Err(symlinked(path, path)),
        _ => Ok(()),
    }
}

/// The refusal of `path` because its component `at` is a symlink.
pub(crate) fn symlinked(path: &Path, at: &Path) -> FilesError {
    FilesError::Symlinked(format!(
        "{}: {} is a symlink; name the real directory",
        path.display(),
        at.display()
    ))
}

fn open_components(path: &Path, comps: &[OsString]) -> Result<OwnedFd, FilesError> {
    let root = sysfs::open_root().map_err(|e| FilesError::io("opening /", path, e))?;
    let refs: Vec<&OsStr> = comps.iter().map(OsString::as_os_str).collect();
    open_dirs(root.as_fd(), &refs, Missing::Refuse, Resolve::Auto)
        .map_err(|b| blocked(path, &refs, b))
}

/// The error for `path` (as `refs`) blocked by `b`.
fn blocked(path: &Path, refs: &[&OsStr], b: Blocked) -> FilesError {
    let upto = |i: usize| -> std::path::PathBuf {
        let start = if path.is_absolute() { "/" } else { "" };
        std::iter::once(OsStr::new(start))
            .chain(refs[..=i].iter().copied())
            .collect()
    };
    match b {
        Blocked::Symlink(i) => symlinked(path, &upto(i)),
        Blocked::Missing(_) | Blocked::NotDir(_) => {
            FilesError::NotFound(path.display().to_string())
        }
        Blocked::Io(e) => FilesError::io("opening", path, e),
    }
}
