//! Writing a tar stream of a path (`GET /v1/files`), deterministic and resumable.
//!
//! The tree is walked depth first in name order, with an explicit stack (no recursion), through
//! directory descriptors: the path a request names is opened without following a symlink
//! (`open.rs`), each directory below from its parent's descriptor with `O_NOFOLLOW`, each file
//! from its directory's. A process of the pod that renames or swaps entries while the walk runs
//! can change which entries it lists, never make it leave the tree or read a file outside it.
//! Symlinks are stored as symlinks and never followed;
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
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, ErrorKind, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::Digest;
use tar::{EntryType, Header};

use super::open::{open_dir, open_parent};
use super::sink::{Sink, Validator, fill, header, padding};
use super::unpack::MAX_DEPTH;
use super::{FilesError, check_request_path};
use crate::sys::fs::{self as sysfs, Kind, Stat};

/// Writes a tar stream of `path` (as [`prepare_archive`] takes it) to `writer` and returns the
/// writer, flushed.
#[cfg(test)]
pub(crate) fn archive<W: Write>(path: &str, writer: W) -> Result<W, FilesError> {
    prepare_archive(path)?.write_from(writer, 0, None)
}

/// A path checked and opened, ready to be archived: lets a caller answer a bad or missing path with
/// its proper error before it starts a response. It holds the descriptor of the directory the top
/// entry is in, so every walk of it reaches the same tree, wherever a process of the pod moves
/// names meanwhile.
#[derive(Debug)]
pub(crate) struct ArchiveSource {
    /// The directory holding the top entry (for a directory's contents, that directory).
    root: OwnedFd,
    /// The top entry's name in `root`: `.` for a directory's contents.
    entry: OsString,
    /// The top entry's name in the archive.
    name: Vec<u8>,
    /// Where archive names are shown from in messages: `root`'s path as the request named it.
    shown: PathBuf,
}

/// Checks `path` and opens it, without writing anything.
///
/// `path` is the request's string as given: a trailing `/` on a directory means "its contents",
/// named `./`, `./a`, `./a/b`...; otherwise there is one entry named after the last component,
/// with everything below it when it is a directory (`dir/`, `dir/a`...). No symlink is followed:
/// one in the path is refused ([`FilesError::Symlinked`]; the last component without a trailing
/// `/` is stored as the symlink it is), and those below are stored as symlinks. Sockets, FIFOs and
/// device files are skipped.
pub(crate) fn prepare_archive(path: &str) -> Result<ArchiveSource, FilesError> {
    let top = Path::new(path);
    check_request_path(top)?;
    if path.ends_with('/') {
        return Ok(ArchiveSource {
            root: open_dir(top)?,
            entry: OsString::from("."),
            name: b".".to_vec(),
            shown: top.to_path_buf(),
        });
    }
    let (root, last) = open_parent(top)?;
    let last = last.ok_or_else(|| {
        FilesError::InvalidPath(format!("{path} has no last component to name the entry"))
    })?;
    sysfs::stat_at(root.as_fd(), &last).map_err(|err| match err.kind() {
        ErrorKind::NotFound => FilesError::NotFound(path.to_owned()),
        _ => FilesError::io("inspecting", top, err),
    })?;
    Ok(ArchiveSource {
        root,
        name: last.as_bytes().to_vec(),
        entry: last,
        shown: top.parent().unwrap_or(top).to_path_buf(),
    })
}

impl ArchiveSource {
    /// The contents of the directory `name` in `dir` (named `shown` in messages), opened without
    /// following a symlink.
    pub(crate) fn contents_of(
        dir: BorrowedFd<'_>,
        name: &OsStr,
        shown: PathBuf,
    ) -> Result<ArchiveSource, FilesError> {
        let root = sysfs::open_dir_at(dir, name).map_err(|e| match e.kind() {
            ErrorKind::NotFound => FilesError::NotFound(shown.display().to_string()),
            _ => super::open::symlinked(&shown, &shown),
        })?;
        Ok(ArchiveSource {
            root,
            entry: OsString::from("."),
            name: b".".to_vec(),
            shown,
        })
    }

