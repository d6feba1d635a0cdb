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
//! File contents are written sparse: a run of zeros (a GNU sparse entry's holes, which the `tar`
//! crate yields as zeros) is skipped with a seek, not written. Modes (setuid included), mtimes and,
//! when asked, owners (`meta.rs`) are set through the file's own fd after its contents are
//! written. Directories get theirs after the commit, deepest first, through fds opened below the
//! target; the target directory's own metadata (a `./` entry) is never applied.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use tar::{Archive, EntryType, Header};

use super::beneath::{Blocked, Resolve, kind_at, open_dirs, remove_tree};
use super::commit::{Explicit, Staged, blocked, finish_dirs};
use super::guard::{Guard, Limits};
use super::meta::{Meta, apply};
use super::{FilesError, check_request_path, entry_components, refused};
use crate::sys::fs::{self as sysfs, Kind};

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
    /// The upload's caps.
    pub limits: Limits,
    /// How parents are resolved (tests force the fallback walk).
    pub resolve: Resolve,
}

/// Entries deeper than this are refused: removing or merging a tree holds one fd per level.
pub const MAX_DEPTH: usize = 512;

/// Size of the one buffer file contents are streamed through.
const COPY_BUF: usize = 64 * 1024;

/// Zeros compared against (with `memcmp`) to find holes; small, as it sits in the binary.
static ZEROS: [u8; 512] = [0; 512];

/// Whether `buf` holds only zeros.
fn is_hole(buf: &[u8]) -> bool {
    buf.chunks(ZEROS.len()).all(|c| c == &ZEROS[..c.len()])
}

/// Extracts a tar stream under `dir` (absolute; created with parents if missing) with the
/// default caps. See [`extract_with`].
pub fn extract<R: Read>(
    reader: R,
    dir: &Path,
    same_owner: bool,
) -> Result<ExtractStats, FilesError> {
    let opts = Options {
        same_owner,
        limits: Limits::default(),
        resolve: Resolve::Auto,
    };
    extract_with(reader, dir, &opts)
}

