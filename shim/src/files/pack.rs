//! Writing a tar stream of a path (`GET /v1/files`), deterministic and resumable.
//!
//! The tree is walked depth first in name order, with an explicit stack (no recursion, no open
//! directory handle kept while descending). Symlinks are stored as symlinks and never followed;
//! a regular file seen again through another hard link is stored as a hard link to its first name.
//! Names longer than the 100 bytes of a header go in GNU long-name entries, which GNU tar, bsdtar
//! and the `tar` crate all read.
//!
//! For an unchanged tree the stream is the same bytes every time, so a client may resume it at a
//! byte offset (PROTOCOL.md 4.8.1). [`ArchiveSource::validator`] walks the tree without reading
//! contents and gives its [`Validator`]: the stream's length and an ETag, a SHA-256 over every byte
//! of the stream but file contents (headers: names, sizes, modes, owners, mtimes, link targets)
//! and each entry's inode, change time and mtime nanoseconds. Writing from an offset skips what
//! lies before it without reading it (a file is read from its seek position).
//!
//! A failure after the first byte was written (a file that vanishes or shrinks midway, or a tree
//! that no longer matches the validator it was resumed with) ends the stream there, without the
//! end-of-archive marker, so the client sees a truncated archive rather than a silently short one.

use std::collections::HashMap;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::Digest;
use tar::{EntryType, Header};

use super::sink::{Sink, Validator, padding};
use super::{FilesError, check_request_path};

/// Writes a tar stream of `path` (as [`prepare_archive`] takes it) to `writer` and returns the
/// writer, flushed.
#[cfg(test)]
pub(crate) fn archive<W: Write>(path: &str, writer: W) -> Result<W, FilesError> {
    prepare_archive(path)?.write_from(writer, 0, None)
}

/// A path checked and found, ready to be archived: lets a caller answer a bad or missing path with
/// its proper error before it starts a response.
#[derive(Debug)]
pub(crate) struct ArchiveSource {
    top: PathBuf,
    name: Vec<u8>,
    meta: Metadata,
}

/// Checks `path` and looks it up, without writing anything.
///
/// `path` is the request's string as given: a trailing `/` on a directory means "its contents",
/// named `./`, `./a`, `./a/b`...; otherwise there is one entry named after the last component,
/// with everything below it when it is a directory (`dir/`, `dir/a`...). Symlinks are stored as
/// symlinks, never followed (except the directory named with a trailing `/` itself, as `ls dir/`
/// would). Sockets, FIFOs and device files are skipped.
pub(crate) fn prepare_archive(path: &str) -> Result<ArchiveSource, FilesError> {
    let top = Path::new(path);
    check_request_path(top)?;
    let contents = path.ends_with('/');
    let meta = if contents {
        fs::metadata(top)
    } else {
        fs::symlink_metadata(top)
    };
    let meta = meta.map_err(|err| match err.kind() {
        ErrorKind::NotFound | ErrorKind::NotADirectory => FilesError::NotFound(path.to_owned()),
        _ => FilesError::io("inspecting", top, err),
    })?;
    let name = if contents {
        b".".to_vec()
    } else {
        let last = top.file_name().ok_or_else(|| {
            FilesError::InvalidPath(format!("{path} has no last component to name the entry"))
        })?;
        last.as_bytes().to_vec()
    };
    Ok(ArchiveSource {
        top: top.to_path_buf(),
        name,
        meta,
    })
}

impl ArchiveSource {
    /// Walks the tree without reading any file and returns its stream's [`Validator`].
    pub(crate) fn validator(&self) -> Result<Validator, FilesError> {
        let mut sink = io::sink();
        let mut packer = Packer::new(&mut sink, 0, true);
        packer.walk(self.top.clone(), self.name.clone(), self.meta.clone())?;
        packer.sink.end()?;
        Ok(packer.sink.validator())
    }

