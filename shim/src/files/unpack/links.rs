//! Symlinks and hard links of an extraction (`files/unpack.rs`). A symlink's target is stored as given
//! and never followed by later entries (parents are opened without symlinks); its own mtime is
//! kept. A hard link's target
//! must be a regular file already below the root (staged, else in the existing target directory),
//! reached without symlinks, and what got linked is checked after the link.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};

use super::{Unpacker, io_err};
use crate::files::beneath::{Blocked, Missing, kind_at, open_dirs, remove_tree};
use crate::files::meta::Meta;
use crate::files::{FilesError, refused};
use crate::sys::fs::{self as sysfs, Kind};

impl Unpacker<'_> {
    /// A symlink: its target is free (it is never followed by later entries).
    pub(super) fn symlink(
        &mut self,
        shown: &str,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        target: &[u8],
        meta: Meta,
    ) -> Result<(), FilesError> {
        if target.contains(&0) {
            return Err(refused(shown, "symlink target with a NUL byte"));
        }
        self.clear(shown, parent, name)?;
        let target = std::os::unix::ffi::OsStrExt::from_bytes(target);
        let fail = |what: &str, e| io_err(what, shown, e);
        sysfs::symlink_at(target, parent, name).map_err(|e| fail("creating symlink", e))?;
        if let Some((uid, gid)) = meta.owner {
            sysfs::lchown_at(parent, name, uid, gid)
                .map_err(|e| fail("changing the owner of", e))?;
        }
        // Through the parent fd with `AT_SYMLINK_NOFOLLOW`: the link's own mtime, never its target's.
        let secs = meta
            .mtime
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        sysfs::set_mtime_at(parent, name, secs).map_err(|e| fail("setting the mtime of", e))
    }

    /// A hard link to a regular file already below the root (staged, else in the existing
    /// target directory), reached without symlinks.
    pub(super) fn hard_link(
        &mut self,
        shown: &str,
        comps: &[&OsStr],
        target: &[&OsStr],
    ) -> Result<(), FilesError> {
        let refuse = |why: &str| refused(shown, why);
        let Some((tlast, tparents)) = target.split_last() else {
            return Err(refuse("hard link to the target directory"));
        };
        if comps == target {
            return Ok(());
        }
        let mut source = None;
        for root in std::iter::once(self.root).chain(self.existing) {
            let dir = match open_dirs(root, tparents, Missing::Refuse, self.opts.resolve) {
                Ok(dir) => dir,
                Err(Blocked::Missing(_)) => continue,
                Err(Blocked::Io(e)) => return Err(io_err("opening the target of", shown, e)),
                Err(_) => return Err(refuse("hard link target is or goes through a symlink")),
            };
            match kind_at(dir.as_fd(), tlast) {
                Ok(None) => continue,
                Ok(Some(Kind::File)) => {
                    source = Some(dir);
                    break;
                }
                Ok(Some(Kind::Symlink)) => return Err(refuse("hard link target is a symlink")),
                Ok(Some(_)) => return Err(refuse("hard link target is not a regular file")),
                Err(e) => return Err(io_err("inspecting the target of", shown, e)),
            }
        }
        let source = source.ok_or_else(|| refuse("hard link target does not exist"))?;
        let (parent, last) = self.place(shown, comps)?;
        let dir = parent.fd.as_fd();
        self.clear(shown, dir, last)?;
        let fail = |e| io_err("linking", shown, e);
        sysfs::link_at(source.as_fd(), tlast, dir, last).map_err(fail)?;
        // The target could have been swapped between the check and the link: check what got linked.
        if kind_at(dir, last).map_err(fail)? != Some(Kind::File) {
            let _ = remove_tree(dir, last);
            self.parent = None;
            return Err(refuse("hard link target is not a regular file"));
        }
        Ok(())
    }
}