    /// Another source of the same tree (writing consumes one).
    pub(crate) fn try_clone(&self) -> Result<ArchiveSource, FilesError> {
        Ok(ArchiveSource {
            root: self
                .root
                .try_clone()
                .map_err(|e| FilesError::io("opening", &self.shown, e))?,
            entry: self.entry.clone(),
            name: self.name.clone(),
            shown: self.shown.clone(),
        })
    }

    /// Walks the tree without reading any file and returns its stream's [`Validator`].
    pub(crate) fn validator(&self) -> Result<Validator, FilesError> {
        let mut sink = io::sink();
        let mut packer = Packer::new(&mut sink, 0, true, &self.shown);
        packer.walk(self.root.as_fd(), &self.entry, self.name.clone())?;
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
        let top = &self.shown;
        let mut packer = Packer::new(writer, offset, false, top);
        let mut result = packer.walk(self.root.as_fd(), &self.entry, self.name);
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
            .map_err(|err| FilesError::io("finishing the archive of", top, err))
    }
}

/// A directory being archived: its descriptor, the names in it still to store (last first), and
/// its name in the archive with a trailing `/`.
struct Frame {
    dir: OwnedFd,
    names: Vec<OsString>,
    prefix: Vec<u8>,
}

/// The state of one archive.
struct Packer<'w> {
    sink: Sink<'w>,
    /// Regular files with several links already stored, by (device, inode): their name in the
    /// archive, for the later names to link to.
    links: HashMap<(u64, u64), Vec<u8>>,
    /// Where archive names are shown from in messages.
    shown: &'w Path,
}

impl<'w> Packer<'w> {
    fn new(inner: &'w mut dyn Write, skip: u64, dry: bool, shown: &'w Path) -> Self {
        Packer {
            sink: Sink::new(inner, skip, dry),
            links: HashMap::new(),
            shown,
        }
    }

    /// The entry `name` of the archive as a path, for messages.
    fn at(&self, name: &[u8]) -> PathBuf {
        let rel = name.strip_prefix(b"./").unwrap_or(name);
        self.shown.join(OsStr::from_bytes(rel))
    }

    /// Stores `entry` of `root` under `name`, and everything below it: depth first in name order,
    /// every directory opened from its parent's descriptor without following a symlink and listed
    /// through its own, every file opened from its directory's, so the walk never leaves the tree
    /// whatever is renamed or swapped in it meanwhile. One descriptor is held per level, so the
    /// depth is bounded as an upload's is.
    fn walk(
        &mut self,
        root: BorrowedFd<'_>,
        entry: &OsStr,
        name: Vec<u8>,
    ) -> Result<(), FilesError> {
        let mut frames: Vec<Frame> = Vec::new();
        if let Some(frame) = self.entry(root, entry, name)? {
            frames.push(frame);
        }
        while let Some(frame) = frames.last_mut() {
            let Some(child) = frame.names.pop() else {
                frames.pop();
                continue;
            };
            let mut name = frame.prefix.clone();
            name.extend_from_slice(child.as_bytes());
            let dir = frame.dir.as_fd();
            let Some(next) = self.entry(dir, &child, name)? else {
                continue;
            };
            if frames.len() > MAX_DEPTH {
                return Err(FilesError::InvalidPath(format!(
                    "{}: more than 512 directories deep",
                    self.at(&next.prefix).display()
                )));
            }
            frames.push(next);
        }
        Ok(())
    }