/// Extracts a tar stream under `dir` (absolute; created with parents if missing; no symlink on
/// its path). The stream must end with the end-of-archive marker: one that simply stops is
/// refused as truncated. On any error nothing was changed in `dir`. Symlink mtimes are not kept.
pub fn extract_with<R: Read>(
    reader: R,
    dir: &Path,
    opts: &Options,
) -> Result<ExtractStats, FilesError> {
    check_request_path(dir)?;
    let mut staged = Staged::prepare(dir)?;
    let mut guard = Guard::new(reader, opts.limits);
    let mut unpacker = Unpacker {
        root: staged.root.as_fd(),
        existing: staged.existing.as_ref().map(AsFd::as_fd),
        opts: *opts,
        dirs: Vec::new(),
        stats: ExtractStats::default(),
        buf: vec![0; COPY_BUF],
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
    buf: Vec<u8>,
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
        let meta = Meta::read(header, self.opts.same_owner)
            .map_err(|what| FilesError::InvalidTar(format!("{shown:?}: bad {what}")))?;
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
                self.file(&shown, parent.as_fd(), last, size, data, meta)?
            }
            EntryType::Symlink => {
                let target = link_target("symlink without a target")?;
                let (parent, last) = self.place(&shown, &comps)?;
                self.symlink(&shown, parent.as_fd(), last, target, meta)?
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
    fn place<'c>(
        &self,
        shown: &str,
        comps: &[&'c OsStr],
    ) -> Result<(OwnedFd, &'c OsStr), FilesError> {
        let Some((last, parents)) = comps.split_last() else {
            return Err(refused(shown, "names the target directory itself"));
        };
        let parent = open_dirs(self.root, parents, true, self.opts.resolve)
            .map_err(|b| blocked(shown, parents, b))?;
        Ok((parent, last))
    }

    /// Makes room at `name` in `parent` for a new entry that is not a directory: removes what is
    /// there (a file or symlink is unlinked, never followed; a directory only if empty).
    fn clear(&self, shown: &str, parent: BorrowedFd<'_>, name: &OsStr) -> Result<(), FilesError> {
        let fail = |e| io_err("replacing", shown, e);
        match kind_at(parent, name).map_err(fail)? {
            None => Ok(()),
            Some(Kind::Dir) => sysfs::unlink_at(parent, name, true).map_err(|err| {
                if err.raw_os_error() == Some(libc::ENOTEMPTY) {
                    refused(shown, "would replace a non-empty directory")
                } else {
                    fail(err)
                }
            }),
            Some(_) => sysfs::unlink_at(parent, name, false).map_err(fail),
        }
    }

    /// A directory: created unless one is already there; its metadata is set at the end.
    fn directory(&mut self, shown: &str, comps: &[&OsStr], meta: Meta) -> Result<(), FilesError> {
        if comps.is_empty() {
            return Ok(()); // the target itself: its metadata is left alone
        }
        let (parent, last) = self.place(shown, comps)?;
        if kind_at(parent.as_fd(), last).ok().flatten() != Some(Kind::Dir) {
            self.clear(shown, parent.as_fd(), last)?;
            sysfs::mkdir_at(parent.as_fd(), last, 0o755)
                .map_err(|e| io_err("creating", shown, e))?;
        }
        self.dirs
            .push((comps.iter().map(|c| c.to_os_string()).collect(), meta));
        Ok(())
    }

    /// A regular file: created anew, contents streamed (holes skipped), then owner, mode and
    /// mtime set by fd.
    fn file(
        &mut self,
        shown: &str,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        size: u64,
        data: &mut impl Read,
        meta: Meta,
    ) -> Result<(), FilesError> {
        let fail = |what: &str, e| io_err(what, shown, e);
        // `O_EXCL` first: in fresh staging the name is nearly always free (`clear` costs a call).
        let mut file: File = match sysfs::create_file_at(parent, name, 0o600) {
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                self.clear(shown, parent, name)?;
                sysfs::create_file_at(parent, name, 0o600)
            }
            created => created,
        }
        .map_err(|e| fail("creating", e))?;
        let (mut copied, mut hole_at_end) = (0u64, false);
        loop {
            let n = match data.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(err) => return Err(corrupt(err)),
            };
            hole_at_end = is_hole(&self.buf[..n]);
            if hole_at_end {
                file.seek(SeekFrom::Current(n as i64))
                    .map_err(|e| fail("writing", e))?;
            } else {
                file.write_all(&self.buf[..n])
                    .map_err(|e| fail("writing", e))?;
            }
            copied += n as u64;
        }
        if copied != size {
            return Err(refused(
                shown,
                "the stream ended inside the file's contents",
            ));
        }
        if hole_at_end {
            // The size a trailing seek did not give the file.
            file.set_len(copied).map_err(|e| fail("writing", e))?;
        }
        self.stats.bytes += copied;
        apply(&file, Path::new(shown), &meta)
    }

    /// A symlink: its target is free (it is never followed by later entries).
    fn symlink(
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
        Ok(())
    }

    /// A hard link to a regular file already below the root (staged, else in the existing
    /// target directory), reached without symlinks.
    fn hard_link(
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
            let dir = match open_dirs(root, tparents, false, self.opts.resolve) {
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
        self.clear(shown, parent.as_fd(), last)?;
        let fail = |e| io_err("linking", shown, e);
        sysfs::link_at(source.as_fd(), tlast, parent.as_fd(), last).map_err(fail)?;
        // The target could have been swapped between the check and the link: check what got linked.
        if kind_at(parent.as_fd(), last).map_err(fail)? != Some(Kind::File) {
            let _ = remove_tree(parent.as_fd(), last);
            return Err(refuse("hard link target is not a regular file"));
        }
        Ok(())
    }
}
