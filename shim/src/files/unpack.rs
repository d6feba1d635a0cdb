//! Extraction of a hostile tar stream under a target directory (`PUT /v1/files`).
//!
//! The stream goes through [`Guard`] (caps on its length and on extension headers, checked before
//! the `tar` crate buffers anything) and is extracted into a staging directory ([`Staged`], in
//! `commit.rs`) that is moved into place only when the stream was good to its end marker. Each
//! entry is checked before anything is written for it:
//! - its name must stay below the directory: no leading `/`, no `..` (see `entry_components`),
//!   at most [`MAX_DEPTH`] components;
//! - its parent is opened below the staging root by fd, never through a symlink
//!   (`beneath.rs`), so an earlier symlink entry (`a -> /etc`, then `a/passwd`) cannot redirect a
//!   later write; missing parents are created;
//! - whatever is already at the entry's own name (file, symlink, hard link, empty directory) is
//!   removed and the new entry created with `O_EXCL | O_NOFOLLOW` (a file tries `O_EXCL` first and
//!   removes what is there only when that fails with `EEXIST`);
//! - a hard link's target must be a regular file below the directory (staged, or already in the
//!   target directory), reached without symlinks;
//! - device files and FIFOs are refused; a file's apparent size may not exceed the upload cap.
//!
//! With an upload's `owner` (PROTOCOL.md 4.8.3) every entry gets it instead of the tar's owner
//! (regular files without set-user-ID and set-group-ID), and so does every directory the
//! extraction creates: parents made by `open_dirs` as they are created, `DIR`'s missing components
//! in `commit.rs`; hard links get none (they are their target's inode).
//!
//! Regular files are written by `unpack/contents.rs` (sparse: a run of zeros, as a GNU sparse entry's
//! holes come from the `tar` crate, is skipped with a seek; modes, mtimes and owners set through the
//! file's own fd after its contents), symlinks and hard links by `unpack/links.rs`. Directories get their
//! metadata after the commit, deepest first, through fds opened below the target; the target
//! directory's own metadata (a `./` entry) is never applied.

mod contents;
mod links;

use std::cell::Cell;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::rc::Rc;

use tar::{Archive, EntryType, Header};

use super::beneath::{Missing, Resolve, kind_at, open_dirs};
use super::commit::{Explicit, Staged, blocked, finish_dirs};
use super::guard::{Guard, Limits};
use super::meta::Meta;
use super::{FilesError, check_request_path, entry_components, refused};
use crate::sys::fs::{self as sysfs, Kind};
use contents::{ALIGN, COPY_BUF, Parent};
use protocol::owner::Owner;

/// What an extraction wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtractStats {
    /// Entries created or updated: files, directories, symlinks and hard links. Extension headers
    /// (long names, pax records) are not counted.
    pub entries: u64,
    /// Bytes of regular file contents (apparent size: holes included).
    pub bytes: u64,
}

/// How an extraction runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Chown entries to their uid/gid (the shim passes true when it runs as root).
    pub same_owner: bool,
    /// The owner of every entry and every directory the extraction creates, instead of the tar's
    /// (PROTOCOL.md 4.8.3); checked against what the shim may give before the extraction.
    pub owner: Option<Owner>,
    /// The upload's caps.
    pub limits: Limits,
    /// How parents are resolved (tests force the fallback walk).
    pub resolve: Resolve,
}

/// Entries deeper than this are refused: removing or merging a tree holds one fd per level.
pub(crate) const MAX_DEPTH: usize = 512;

/// Extracts a tar stream under `dir` (absolute; created with parents if missing) with the
/// default caps. See [`extract_with`].
#[cfg(test)]
pub(crate) fn extract<R: Read>(
    reader: R,
    dir: &Path,
    same_owner: bool,
) -> Result<ExtractStats, FilesError> {
    let opts = Options {
        same_owner,
        owner: None,
        limits: Limits::default(),
        resolve: Resolve::Auto,
    };
    extract_with(reader, dir, &opts)
}

