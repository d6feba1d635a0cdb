//! Where an extraction writes and how it becomes visible: the target directory is resolved from
//! `/` without following any symlink, the tar stream is extracted into a fresh staging directory,
//! and only a stream that was good all the way to its end marker is moved into place.
//!
//! - When the target `DIR` exists, staging is `DIR/.stepshim-put-<random>` (mode 0700, same file
//!   system as what it replaces). On success, each staged entry is renamed over the entry of the
//!   same name in `DIR` (a directory present in both is merged the same way, recursively); a
//!   conflict that cannot be resolved (a file over a non-empty directory) is found by a first pass
//!   over both trees before anything is moved.
//! - When `DIR` does not exist, its deepest existing ancestor gets the staging directory, which
//!   holds the missing components and the tree; on success it is renamed to the first missing
//!   component in one step (or merged, if something appeared there meanwhile).
//!
//! On failure the staging directory is removed, so `DIR` is as it was. Directory metadata from
//! the stream is set last, through fds opened below `DIR`; `DIR`'s own is never changed.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use super::beneath::{Blocked, Missing, Resolve, give, kind_at, open_dirs, remove_tree, reopen};
use super::meta::{Meta, apply};
use super::{FilesError, refused};
use crate::sys::fs::{self as sysfs, Kind, Rename};
use protocol::owner::Owner;

/// A target directory with its staging directory, removed on drop unless committed.
#[derive(Debug)]
pub(crate) struct Staged {
    /// The request's path, for messages.
    dir: PathBuf,
    /// The directory holding the staging directory: `DIR` itself, or its deepest existing
    /// ancestor.
    anchor: OwnedFd,
    /// The staging directory's name in `anchor`.
    name: OsString,
    /// `DIR`'s missing components, below `anchor`; empty when `DIR` exists.
    missing: Vec<OsString>,
    /// Where the tree goes: the staging directory, or its copy of `DIR` when `DIR` is missing.
    pub(crate) root: OwnedFd,
    /// `DIR` itself when it existed, for hard links to files already there.
    pub(crate) existing: Option<OwnedFd>,
    /// The upload's `owner`: of `DIR`'s missing components too. The staging directory itself
    /// gets it only at the commit, once nothing more is written through it (until then it is the
    /// shim's, mode 0700, so no process of the pod can move what is being written).
    owner: Option<Owner>,
}

impl Staged {
    /// Resolves `dir` (absolute) without symlinks and makes the staging directory.
    pub(crate) fn prepare(dir: &Path, owner: Option<Owner>) -> Result<Staged, FilesError> {
        let mut comps = request_components(dir)?;
        let mut anchor = sysfs::open_root().map_err(|e| FilesError::io("opening /", dir, e))?;
        let mut found = 0;
        for comp in &comps {
            match sysfs::open_dir_at(anchor.as_fd(), comp) {
                Ok(fd) => anchor = fd,
                Err(e) if e.kind() == ErrorKind::NotFound => break,
                Err(e) => return Err(not_a_dir(dir, &comps[..=found], anchor.as_fd(), comp, e)),
            }
            found += 1;
        }
        let missing = comps.split_off(found);
        let name = OsString::from(format!(
            ".stepshim-put-{:016x}",
            sysfs::random_u64().map_err(|e| FilesError::io("naming staging for", dir, e))?
        ));
        sysfs::mkdir_at(anchor.as_fd(), &name, 0o700)
            .map_err(|e| FilesError::io("creating a staging directory in", dir, e))?;
        let mut staged = Staged {
            dir: dir.to_owned(),
            existing: None,
            root: reopen(anchor.as_fd()).map_err(|e| FilesError::io("opening", dir, e))?,
            anchor,
            name,
            missing,
            owner,
        };
        let stage = sysfs::open_dir_at(staged.anchor.as_fd(), &staged.name);
        staged.root = stage.map_err(|e| FilesError::io("opening staging in", dir, e))?;
        for comp in staged.missing.iter().skip(1) {
            let io = |e| FilesError::io("creating", dir, e);
            sysfs::mkdir_at(staged.root.as_fd(), comp, 0o755).map_err(io)?;
            staged.root = sysfs::open_dir_at(staged.root.as_fd(), comp).map_err(io)?;
            if let Some(o) = owner {
                give(&staged.root, o)
                    .map_err(|e| FilesError::io("changing the owner of", dir, e))?;
            }
        }
        if staged.missing.is_empty() {
            staged.existing =
                Some(reopen(staged.anchor.as_fd()).map_err(|e| FilesError::io("opening", dir, e))?);
        }
        Ok(staged)
    }

