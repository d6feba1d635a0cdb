//! Extraction of a hostile tar stream under a target directory (`PUT /v1/files`).
//!
//! Entries are processed in order, each one checked before anything is written for it:
//! - its name must stay below the directory: no leading `/`, no `..` (see `entry_components`);
//! - every parent below the directory must be a real directory, never a symlink, so an earlier
//!   symlink entry (`a -> /etc`, then `a/passwd`) cannot redirect a later write; missing parents
//!   are created;
//! - whatever is already at the entry's own name (file, symlink, hard link, empty directory) is
//!   removed first and the new entry created with `O_EXCL`, so an existing symlink is replaced,
//!   never written through, and an existing hard link never shares the new contents;
//! - a hard link's target must be a regular file below the directory, reached without symlinks;
//! - device files and FIFOs are refused.
//!
//! Modes (setuid included), mtimes and, when asked, owners (`meta.rs`) are set through the file's
//! own fd after its contents are written. Directories get theirs at the end, deepest first, so a
//! read-only or freshly dated directory is not changed again by the entries written into it, and
//! only if the path still leads to a real directory (a later entry may have replaced it).

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, lchown, symlink};
use std::path::{Path, PathBuf};

use tar::{Archive, EntryType, Header};

use super::meta::{Meta, apply};
use super::{FilesError, check_request_path, entry_components};

/// What an extraction wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtractStats {
    /// Entries created or updated: files, directories, symlinks and hard links. Extension headers
    /// (long names, pax records) are not counted.
    pub entries: u64,
    /// Bytes of regular file contents written.
    pub bytes: u64,
}

/// Size of the one buffer file contents are streamed through.
const COPY_BUF: usize = 64 * 1024;

/// Extracts a tar stream under `dir` (absolute; created with parents if missing).
///
/// `same_owner`: chown entries to their uid/gid (the shim passes true when it runs as root).
/// The stream must end with the end-of-archive marker: a stream that simply stops is refused as
/// truncated, as is one that stops inside an entry. On error, entries before the faulty one may have
/// been written, but nothing outside `dir` ever is. Symlink mtimes are not kept.
pub fn extract<R: Read>(
    reader: R,
    dir: &Path,
    same_owner: bool,
) -> Result<ExtractStats, FilesError> {
    check_request_path(dir)?;
    let root = prepare_root(dir)?;
    let mut unpacker = Unpacker {
        root,
        same_owner,
        dirs: Vec::new(),
        stats: ExtractStats::default(),
        buf: vec![0; COPY_BUF],
    };
    let mut archive = Archive::new(EndWatch {
        inner: reader,
        hit_end: false,
    });
    for entry in archive.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let header = entry.header().clone();
        let name = entry.path_bytes().into_owned();
        let link = entry.link_name_bytes().map(|l| l.into_owned());
        let size = entry.size();
        unpacker.entry(&header, &name, link, size, &mut entry)?;
    }
    if archive.into_inner().hit_end {
        return Err(FilesError::InvalidTar(
            "the stream ended without the end-of-archive marker".to_owned(),
        ));
    }
    unpacker.finish_dirs()?;
    Ok(unpacker.stats)
}

/// Creates the target directory and resolves it: `dir` comes from the request and is trusted, so
/// symlinks in it are followed, once, here. Everything below it is checked entry by entry.
fn prepare_root(dir: &Path) -> Result<PathBuf, FilesError> {
    if let Err(err) = fs::create_dir_all(dir) {
        if matches!(
            err.kind(),
            ErrorKind::AlreadyExists | ErrorKind::NotADirectory
        ) {
            return Err(FilesError::InvalidPath(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        return Err(FilesError::io("creating", dir, err));
    }
    fs::canonicalize(dir).map_err(|err| FilesError::io("resolving", dir, err))
}

/// A tar stream error: the stream itself is broken (or could not be read).
fn corrupt(err: io::Error) -> FilesError {
    FilesError::InvalidTar(err.to_string())
}

/// Notes whether the stream reached its end. The tar reader stops at the first all-zero block
/// without reading further, so reaching the end means the end-of-archive marker was missing.
struct EndWatch<R> {
    inner: R,
    hit_end: bool,
}

impl<R: Read> Read for EndWatch<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.hit_end = true;
        }
        Ok(n)
    }
}