/// Extracts a tar stream under `dir` (absolute; created with parents if missing; no symlink on
/// its path). The stream must end with the end-of-archive marker: one that simply stops is
/// refused as truncated. On any error nothing was changed in `dir`.
pub fn extract_with<R: Read>(
    reader: R,
    dir: &Path,
    opts: &Options,
) -> Result<ExtractStats, FilesError> {
    check_request_path(dir)?;
    let mut staged = Staged::prepare(dir, opts.owner)?;
    let mut guard = Guard::new(reader, opts.limits);
    let mut unpacker = Unpacker {
        root: staged.root.as_fd(),
        existing: staged.existing.as_ref().map(AsFd::as_fd),
        opts: *opts,
        dirs: Vec::new(),
        stats: ExtractStats::default(),
        buf: vec![0; COPY_BUF + ALIGN],
        parent: None,
    };
    let result = unpacker.run(&mut Archive::new(&mut guard));
    if let Some(exceeded) = guard.exceeded.take() {
        return Err(exceeded.into_error(&opts.limits));
    }
    result?;
    if guard.hit_end {
        return Err(FilesError::InvalidTar(
            "the stream ended without the end-of-archive marker".to_owned(),
        ));
    }
    let (stats, dirs) = (unpacker.stats, std::mem::take(&mut unpacker.dirs));
    let explicit = Explicit::of(dirs.iter().map(|(c, _)| c.iter().collect()).collect());
    let target = staged.commit(&explicit)?;
    finish_dirs(target.as_fd(), dirs, opts.resolve)?;
    Ok(stats)
}

/// An [`FilesError::Io`] for `what` (a verb phrase) on the entry `shown`.
fn io_err(what: &str, shown: &str, source: io::Error) -> FilesError {
    FilesError::Io {
        context: format!("{what} {shown:?}"),
        source,
    }
}

/// A tar stream error: the stream itself is broken (or could not be read).
fn corrupt(err: io::Error) -> FilesError {
    FilesError::InvalidTar(err.to_string())
}

/// The state of one extraction.
struct Unpacker<'a> {
    /// The staging copy of the target directory.
    root: BorrowedFd<'a>,
    /// The target directory when it existed before, for hard links to files already there.
    existing: Option<BorrowedFd<'a>>,
    opts: Options,
    /// Directories seen, by components below the root, with the metadata to give them at the end.
    dirs: Vec<(Vec<OsString>, Meta)>,
    stats: ExtractStats,
    /// File contents go through it ([`COPY_BUF`] bytes, aligned for direct I/O, in it).
    buf: Vec<u8>,
    /// The parent of the last entry placed, kept open for the next entries in the same directory.
    parent: Option<Rc<Parent>>,
}

