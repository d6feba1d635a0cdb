//! Reads into the spare capacity of a reused buffer: the kernel writes the bytes, so nothing zero-fills
//! space it is about to overwrite (under `opt-level = "z"` a zero-fill is a byte-at-a-time loop that
//! cost most of the output path's time).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Reads at most `max` bytes from `fd` onto the end of `buf` (growing its capacity if it has less than
/// `max` spare), with `pread` at `at` when given, else from the fd's position. Returns the bytes read,
/// 0 at end of file. Retries `EINTR`; `EAGAIN` and every other error are returned.
pub(crate) fn read_spare(
    fd: impl AsFd,
    buf: &mut Vec<u8>,
    max: usize,
    at: Option<u64>,
) -> io::Result<usize> {
    buf.reserve(max);
    let raw = fd.as_fd().as_raw_fd();
    loop {
        let spare = buf.spare_capacity_mut();
        let want = max.min(spare.len());
        let ptr = spare.as_mut_ptr().cast::<libc::c_void>();
        // SAFETY: `ptr` points to `want` writable bytes of `buf`'s spare capacity, which nothing else
        // borrows while this runs; the kernel writes at most `want` bytes there.
        let n = unsafe {
            match at {
                Some(off) => {
                    let off = libc::off_t::try_from(off)
                        .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
                    libc::pread(raw, ptr, want, off)
                }
                None => libc::read(raw, ptr, want),
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        // SAFETY: the kernel initialised the first `n <= want` bytes past the old length.
        unsafe { buf.set_len(buf.len() + n) };
        return Ok(n);
    }
}
