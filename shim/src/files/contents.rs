//! A regular file of an extraction (`unpack.rs`): created anew in its (already opened) parent,
//! its contents streamed through one buffer with runs of zeros skipped as holes, then owner, mode
//! and mtime set through its own fd.
//!
//! Per file this costs five system calls (create, write, mode, mtime, close), plus one `write` per
//! 256 KiB of contents. The owner is set only when the file did not get it at creation: the first
//! file created in a parent directory is asked (`fstat`) which owner files created there get (the
//! shim's own, or the directory's group under setgid), and a file whose header names that owner
//! needs no `fchown`. The mode is set after the contents: a write clears setuid bits.

use std::cell::Cell;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::meta::{Meta, apply};
use super::unpack::{Unpacker, corrupt, io_err};
use super::{FilesError, refused};
use crate::sys::fs as sysfs;

/// Size of the one buffer file contents are streamed through: as large as the pull's receive
/// buffer, so that a large file's contents are read from the socket straight into it.
pub(super) const COPY_BUF: usize = 256 * 1024;

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
    pub comps: Vec<std::ffi::OsString>,
    pub fd: OwnedFd,
    /// The owner a file created in it gets, once the first one was asked.
    pub owner: Cell<Option<(u32, u32)>>,
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
        // `O_EXCL` first: in fresh staging the name is nearly always free (`clear` costs a call).
        let mut file: File = match sysfs::create_file_at(dir, name, 0o600) {
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                self.clear(shown, dir, name)?;
                sysfs::create_file_at(dir, name, 0o600)
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
        let mut meta = meta;
        if let Some(wanted) = meta.owner {
            let got = match parent.owner.get() {
                Some(got) => got,
                None => {
                    let st = file.metadata().map_err(|e| fail("inspecting", e))?;
                    parent.owner.set(Some((st.uid(), st.gid())));
                    (st.uid(), st.gid())
                }
            };
            if got == wanted {
                meta.owner = None;
            }
        }
        apply(&file, Path::new(shown), &meta)
    }
}