/// The state of one extraction.
struct Unpacker {
    /// The canonical target directory.
    root: PathBuf,
    same_owner: bool,
    /// Directories seen, relative to `root`, with the metadata to give them at the end.
    dirs: Vec<(PathBuf, Meta)>,
    stats: ExtractStats,
    buf: Vec<u8>,
}

impl Unpacker {
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
        let meta = Meta::read(header, self.same_owner)
            .map_err(|what| FilesError::InvalidTar(format!("{shown:?}: bad {what}")))?;
        let link_target = |what: &str| {
            link.as_deref()
                .filter(|l| !l.is_empty())
                .ok_or_else(|| FilesError::InvalidTar(format!("{what} {shown:?} has no target")))
        };
        match kind {
            EntryType::Directory => self.directory(&shown, &comps, meta)?,
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse
                if name.ends_with(b"/") && size == 0 =>
            {
                // Pre-POSIX archives mark directories by the trailing slash alone.
                self.directory(&shown, &comps, meta)?
            }
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                let path = self.place(&shown, &comps)?;
                self.file(&shown, &path, size, data, meta)?
            }
            EntryType::Symlink => {
                let target = link_target("symlink")?;
                let path = self.place(&shown, &comps)?;
                self.symlink(&shown, &path, target, meta)?
            }
            EntryType::Link => {
                let target = entry_components("hard link target", link_target("hard link")?)?;
                self.hard_link(&shown, &comps, &target)?
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                return Err(FilesError::InvalidTar(format!(
                    "{shown:?}: device files and FIFOs are refused"
                )));
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

    /// Returns where a (non-root) entry goes, after making sure each of its parents below the root
    /// is a real directory, creating missing ones. A parent that is a symlink is refused: following
    /// it could land anywhere.
    fn place(&self, shown: &str, comps: &[&OsStr]) -> Result<PathBuf, FilesError> {
        let Some((last, parents)) = comps.split_last() else {
            return Err(FilesError::InvalidTar(format!(
                "{shown:?} names the target directory itself"
            )));
        };
        let mut path = self.root.clone();
        for part in parents {
            path.push(part);
            let refuse = |what: &str| {
                let rel = path.strip_prefix(&self.root).unwrap_or(&path).display();
                FilesError::InvalidTar(format!("{shown:?}: parent {rel} is {what}"))
            };
            match fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => return Err(refuse("a symlink")),
                Ok(_) => return Err(refuse("not a directory")),
                Err(err) if err.kind() == ErrorKind::NotFound => {
                    fs::create_dir(&path).map_err(|e| FilesError::io("creating", &path, e))?;
                }
                Err(err) => return Err(FilesError::io("inspecting", &path, err)),
            }
        }
        path.push(last);
        Ok(path)
    }

    /// Makes room at `path` for a new entry that is not a directory: removes what is there (a file
    /// or symlink is unlinked, never followed; a directory only if empty).
    fn clear(&self, shown: &str, path: &Path) -> Result<(), FilesError> {
        match fs::symlink_metadata(path) {
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
            Err(err) => Err(FilesError::io("inspecting", path, err)),
            Ok(m) if m.is_dir() => fs::remove_dir(path).map_err(|err| {
                if err.kind() == ErrorKind::DirectoryNotEmpty {
                    FilesError::InvalidTar(format!("{shown:?} would replace a non-empty directory"))
                } else {
                    FilesError::io("removing", path, err)
                }
            }),
            Ok(_) => fs::remove_file(path).map_err(|err| FilesError::io("removing", path, err)),
        }
    }