    /// Writes the stream from byte `offset` on. With `expect`, the stream is cut before its
    /// end-of-archive marker unless the tree still has that validator: a resumed stream is never
    /// spliced from two different trees.
    pub(crate) fn write_from<W: Write>(
        self,
        mut writer: W,
        offset: u64,
        expect: Option<&Validator>,
    ) -> Result<W, FilesError> {
        self.write_dyn(&mut writer, offset, expect)?;
        Ok(writer)
    }

    /// [`ArchiveSource::write_from`] through one non-generic copy of the walk.
    fn write_dyn(
        self,
        writer: &mut dyn Write,
        offset: u64,
        expect: Option<&Validator>,
    ) -> Result<(), FilesError> {
        let top = self.top;
        let mut packer = Packer::new(writer, offset, false);
        let mut result = packer.walk(top.clone(), self.name, self.meta);
        if result.is_ok()
            && let Some(want) = expect
            && packer.sink.validator_at_end() != *want
        {
            result = Err(FilesError::Io {
                context: format!("archiving {}", top.display()),
                source: io::Error::other("the tree changed since the stream began"),
            });
        }
        if let Err(err) = result.and_then(|()| packer.sink.end()) {
            packer.sink.open = false;
            return Err(err);
        }
        packer
            .sink
            .inner
            .flush()
            .map_err(|err| FilesError::io("finishing the archive of", &top, err))
    }
}

/// The state of one archive.
struct Packer<'w> {
    sink: Sink<'w>,
    /// Regular files with several links already stored, by (device, inode): their name in the
    /// archive, for the later names to link to.
    links: HashMap<(u64, u64), Vec<u8>>,
}

impl<'w> Packer<'w> {
    fn new(inner: &'w mut dyn Write, skip: u64, dry: bool) -> Self {
        Packer {
            sink: Sink::new(inner, skip, dry),
            links: HashMap::new(),
        }
    }

    /// Stores `top` (whose metadata is `meta`) under `name`, and everything below it.
    fn walk(&mut self, top: PathBuf, name: Vec<u8>, meta: Metadata) -> Result<(), FilesError> {
        let mut stack = vec![(top, name, Some(meta))];
        while let Some((path, name, meta)) = stack.pop() {
            let meta = match meta {
                Some(meta) => meta,
                None => fs::symlink_metadata(&path)
                    .map_err(|err| FilesError::io("inspecting", &path, err))?,
            };
            let kind = meta.file_type();
            if kind.is_dir() {
                let mut dir_name = name.clone();
                dir_name.push(b'/');
                let h = header(EntryType::Directory, &meta, 0);
                self.append(&path, h, &meta, &dir_name, None, None)?;
                let mut children = Vec::new();
                let entries =
                    fs::read_dir(&path).map_err(|err| FilesError::io("listing", &path, err))?;
                for entry in entries {
                    let entry = entry.map_err(|err| FilesError::io("listing", &path, err))?;
                    children.push(entry.file_name());
                }
                for child in crate::order::sort_by(children, std::ffi::OsString::cmp)
                    .into_iter()
                    .rev()
                {
                    let mut child_name = dir_name.clone();
                    child_name.extend_from_slice(child.as_bytes());
                    stack.push((path.join(&child), child_name, None));
                }
            } else if kind.is_symlink() {
                let target =
                    fs::read_link(&path).map_err(|err| FilesError::io("reading", &path, err))?;
                let h = header(EntryType::Symlink, &meta, 0);
                let target = target.as_os_str().as_bytes();
                self.append(&path, h, &meta, &name, Some(target), None)?;
            } else if kind.is_file() {
                self.file(&path, name, &meta)?;
            }
        }
        Ok(())
    }

