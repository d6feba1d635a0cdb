//! Writing a tar stream of a path (`GET /v1/files`).
//!
//! The tree is walked depth first in name order, with an explicit stack (no recursion, no open
//! directory handle kept while descending). Symlinks are stored as symlinks and never followed;
//! a regular file seen again through another hard link is stored as a hard link to its first name.
//! Names longer than the 100 bytes of a header go in GNU long-name entries, which GNU tar, bsdtar
//! and the `tar` crate all read.
//!
//! A failure after the first byte was written (a file that vanishes or shrinks midway) ends the
//! stream there, without the end-of-archive marker, so the client sees a truncated archive rather
//! than a silently short one: the writer is closed before the `tar` builder's drop would append
//! the marker.

use std::collections::HashMap;
use std::fs::{self, Metadata, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tar::{Builder, EntryType, Header};

use super::{FilesError, check_request_path};

/// Writes a tar stream of `path` to `writer` and returns the writer, flushed.
///
/// `path` is the request's string as given: a trailing `/` on a directory means "its contents",
/// named `./`, `./a`, `./a/b`...; otherwise there is one entry named after the last component,
/// with everything below it when it is a directory (`dir/`, `dir/a`...). Symlinks are stored as
/// symlinks, never followed (except the directory named with a trailing `/` itself, as `ls dir/`
/// would). Sockets, FIFOs and device files are skipped.
pub fn archive<W: Write>(path: &str, writer: W) -> Result<W, FilesError> {
    prepare_archive(path)?.write(writer)
}

/// A path checked and found, ready to be archived: lets a caller answer a bad or missing path with
/// its proper error before it starts a response.
#[derive(Debug)]
pub struct ArchiveSource {
    top: std::path::PathBuf,
    name: Vec<u8>,
    meta: fs::Metadata,
}

/// Checks `path` (as [`archive`] takes it) and looks it up, without writing anything.
pub fn prepare_archive(path: &str) -> Result<ArchiveSource, FilesError> {
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
    /// Writes the tar stream to `writer` and returns the writer, flushed.
    pub fn write<W: Write>(self, writer: W) -> Result<W, FilesError> {
        let top = self.top;
        let mut packer = Packer {
            builder: Builder::new(Gate {
                inner: writer,
                open: true,
            }),
            links: HashMap::new(),
        };
        if let Err(err) = packer.walk(top.clone(), self.name, self.meta) {
            packer.builder.get_mut().open = false;
            return Err(err);
        }
        let finished = packer
            .builder
            .into_inner()
            .map_err(|err| FilesError::io("finishing the archive of", &top, err))?;
        let mut writer = finished.inner;
        writer
            .flush()
            .map_err(|err| FilesError::io("finishing the archive of", &top, err))?;
        Ok(writer)
    }
}

/// The state of one archive.
struct Packer<W: Write> {
    builder: Builder<Gate<W>>,
    /// Regular files with several links already stored, by (device, inode): their name in the
    /// archive, for the later names to link to.
    links: HashMap<(u64, u64), Vec<u8>>,
}

impl<W: Write> Packer<W> {
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
                self.append(
                    &path,
                    header(EntryType::Directory, &meta, 0),
                    &dir_name,
                    None,
                    io::empty(),
                )?;
                let mut children = Vec::new();
                let entries =
                    fs::read_dir(&path).map_err(|err| FilesError::io("listing", &path, err))?;
                for entry in entries {
                    let entry = entry.map_err(|err| FilesError::io("listing", &path, err))?;
                    children.push(entry.file_name());
                }
                children.sort();
                for child in children.into_iter().rev() {
                    let mut child_name = dir_name.clone();
                    child_name.extend_from_slice(child.as_bytes());
                    stack.push((path.join(&child), child_name, None));
                }
            } else if kind.is_symlink() {
                let target =
                    fs::read_link(&path).map_err(|err| FilesError::io("reading", &path, err))?;
                let header = header(EntryType::Symlink, &meta, 0);
                let target = target.as_os_str().as_bytes();
                self.append(&path, header, &name, Some(target), io::empty())?;
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
                let header = header(EntryType::Link, meta, 0);
                return self.append(path, header, &name, Some(&first), io::empty());
            }
            self.links.insert(key, name.clone());
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
        let data = Exact {
            inner: file,
            left: size,
        };
        self.append(
            path,
            header(EntryType::Regular, &now, size),
            &name,
            None,
            data,
        )
    }

    /// Appends one entry named `name` (of the file at `path`), preceded by GNU long-name entries
    /// for a name or link target that does not fit its header.
    fn append(
        &mut self,
        path: &Path,
        mut header: Header,
        name: &[u8],
        link: Option<&[u8]>,
        data: impl Read,
    ) -> Result<(), FilesError> {
        let fail = |err| FilesError::io("archiving", path, err);
        let old = header.as_old_mut();
        if name.len() > old.name.len() {
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
        self.builder.append(&header, data).map_err(fail)
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
        header.set_size(value.len() as u64 + 1);
        header.set_cksum();
        self.builder.append(&header, value.chain(&[0u8][..]))
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

/// Reads exactly `left` bytes of a file: no more if it grew since its size was taken, and an
/// error if it shrank, since the header already promised that size.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "the file shrank while being archived",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// The response writer, closed on failure so that nothing, the end-of-archive marker included,
/// follows a partial entry.
struct Gate<W> {
    inner: W,
    open: bool,
}

impl<W: Write> Write for Gate<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.open {
            return Err(io::Error::other("the archive was abandoned"));
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.open {
            return Err(io::Error::other("the archive was abandoned"));
        }
        self.inner.flush()
    }
}
