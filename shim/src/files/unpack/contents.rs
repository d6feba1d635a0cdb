//! A regular file of an extraction (`files/unpack.rs`): created anew in its (already opened) parent,
//! its contents streamed through one buffer with runs of zeros skipped as holes (a large file's
//! written with `O_DIRECT`, see `Limits::direct_min`), then owner, mode and mtime set through its own fd.
//!
//! Per small file this costs four system calls (create, write, mtime, close); a large file one
//! `write` per MiB of contents. Owner and mode are set only when the file did not get them at creation: the
//! first file created in a parent directory is asked (`fstat`) which owner files created there get
//! (the shim's own, or the directory's group under setgid) and whether the mode it was created with
//! came out as asked (the umask or a default ACL may take bits away); later files there with that
//! owner and that mode need no `fchown` and no `fchmod`. A mode with setuid, setgid or sticky bits
//! is always set after the contents, as a write clears setuid bits.

use std::cell::Cell;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{Unpacker, corrupt, io_err};
use crate::files::meta::{Meta, apply};
use crate::files::{FilesError, refused};
use crate::sys::direct::set_direct;
use crate::sys::fs as sysfs;

/// Size of the one buffer file contents are streamed through: at least the pull's receive buffer,
/// so that a large file's contents are read from the socket straight into it, and 1 MiB so that a
/// direct write is one large request to the disk (1 GiB pulled into ext4: 0.87 destination CPU s,
/// 1.04 with 256 KiB).
pub(super) const COPY_BUF: usize = 1024 * 1024;

/// Alignment of a direct write's buffer, offset and length (the largest logical block size).
pub(super) const ALIGN: usize = 4096;

/// Writes all of `chunk`; a direct write the file system refuses (`EINVAL`: no direct I/O there,
/// or an alignment it does not take) turns direct I/O off and goes on through the page cache.
fn write_chunk(file: &mut File, mut chunk: &[u8], direct: &mut bool) -> io::Result<()> {
    while !chunk.is_empty() {
        match file.write(chunk) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(k) => chunk = &chunk[k..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if *direct && e.raw_os_error() == Some(libc::EINVAL) => {
                *direct = false;
                set_direct(file.as_fd(), false)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Granularity of holes: an aligned run of zeros this long is skipped, not written.
const HOLE: usize = 64 * 1024;

/// Zeros compared against (with `memcmp`) to find holes; small, as it sits in the binary.
static ZEROS: [u8; 512] = [0; 512];

/// Whether `buf` holds only zeros.
fn is_hole(buf: &[u8]) -> bool {
    buf.chunks(ZEROS.len()).all(|c| c == &ZEROS[..c.len()])
}

/// An opened parent directory, kept while consecutive entries go into it.
#[derive(Debug)]
pub(super) struct Parent {
    /// Its components below the staging root.
    pub(super) comps: Vec<std::ffi::OsString>,
    pub(super) fd: OwnedFd,
    /// What a file created in it gets, once the first one was asked.
    pub(super) learned: Cell<Option<Learned>>,
}

/// What a file created in a directory gets: its owner, and whether a mode survived creation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Learned {
    owner: (u32, u32),
    /// A mode (permission bits only) a file was created with and got.
    kept_mode: Option<u32>,
}

impl Unpacker<'_> {
    /// A regular file: created anew, contents streamed (holes skipped), then owner (when it
    /// differs from the one it got), mode and mtime set by fd.
    pub(super) fn file(
        &mut self,
        shown: &str,
        parent: &Parent,
        name: &OsStr,
        size: u64,
        data: &mut impl Read,
        meta: Meta,
    ) -> Result<(), FilesError> {
        let fail = |what: &str, e| io_err(what, shown, e);
        let dir = parent.fd.as_fd();
        // Created with its mode unless setuid, setgid or sticky bits are asked for.
        let mode = if meta.mode & 0o7000 == 0 {
            meta.mode
        } else {
            0o600
        };
        // `O_EXCL` first: in fresh staging the name is nearly always free (`clear` costs a call).
        let mut file: File = match sysfs::create_file_at(dir, name, mode) {
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                self.clear(shown, dir, name)?;
                sysfs::create_file_at(dir, name, mode)
            }
            created => created,
        }
        .map_err(|e| fail("creating", e))?;
        self.contents(shown, &mut file, size, data)?;
        self.stats.bytes += size;
        let learned = learn(parent, &file, mode).map_err(|e| fail("inspecting", e))?;
        let mut meta = meta;
        if meta.owner == Some(learned.owner) {
            meta.owner = None;
        }
        // Without a chown, and with a mode that creation keeps, the file has its mode already.
        let set_mode = meta.mode != mode || learned.kept_mode != Some(mode);
        apply(&file, Path::new(shown), &meta, set_mode)
    }

    /// Streams a file's `size` bytes of contents from `data` into `file` a buffer at a time
    /// (straight to the disk when `size` is at least `direct_min`); refused if `data` ends first.
    fn contents(
        &mut self,
        shown: &str,
        file: &mut File,
        size: u64,
        data: &mut impl Read,
    ) -> Result<(), FilesError> {
        let fail = |e| io_err("writing", shown, e);
        // The buffer's window aligned for direct I/O (the whole buffer, unaligned, if that fails:
        // direct writes then answer `EINVAL` and the file goes through the page cache).
        let at = self.buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        let buf = &mut self.buf[at..at + COPY_BUF];
        let min = self.opts.limits.direct_min;
        let mut direct = min > 0 && size >= min && set_direct(file.as_fd(), true).is_ok();
        let (mut copied, mut hole_at_end) = (0u64, false);
        loop {
            // A whole buffer at a time: direct writes need aligned lengths.
            let n = fill(data, buf)?;
            if n == 0 {
                break;
            }
            hole_at_end = write_runs(file, &buf[..n], &mut direct).map_err(fail)?;
            copied += n as u64;
            if n < buf.len() {
                break;
            }
        }
        if copied != size {
            return Err(refused(
                shown,
                "the stream ended inside the file's contents",
            ));
        }
        if hole_at_end {
            // The size a trailing seek did not give the file.
            file.set_len(copied).map_err(fail)?;
        }
        Ok(())
    }
}

/// Reads from `data` until `buf` is full or the data ends; the bytes read.
fn fill(data: &mut impl Read, buf: &mut [u8]) -> Result<usize, FilesError> {
    let mut n = 0;
    while n < buf.len() {
        match data.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(corrupt(err)),
        }
    }
    Ok(n)
}

