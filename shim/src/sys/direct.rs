//! Direct I/O on an open file (`files/contents.rs`): `O_DIRECT` turned on or off with
//! `fcntl(F_SETFL)`, so that a large file's contents go from the shim's buffer to the disk without
//! a page-cache copy, and its unaligned tail is written through the page cache.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::cvt;

/// Turns `O_DIRECT` on or off for `fd`; a file system without direct I/O answers `EINVAL`.
pub(crate) fn set_direct(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl with F_GETFL on a valid fd reads nothing from memory.
    let flags = cvt(unsafe { libc::fcntl(raw, libc::F_GETFL) })?;
    let flags = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    // SAFETY: F_SETFL on a valid fd with an int argument.
    cvt(unsafe { libc::fcntl(raw, libc::F_SETFL, flags) }).map(drop)
}