    /// Stores a regular file, or a hard link to the first name it was stored under.
    fn file(&mut self, path: &Path, name: Vec<u8>, meta: &Metadata) -> Result<(), FilesError> {
        let key = (meta.dev(), meta.ino());
        if meta.nlink() > 1 {
            if let Some(first) = self.links.get(&key).cloned() {
                let h = header(EntryType::Link, meta, 0);
                return self.append(path, h, meta, &name, Some(&first), None);
            }
            self.links.insert(key, name.clone());
        }
        if self.sink.dry {
            let h = header(EntryType::Regular, meta, meta.len());
            return self.append(path, h, meta, &name, None, Some((None, meta.len())));
        }
        // O_NOFOLLOW: a file swapped for a symlink since it was listed is not followed; O_NONBLOCK:
        // nor does one swapped for a FIFO hang the open.
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|err| FilesError::io("opening", path, err))?;
        let now = file
            .metadata()
            .map_err(|err| FilesError::io("inspecting", path, err))?;
        if (now.dev(), now.ino()) != key {
            return Err(FilesError::Io {
                context: format!("reading {}", path.display()),
                source: io::Error::other("the file was replaced while being archived"),
            });
        }
        let size = now.len();
        let h = header(EntryType::Regular, &now, size);
        self.append(path, h, &now, &name, None, Some((Some(file), size)))
    }

    /// Appends one entry named `name` (of the file at `path`), preceded by GNU long-name entries
    /// for a name or link target that does not fit its header, followed by its contents.
    fn append(
        &mut self,
        path: &Path,
        mut header: Header,
        meta: &Metadata,
        name: &[u8],
        link: Option<&[u8]>,
        data: Option<(Option<File>, u64)>,
    ) -> Result<(), FilesError> {
        let fail = |err| FilesError::io("archiving", path, err);
        if name.len() > header.as_old().name.len() {
            self.long_name(EntryType::GNULongName, name).map_err(fail)?;
        }
        fill(&mut header.as_old_mut().name, name);
        if let Some(link) = link {
            if link.len() > header.as_old().linkname.len() {
                self.long_name(EntryType::GNULongLink, link).map_err(fail)?;
            }
            fill(&mut header.as_old_mut().linkname, link);
        }
        header.set_cksum();
        // What the header does not show but a change of contents usually changes.
        let mut extra = [0u8; 28];
        extra[..8].copy_from_slice(&meta.ino().to_le_bytes());
        extra[8..16].copy_from_slice(&meta.ctime().to_le_bytes());
        extra[16..20].copy_from_slice(&(meta.ctime_nsec() as u32).to_le_bytes());
        extra[20..28].copy_from_slice(&meta.mtime_nsec().to_le_bytes());
        self.sink.hash.update(extra);
        self.sink.emit(header.as_bytes(), true).map_err(fail)?;
        if let Some((file, size)) = data {
            self.sink.emit_file(file, size).map_err(fail)?;
        }
        Ok(())
    }

    /// Appends a GNU long-name (`L`) or long-link (`K`) entry carrying `value`.
    fn long_name(&mut self, kind: EntryType, value: &[u8]) -> io::Result<()> {
        let mut header = Header::new_gnu();
        fill(&mut header.as_old_mut().name, b"././@LongLink");
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_entry_type(kind);
        let size = value.len() as u64 + 1;
        header.set_size(size);
        header.set_cksum();
        self.sink.emit(header.as_bytes(), true)?;
        self.sink.emit(value, true)?;
        self.sink.emit(&vec![0u8; 1 + padding(size) as usize], true)
    }
}

/// A header of type `kind` with the permissions, owner and mtime of `meta`, size `size`.
fn header(kind: EntryType, meta: &Metadata, size: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(meta.mode() & 0o7777);
    header.set_uid(meta.uid().into());
    header.set_gid(meta.gid().into());
    header.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
    header.set_size(size);
    header
}

/// Copies `value` into a header field, truncated to it and padded with NULs.
fn fill(field: &mut [u8], value: &[u8]) {
    let n = value.len().min(field.len());
    field[..n].copy_from_slice(&value[..n]);
    field[n..].fill(0);
}