/// Writes `buf` at the file's offset in runs of whole [`HOLE`]-sized pieces: each run of zeros
/// skipped with one seek, each run of data one write (an unaligned tail turns `direct` off);
/// whether it ended in a hole.
fn write_runs(file: &mut File, buf: &[u8], direct: &mut bool) -> io::Result<bool> {
    let n = buf.len();
    let (mut at, mut hole_at_end) = (0, false);
    while at < n {
        let piece = |from: usize| &buf[from..(from + HOLE).min(n)];
        let hole = is_hole(piece(at));
        let mut end = (at + HOLE).min(n);
        while end < n && is_hole(piece(end)) == hole {
            end = (end + HOLE).min(n);
        }
        if hole {
            file.seek(SeekFrom::Current((end - at) as i64))?;
        } else {
            if *direct && !(end - at).is_multiple_of(ALIGN) {
                // The unaligned tail goes through the page cache.
                *direct = false;
                set_direct(file.as_fd(), false)?;
            }
            write_chunk(file, &buf[at..end], direct)?;
        }
        hole_at_end = hole;
        at = end;
    }
    Ok(hole_at_end)
}

/// What a file created in `parent` gets, asked of the first one (`file`, created with `mode`)
/// and remembered for the rest.
fn learn(parent: &Parent, file: &File, mode: u32) -> io::Result<Learned> {
    if let Some(learned) = parent.learned.get() {
        return Ok(learned);
    }
    let st = file.metadata()?;
    let learned = Learned {
        owner: (st.uid(), st.gid()),
        kept_mode: (st.mode() & 0o7777 == mode).then_some(mode),
    };
    parent.learned.set(Some(learned));
    Ok(learned)
}
