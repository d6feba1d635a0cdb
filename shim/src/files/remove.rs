//! `DELETE /v1/files?path=P` (PROTOCOL.md 4.8.2): removes a file, a symlink (itself) or a whole
//! tree without following any symlink. `P`'s parents are opened one component at a time from `/`
//! with `O_NOFOLLOW | O_DIRECTORY` (a symlinked component is refused, as for an upload's `DIR`);
//! the tree below is removed through directory fds (`beneath::remove_tree_within`), each entry
//! unlinked relative to its directory's fd, so a process of the pod that swaps a directory for a
//! symlink meanwhile makes the removal fail, never reach outside `P`. Depth is bounded like an
//! upload's entries ([`MAX_DEPTH`] levels below `P`): one fd is held per level.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::path::Path;

use super::beneath::{kind_at, remove_tree_within};
use super::commit::{not_a_dir, request_components};
use super::unpack::MAX_DEPTH;
use super::{FilesError, check_request_path};
use crate::sys::fs::{self as sysfs, Kind};

// The refusal's message names the limit as a literal (no formatting code for it).
const _: () = assert!(MAX_DEPTH == 512);

/// Removes `path` (absolute, not `/`, no symlinked component) and everything below it.
pub(crate) fn remove(path: &Path) -> Result<(), FilesError> {
    check_request_path(path)?;
    let invalid = |why: &str| FilesError::InvalidPath(format!("{}: {why}", path.display()));
    let comps = request_components(path)?;
    let Some((last, parents)) = comps.split_last() else {
        return Err(invalid("not removable"));
    };
    let missing = || FilesError::NotFound(path.display().to_string());
    let mut dir = sysfs::open_root().map_err(|e| FilesError::io("opening /", path, e))?;
    for (i, comp) in parents.iter().enumerate() {
        dir = match sysfs::open_dir_at(dir.as_fd(), comp) {
            Ok(fd) => fd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(missing()),
            Err(e) => return Err(not_a_dir(path, &parents[..=i], dir.as_fd(), comp, e)),
        };
    }
    let last: &OsStr = last;
    let kind = kind_at(dir.as_fd(), last).map_err(|e| FilesError::io("inspecting", path, e))?;
    // A trailing `/` changes nothing: a symlink at `P` is removed itself, never followed.
    let removed = match kind {
        None => return Err(missing()),
        Some(Kind::Dir) => remove_tree_within(dir.as_fd(), last, MAX_DEPTH + 1),
        Some(_) => sysfs::unlink_at(dir.as_fd(), last, false).map(|()| true),
    };
    match removed {
        Ok(true) => Ok(()),
        Ok(false) => Err(invalid("more than 512 directories deep; partly removed")),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(missing()),
        Err(e) => Err(FilesError::io("removing", path, e)),
    }
}