impl Unpacker<'_> {
    /// Extracts every entry of `archive`.
    fn run<R: Read>(&mut self, archive: &mut Archive<R>) -> Result<(), FilesError> {
        for entry in archive.entries().map_err(corrupt)? {
            let mut entry = entry.map_err(corrupt)?;
            let header = entry.header().clone();
            let name = entry.path_bytes().into_owned();
            let link = entry.link_name_bytes().map(|l| l.into_owned());
            let size = entry.size();
            self.entry(&header, &name, link, size, &mut entry)?;
        }
        Ok(())
    }

    /// Checks and writes one entry.
    fn entry(
        &mut self,
        header: &Header,
        name: &[u8],
        link: Option<Vec<u8>>,
        size: u64,
        data: &mut impl Read,
    ) -> Result<(), FilesError> {
        let kind = header.entry_type();
        if kind.is_pax_global_extensions() {
            return Ok(());
        }
        let shown = String::from_utf8_lossy(name).into_owned();
        let comps = entry_components("entry", name)?;
        if comps.len() > MAX_DEPTH {
            return Err(FilesError::InvalidTar(format!(
                "{shown:?} is more than {MAX_DEPTH} directories deep"
            )));
        }
        let meta = Meta::read(header, self.opts.same_owner && self.opts.owner.is_none())
            .map_err(|what| FilesError::InvalidTar(format!("{shown:?}: bad {what}")))?
            .owned_by(self.opts.owner);
        let link_target = |what: &str| {
            link.as_deref()
                .filter(|l| !l.is_empty())
                .ok_or_else(|| refused(&shown, what))
        };
        let file_kind = matches!(
            kind,
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse
        );
        match kind {
            EntryType::Directory => self.directory(&shown, &comps, meta)?,
            // Pre-POSIX archives mark directories by the trailing slash alone.
            _ if file_kind && name.ends_with(b"/") && size == 0 => {
                self.directory(&shown, &comps, meta)?
            }
            _ if file_kind => {
                if size > self.opts.limits.max_bytes {
                    return Err(FilesError::TooLarge(format!(
                        "{shown:?} declares {size} bytes, more than the {} allowed",
                        self.opts.limits.max_bytes
                    )));
                }
                let (parent, last) = self.place(&shown, &comps)?;
                self.file(&shown, &parent, last, size, data, meta.for_file())?
            }
            EntryType::Symlink => {
                let target = link_target("symlink without a target")?;
                let (parent, last) = self.place(&shown, &comps)?;
                self.symlink(&shown, parent.fd.as_fd(), last, target, meta)?
            }
            EntryType::Link => {
                let target = entry_components(
                    "hard link target",
                    link_target("hard link without a target")?,
                )?;
                self.hard_link(&shown, &comps, &target)?
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                return Err(refused(&shown, "device files and FIFOs are refused"));
            }
            other => {
                return Err(FilesError::InvalidTar(format!(
                    "{shown:?}: unsupported entry type {:?}",
                    char::from(other.as_byte())
                )));
            }
        }
        self.stats.entries += 1;
        Ok(())
    }

    /// The opened parent of a (non-root) entry and its last component, creating missing parents.
    /// The parent is kept open for the next entries in the same directory (a stream lists a
    /// directory's entries together): one open per directory instead of an open and a close per
    /// entry. The staging directory is the shim's own and mode 0700, so nobody but root moves a
    /// directory in it meanwhile, and a kept fd stays the directory it was opened as, beneath the
    /// root without symlinks, whatever is renamed later.
    fn place<'c>(
        &mut self,
        shown: &str,
        comps: &[&'c OsStr],
    ) -> Result<(Rc<Parent>, &'c OsStr), FilesError> {
        let Some((last, parents)) = comps.split_last() else {
            return Err(refused(shown, "names the target directory itself"));
        };
        if let Some(p) = &self.parent
            && p.comps.len() == parents.len()
            && p.comps.iter().zip(parents).all(|(a, b)| a == b)
        {
            return Ok((p.clone(), last));
        }
        let make = Missing::Create(self.opts.owner);
        let fd = open_dirs(self.root, parents, make, self.opts.resolve)
            .map_err(|b| blocked(shown, parents, b))?;
        let parent = Rc::new(Parent {
            comps: parents.iter().map(|c| c.to_os_string()).collect(),
            fd,
            learned: Cell::new(None),
        });
        self.parent = Some(parent.clone());
        Ok((parent, last))
    }

    /// Makes room at `name` in `parent` for a new entry that is not a directory: removes what is
    /// there (a file or symlink is unlinked, never followed; a directory only if empty, which
    /// also forgets the kept parent, in case it was that directory).
    fn clear(
        &mut self,
        shown: &str,
        parent: BorrowedFd<'_>,
        name: &OsStr,
    ) -> Result<(), FilesError> {
        let fail = |e| io_err("replacing", shown, e);
        match kind_at(parent, name).map_err(fail)? {
            None => Ok(()),
            Some(Kind::Dir) => {
                self.parent = None;
                sysfs::unlink_at(parent, name, true).map_err(|err| {
                    if err.raw_os_error() == Some(libc::ENOTEMPTY) {
                        refused(shown, "would replace a non-empty directory")
                    } else {
                        fail(err)
                    }
                })
            }
            Some(_) => sysfs::unlink_at(parent, name, false).map_err(fail),
        }
    }

    /// A directory: created unless one is already there; its metadata is set at the end.
    fn directory(&mut self, shown: &str, comps: &[&OsStr], meta: Meta) -> Result<(), FilesError> {
        if comps.is_empty() {
            return Ok(()); // the target itself: its metadata is left alone
        }
        let (parent, last) = self.place(shown, comps)?;
        let dir = parent.fd.as_fd();
        if kind_at(dir, last).ok().flatten() != Some(Kind::Dir) {
            self.clear(shown, dir, last)?;
            sysfs::mkdir_at(dir, last, 0o755).map_err(|e| io_err("creating", shown, e))?;
        }
        self.dirs
            .push((comps.iter().map(|c| c.to_os_string()).collect(), meta));
        Ok(())
    }
}
