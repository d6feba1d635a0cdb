//! Directories below a directory fd, reached without ever leaving it: the only way extraction
//! finds where an entry goes.
//!
//! A relative path is opened in one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` call (Linux 5.6+); where that is missing (`ENOSYS`), a component is
//! missing (and is to be created), or the call fails, the path is walked one component at a time
//! with `openat(O_NOFOLLOW | O_DIRECTORY)` from the previous component's fd, which also says
//! exactly which component is in the way. Either way no symlink is ever followed, so a step
//! process swapping a directory for a symlink at any moment can make an open fail, never land
//! outside. Everything after the open (create, link, rename, chmod) is relative to the fd.

use std::ffi::{OsStr, OsString};
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys::fs::{self as sysfs, Kind};
use protocol::owner::Owner;

/// How a path is resolved: tests force each one; the shim uses [`Resolve::Auto`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// `openat2` when the kernel has it, else [`Resolve::Walk`].
    Auto,
    /// One `openat(O_NOFOLLOW)` per component.
    Walk,
}

/// What [`open_dirs`] does about a missing component.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Missing {
    /// Fails with [`Blocked::Missing`].
    Refuse,
    /// Creates it (mode 0755), owned by the given owner if any (an upload's `owner`): set
    /// through the new directory's fd, only on a directory this call created.
    Create(Option<Owner>),
}

/// Cleared the first time `openat2` answers `ENOSYS`.
static OPENAT2: AtomicBool = AtomicBool::new(true);

/// Why a directory could not be opened.
#[derive(Debug)]
pub(crate) enum Blocked {
    /// Component `i` is a symlink.
    Symlink(usize),
    /// Component `i` is neither a directory nor a symlink.
    NotDir(usize),
    /// Component `i` does not exist (and was not to be created).
    Missing(usize),
    /// The file system failed.
    Io(io::Error),
}

/// A new fd for `dir` itself.
pub(crate) fn reopen(dir: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    sysfs::open_dir_at(dir, OsStr::new("."))
}

/// Opens the directory `comps` below `root`, creating missing components as `missing` says.
pub(crate) fn open_dirs(
    root: BorrowedFd<'_>,
    comps: &[&OsStr],
    missing: Missing,
    how: Resolve,
) -> Result<OwnedFd, Blocked> {
    if comps.is_empty() {
        return reopen(root).map_err(Blocked::Io);
    }
    if how == Resolve::Auto && OPENAT2.load(Ordering::Relaxed) {
        let mut path = Vec::new();
        for (i, comp) in comps.iter().enumerate() {
            if i > 0 {
                path.push(b'/');
            }
            path.extend_from_slice(comp.as_bytes());
        }
        match sysfs::open_dir_beneath(root, OsStr::from_bytes(&path)) {
            Ok(fd) => return Ok(fd),
            Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {
                OPENAT2.store(false, Ordering::Relaxed);
            }
            // Missing, or in the way: the walk creates or says which component.
            Err(_) => {}
        }
    }
    walk(root, comps, missing)
}

/// Opens `comps` one component at a time.
fn walk(root: BorrowedFd<'_>, comps: &[&OsStr], missing: Missing) -> Result<OwnedFd, Blocked> {
    let mut cur = reopen(root).map_err(Blocked::Io)?;
    for (i, comp) in comps.iter().enumerate() {
        let mut opened = sysfs::open_dir_at(cur.as_fd(), comp);
        let mut made = None;
        if let Missing::Create(owner) = missing
            && matches!(&opened, Err(e) if e.kind() == ErrorKind::NotFound)
        {
            match sysfs::mkdir_at(cur.as_fd(), comp, 0o755) {
                Ok(()) => made = owner,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Blocked::Io(e)),
            }
            opened = sysfs::open_dir_at(cur.as_fd(), comp);
        }
        cur = match opened {
            Ok(fd) => fd,
            Err(e) => return Err(classify(cur.as_fd(), comp, i, e)),
        };
        if let Some(o) = made {
            give(&cur, o).map_err(Blocked::Io)?;
        }
    }
    Ok(cur)
}

/// Gives the directory or file open as `fd` the owner `o`, through the fd.
pub(crate) fn give(fd: &impl AsFd, o: Owner) -> io::Result<()> {
    std::os::unix::fs::fchown(fd, Some(o.uid), Some(o.gid))
}

/// Why opening directory `name` (component `i`) in `parent` failed with `err`.
fn classify(parent: BorrowedFd<'_>, name: &OsStr, i: usize, err: io::Error) -> Blocked {
    match err.raw_os_error() {
        Some(libc::ENOENT) => Blocked::Missing(i),
        Some(libc::ENOTDIR) | Some(libc::ELOOP) => match sysfs::stat_at(parent, name) {
            Ok(st) if st.kind == Kind::Symlink => Blocked::Symlink(i),
            Ok(st) if st.kind == Kind::Dir => Blocked::Io(err), // swapped back meanwhile
            Ok(_) => Blocked::NotDir(i),
            Err(e) if e.kind() == ErrorKind::NotFound => Blocked::Missing(i),
            Err(e) => Blocked::Io(e),
        },
        _ => Blocked::Io(err),
    }
}

/// The kind of `name` in `dir`, `None` when nothing is there.
pub(crate) fn kind_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<Kind>> {
    match sysfs::stat_at(dir, name) {
        Ok(st) => Ok(Some(st.kind)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes `name` in `dir` and everything below it, never following a symlink. Directories are
/// opened as they are descended (one fd per level), so depth costs descriptors: entry names are
/// limited in depth for that reason.
pub(crate) fn remove_tree(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    remove_tree_within(dir, name, usize::MAX).map(drop)
}

/// [`remove_tree`] holding at most `max_depth` directories open: at a directory deeper than
/// that below `name` the removal stops before entering it and answers `false` (the rest is
/// left). Each directory is opened `O_NOFOLLOW | O_DIRECTORY` from its parent's fd and its
/// entries unlinked relative to its own fd: a symlink swapped in for a directory fails the open.
pub(crate) fn remove_tree_within(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    max_depth: usize,
) -> io::Result<bool> {
    match kind_at(dir, name)? {
        None => return Ok(true),
        Some(Kind::Dir) => {}
        Some(_) => return ignore_missing(sysfs::unlink_at(dir, name, false)).map(|()| true),
    }
    let top = sysfs::open_dir_at(dir, name)?;
    let names = sysfs::dir_names(top.as_fd())?;
    let mut stack: Vec<(OwnedFd, Vec<OsString>, OsString)> = vec![(top, names, name.to_owned())];
    while let Some((fd, names, _)) = stack.last_mut() {
        if let Some(child) = names.pop() {
            if kind_at(fd.as_fd(), &child)? == Some(Kind::Dir) {
                let sub = sysfs::open_dir_at(fd.as_fd(), &child)?;
                if stack.len() >= max_depth {
                    return Ok(false);
                }
                let names = sysfs::dir_names(sub.as_fd())?;
                stack.push((sub, names, child));
            } else {
                ignore_missing(sysfs::unlink_at(fd.as_fd(), &child, false))?;
            }
            continue;
        }
        let Some((done, _, done_name)) = stack.pop() else {
            break;
        };
        drop(done);
        let parent = stack.last().map_or(dir, |(fd, _, _)| fd.as_fd());
        ignore_missing(sysfs::unlink_at(parent, &done_name, true))?;
    }
    Ok(true)
}

/// `Ok` for a name that vanished meanwhile.
fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        r => r,
    }
}