    /// A directory: created unless one is already there; its metadata is set at the end.
    fn directory(&mut self, shown: &str, comps: &[&OsStr], meta: Meta) -> Result<(), FilesError> {
        if !comps.is_empty() {
            let path = self.place(shown, comps)?;
            let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
            if !is_dir {
                self.clear(shown, &path)?;
                fs::create_dir(&path).map_err(|err| FilesError::io("creating", &path, err))?;
            }
        }
        self.dirs.push((comps.iter().collect(), meta));
        Ok(())
    }

    /// A regular file: created anew, contents streamed, then owner, mode and mtime set by fd.
    fn file(
        &mut self,
        shown: &str,
        path: &Path,
        size: u64,
        data: &mut impl Read,
        meta: Meta,
    ) -> Result<(), FilesError> {
        self.clear(shown, path)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|err| FilesError::io("creating", path, err))?;
        let mut copied = 0u64;
        loop {
            let n = match data.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(err) => return Err(corrupt(err)),
            };
            file.write_all(&self.buf[..n])
                .map_err(|err| FilesError::io("writing", path, err))?;
            copied += n as u64;
        }
        if copied != size {
            return Err(FilesError::InvalidTar(format!(
                "{shown:?}: the stream ended inside the file's contents"
            )));
        }
        self.stats.bytes += copied;
        apply(&file, path, &meta)
    }

    /// A symlink: its target is free (it is never followed by later entries).
    fn symlink(
        &mut self,
        shown: &str,
        path: &Path,
        target: &[u8],
        meta: Meta,
    ) -> Result<(), FilesError> {
        if target.contains(&0) {
            return Err(FilesError::InvalidTar(format!(
                "symlink {shown:?} has a NUL byte in its target"
            )));
        }
        self.clear(shown, path)?;
        symlink(OsStr::from_bytes(target), path)
            .map_err(|err| FilesError::io("creating symlink", path, err))?;
        if let Some((uid, gid)) = meta.owner {
            lchown(path, Some(uid), Some(gid))
                .map_err(|err| FilesError::io("changing the owner of", path, err))?;
        }
        Ok(())
    }

    /// A hard link to a regular file already below the root, reached without symlinks.
    fn hard_link(
        &mut self,
        shown: &str,
        comps: &[&OsStr],
        target: &[&OsStr],
    ) -> Result<(), FilesError> {
        let refuse = |why: &str| FilesError::InvalidTar(format!("hard link {shown:?}: {why}"));
        if target.is_empty() {
            return Err(refuse("its target is the target directory"));
        }
        let mut source = self.root.clone();
        for (i, part) in target.iter().enumerate() {
            source.push(part);
            let last = i + 1 == target.len();
            match fs::symlink_metadata(&source) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(refuse("its target is or goes through a symlink"));
                }
                Ok(m) if (last && m.is_file()) || (!last && m.is_dir()) => {}
                Ok(_) if last => return Err(refuse("its target is not a regular file")),
                Ok(_) => return Err(refuse("its target's parent is not a directory")),
                Err(err) if err.kind() == ErrorKind::NotFound => {
                    return Err(refuse("its target does not exist"));
                }
                Err(err) => return Err(FilesError::io("inspecting", &source, err)),
            }
        }
        let path = self.place(shown, comps)?;
        if path == source {
            return Ok(());
        }
        self.clear(shown, &path)?;
        fs::hard_link(&source, &path).map_err(|err| FilesError::io("linking", &path, err))
    }

    /// Sets the metadata of the directories seen, deepest first (a later duplicate wins). One that
    /// a later entry replaced, or whose path now goes through a symlink, is left alone.
    fn finish_dirs(&mut self) -> Result<(), FilesError> {
        let mut dirs = std::mem::take(&mut self.dirs);
        dirs.sort_by_key(|(rel, _)| std::cmp::Reverse(rel.components().count()));
        for (rel, meta) in dirs {
            let mut path = self.root.clone();
            let mut real = true;
            for part in rel.components() {
                path.push(part);
                real = real && fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
            }
            if !real {
                continue;
            }
            let dir = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
                .open(&path)
                .map_err(|err| FilesError::io("opening", &path, err))?;
            apply(&dir, &path, &meta)?;
        }
        Ok(())
    }
}