    /// Stores the entry `entry` of `dir` under `name`; for a directory, returns it opened with its
    /// names, for the walk to descend into.
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &OsStr,
        name: Vec<u8>,
    ) -> Result<Option<Frame>, FilesError> {
        let st = sysfs::stat_at(dir, entry)
            .map_err(|err| FilesError::io("inspecting", &self.at(&name), err))?;
        match st.kind {
            Kind::Dir => self.directory(dir, entry, name).map(Some),
            Kind::Symlink => {
                let target = sysfs::read_link_at(dir, entry)
                    .map_err(|err| FilesError::io("reading", &self.at(&name), err))?;
                let h = header(EntryType::Symlink, &st, 0);
                self.append(h, &st, &name, Some(target.as_bytes()), None)
                    .map(|()| None)
            }
            Kind::File => self.file(dir, entry, name, &st).map(|()| None),
            Kind::Other => Ok(None),
        }
    }

    /// Stores a directory's header and opens it: the header is the opened directory's own
    /// (`fstat`), so a directory swapped for another meanwhile is stored as the one listed, and a
    /// symlink swapped in fails the open (`O_NOFOLLOW`).
    fn directory(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &OsStr,
        mut name: Vec<u8>,
    ) -> Result<Frame, FilesError> {
        name.push(b'/');
        let fail = |what, err| FilesError::io(what, &self.at(&name), err);
        let fd = sysfs::open_dir_at(dir, entry).map_err(|e| fail("opening", e))?;
        let st = sysfs::stat_fd(fd.as_fd()).map_err(|e| fail("inspecting", e))?;
        let names = sysfs::dir_names(fd.as_fd()).map_err(|e| fail("listing", e))?;
        let mut names = crate::order::sort_by(names, OsString::cmp);
        names.reverse();
        let h = header(EntryType::Directory, &st, 0);
        self.append(h, &st, &name, None, None)?;
        Ok(Frame {
            dir: fd,
            names,
            prefix: name,
        })
    }

    /// Stores a regular file, or a hard link to the first name it was stored under.
    fn file(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &OsStr,
        name: Vec<u8>,
        st: &Stat,
    ) -> Result<(), FilesError> {
        let key = (st.dev, st.ino);
        if st.nlink > 1 {
            if let Some(first) = self.links.get(&key).cloned() {
                let h = header(EntryType::Link, st, 0);
                return self.append(h, st, &name, Some(&first), None);
            }
            self.links.insert(key, name.clone());
        }
        if self.sink.dry {
            let h = header(EntryType::Regular, st, st.size);
            return self.append(h, st, &name, None, Some((None, st.size)));
        }
        // O_NOFOLLOW: a file swapped for a symlink since it was listed is not followed; O_NONBLOCK:
        // nor does one swapped for a FIFO hang the open.
        let fail = |what, err| FilesError::io(what, &self.at(&name), err);
        let file = sysfs::open_file_at(dir, entry).map_err(|e| fail("opening", e))?;
        let now = sysfs::stat_fd(file.as_fd()).map_err(|e| fail("inspecting", e))?;
        if (now.dev, now.ino) != key || now.kind != Kind::File {
            return Err(fail(
                "reading",
                io::Error::other("the file was replaced while being archived"),
            ));
        }
        let h = header(EntryType::Regular, &now, now.size);
        self.append(h, &now, &name, None, Some((Some(file), now.size)))
    }

    /// Appends one entry named `name` (of the file at `path`), preceded by GNU long-name entries
    /// for a name or link target that does not fit its header, followed by its contents.
    fn append(
        &mut self,
        mut header: Header,
        st: &Stat,
        name: &[u8],
        link: Option<&[u8]>,
        data: Option<(Option<File>, u64)>,
    ) -> Result<(), FilesError> {
        let path = self.at(name);
        let fail = |err| FilesError::io("archiving", &path, err);
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
        extra[..8].copy_from_slice(&st.ino.to_le_bytes());
        extra[8..16].copy_from_slice(&st.ctime.0.to_le_bytes());
        extra[16..20].copy_from_slice(&(st.ctime.1 as u32).to_le_bytes());
        extra[20..28].copy_from_slice(&st.mtime.1.to_le_bytes());
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