    /// Moves the staged tree into place and returns an fd of `DIR`. `explicit`: the directories
    /// the stream named (relative to `DIR`), which may replace a file or symlink already there;
    /// a directory made only as a parent may not. Sorted by their bytes ([`Explicit::of`]).
    pub(crate) fn commit(&mut self, explicit: &Explicit) -> Result<OwnedFd, FilesError> {
        let io = |what: &str, e: io::Error| FilesError::io(what, &self.dir, e);
        let stage = sysfs::open_dir_at(self.anchor.as_fd(), &self.name)
            .map_err(|e| io("opening staging in", e))?;
        let Some(first) = self.missing.first().cloned() else {
            // DIR existed: merge, leaving the staging directory itself.
            let to = Merge {
                skip: &self.name,
                dir: &self.dir,
                base: Path::new(""),
                explicit,
            };
            to.run(stage.as_fd(), self.anchor.as_fd())?;
            return reopen(self.anchor.as_fd()).map_err(|e| io("opening", e));
        };
        if let Some(o) = self.owner {
            give(&stage, o).map_err(|e| io("changing the owner of", e))?;
        }
        std::fs::File::from(stage.try_clone().map_err(|e| io("opening", e))?)
            .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| io("changing the mode of", e))?;
        let anchor = self.anchor.as_fd();
        match sysfs::rename_at(anchor, &self.name, anchor, &first, Rename::NoReplace) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                // Created meanwhile: merge into it like into any existing directory.
                let there = sysfs::open_dir_at(anchor, &first)
                    .map_err(|e| not_a_dir(&self.dir, &self.missing[..1], anchor, &first, e))?;
                let base: PathBuf = self.missing[1..].iter().collect();
                let to = Merge {
                    skip: OsStr::new(""),
                    dir: &self.dir,
                    base: &base,
                    explicit,
                };
                to.run(stage.as_fd(), there.as_fd())?;
            }
            Err(e) => return Err(io("moving staging into place for", e)),
        }
        let mut fd = reopen(anchor).map_err(|e| io("opening", e))?;
        for comp in &self.missing {
            fd = sysfs::open_dir_at(fd.as_fd(), comp).map_err(|e| io("opening", e))?;
        }
        Ok(fd)
    }
}

impl Drop for Staged {
    /// Removes the staging directory (everything, after a failure; emptied directories, after a
    /// merge).
    fn drop(&mut self) {
        if let Err(e) = remove_tree(self.anchor.as_fd(), &self.name) {
            crate::warn!(dir = %self.dir.display(), cause = %e, "removing a staging directory");
        }
    }
}

/// The components of an absolute path named by a request; `..` is refused.
pub(super) fn request_components(dir: &Path) -> Result<Vec<OsString>, FilesError> {
    let mut comps = Vec::new();
    for c in dir.components() {
        match c {
            Component::Normal(part) => comps.push(part.to_owned()),
            Component::RootDir | Component::CurDir => {}
            _ => {
                return Err(FilesError::InvalidPath(format!(
                    "{} contains `..`",
                    dir.display()
                )));
            }
        }
    }
    Ok(comps)
}

/// The error for component `name` of `dir` (the `upto` components so far) failing to open.
pub(super) fn not_a_dir(
    dir: &Path,
    upto: &[OsString],
    parent: BorrowedFd<'_>,
    name: &OsStr,
    err: io::Error,
) -> FilesError {
    let at: PathBuf = std::iter::once(OsStr::new("/"))
        .chain(upto.iter().map(OsString::as_os_str))
        .collect();
    let why = match sysfs::stat_at(parent, name).map(|s| s.kind) {
        Ok(Kind::Symlink) => "is a symlink; name the real directory",
        Ok(Kind::Dir) => return FilesError::io("opening", dir, err),
        Ok(_) => "is not a directory",
        Err(e) => return FilesError::io("opening", dir, e),
    };
    FilesError::InvalidPath(format!("{}: {} {why}", dir.display(), at.display()))
}

/// The directories a stream named, relative to `DIR`: sorted by their bytes and searched (a hash
/// set of paths costs the binary its own copy of the table code and of path hashing).
#[derive(Debug)]
pub(crate) struct Explicit(Vec<PathBuf>);

impl Explicit {
    /// The set of `paths`.
    pub(crate) fn of(paths: Vec<PathBuf>) -> Explicit {
        Explicit(crate::order::sort_by(paths, |a, b| bytes(a).cmp(bytes(b))))
    }

    /// Whether `path` is one of them (built from the same components, so equal as bytes).
    fn contains(&self, path: &Path) -> bool {
        self.0
            .binary_search_by(|p| bytes(p).cmp(bytes(path)))
            .is_ok()
    }
}

/// A path's bytes.
fn bytes(p: &Path) -> &[u8] {
    std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str())
}

/// A merge of a staged tree into an existing directory.
struct Merge<'a> {
    /// The staging directory's name in the top directory, left alone.
    skip: &'a OsStr,
    /// `DIR`, for messages.
    dir: &'a Path,
    /// Where `DIR` is in the staged tree.
    base: &'a Path,
    /// Directories named by the stream, relative to `DIR`.
    explicit: &'a Explicit,
}

impl Merge<'_> {
    /// Moves everything in `src` into `dst`: first checks that nothing would replace a non-empty
    /// directory and that no directory made only as a parent replaces a file or symlink, then renames.
    fn run(&self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> Result<(), FilesError> {
        let (skip, dir) = (self.skip, self.dir);
        for moving in [false, true] {
            let mut stack = vec![(reopen(src), reopen(dst), PathBuf::new())];
            while let Some((s, d, rel)) = stack.pop() {
                let io = |what: &str, e: io::Error| FilesError::io(what, &dir.join(&rel), e);
                let (s, d) = (
                    s.map_err(|e| io("opening", e))?,
                    d.map_err(|e| io("opening", e))?,
                );
                for name in sysfs::dir_names(s.as_fd()).map_err(|e| io("listing", e))? {
                    if rel.as_os_str().is_empty() && name == skip {
                        continue;
                    }
                    let here = rel.join(&name);
                    let src_dir = kind_at(s.as_fd(), &name).map_err(|e| io("inspecting", e))?
                        == Some(Kind::Dir);
                    let there = kind_at(d.as_fd(), &name).map_err(|e| io("inspecting", e))?;
                    match (src_dir, there) {
                        (true, Some(Kind::Dir)) => {
                            stack.push((
                                sysfs::open_dir_at(s.as_fd(), &name),
                                sysfs::open_dir_at(d.as_fd(), &name),
                                here,
                            ));
                        }
                        (false, Some(Kind::Dir)) if !moving => {
                            let sub = sysfs::open_dir_at(d.as_fd(), &name)
                                .and_then(|fd| sysfs::dir_names(fd.as_fd()))
                                .map_err(|e| io("inspecting", e))?;
                            if !sub.is_empty() {
                                return Err(non_empty(&here));
                            }
                        }
                        (true, Some(kind)) if !moving => {
                            let named = here.strip_prefix(self.base).unwrap_or(&here);
                            if !self.explicit.contains(named) {
                                let what = if kind == Kind::Symlink {
                                    "a symlink"
                                } else {
                                    "not a directory"
                                };
                                return Err(FilesError::InvalidTar(format!(
                                    "parent {} is {what}",
                                    named.display()
                                )));
                            }
                        }
                        _ if !moving => {}
                        (_, None) => place(s.as_fd(), d.as_fd(), &name, Rename::NoReplace)
                            .map_err(|e| io("moving into place", e))?,
                        (false, Some(Kind::Dir)) | (true, Some(_)) => {
                            let was_dir = there == Some(Kind::Dir);
                            match sysfs::unlink_at(d.as_fd(), &name, was_dir) {
                                Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
                                    return Err(non_empty(&here));
                                }
                                r => r.map_err(|e| io("removing", e))?,
                            }
                            place(s.as_fd(), d.as_fd(), &name, Rename::NoReplace)
                                .map_err(|e| io("moving into place", e))?;
                        }
                        (false, Some(_)) => place(s.as_fd(), d.as_fd(), &name, Rename::Replace)
                            .map_err(|e| io("moving into place", e))?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// The refusal of a staged entry at `here` over a non-empty directory.
fn non_empty(here: &Path) -> FilesError {
    refused(
        &here.display().to_string(),
        "would replace a non-empty directory",
    )
}

/// Renames `name` from `src` to `dst`.
fn place(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, name: &OsStr, how: Rename) -> io::Result<()> {
    sysfs::rename_at(src, name, dst, name, how)
}

/// A [`Blocked`] as the error of opening `comps` for `shown`.
pub(crate) fn blocked(shown: &str, comps: &[&OsStr], b: Blocked) -> FilesError {
    let (i, why) = match b {
        Blocked::Symlink(i) => (i, "is a symlink"),
        Blocked::NotDir(i) => (i, "is not a directory"),
        Blocked::Missing(i) => (i, "does not exist"),
        Blocked::Io(e) => {
            return FilesError::Io {
                context: format!("opening the parent of {shown:?}"),
                source: e,
            };
        }
    };
    let at: PathBuf = comps[..=i.min(comps.len().saturating_sub(1))]
        .iter()
        .collect();
    FilesError::InvalidTar(format!("{shown:?}: parent {} {why}", at.display()))
}

/// Sets the metadata of the directories seen, deepest first (a later duplicate wins), below the
/// committed target. One that is no longer a directory reached without symlinks is left alone.
pub(crate) fn finish_dirs(
    target: BorrowedFd<'_>,
    dirs: Vec<(Vec<OsString>, Meta)>,
    resolve: Resolve,
) -> Result<(), FilesError> {
    let dirs = crate::order::sort_by(dirs, |a, b| b.0.len().cmp(&a.0.len()));
    for (comps, meta) in dirs {
        let comps: Vec<&OsStr> = comps.iter().map(OsString::as_os_str).collect();
        let Ok(dir) = open_dirs(target, &comps, Missing::Refuse, resolve) else {
            continue;
        };
        let shown: std::path::PathBuf = comps.iter().collect();
        apply(&File::from(dir), &shown, &meta, true)?;
    }
    Ok(())
}
