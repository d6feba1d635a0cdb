//! A small pool of chunk-sized buffers for reads out of the output log and the chunks of a
//! `GET /v1/files` tar stream (`http/files.rs`). A chunk handed to a stream
//! lives until hyper has written it, then its buffer comes back here, so a busy stream cycles through
//! two or three buffers instead of asking the allocator (musl: `mmap`/`munmap` for large sizes) for a
//! fresh one per chunk. Small reads (a follower's few new lines) take an exact allocation instead, so
//! a thousand idle followers never pin a chunk-sized buffer each.

use std::sync::Mutex;

use bytes::Bytes;

use super::IO_CHUNK;

/// Buffers kept for reuse at most; more in flight at once are allocated and freed as usual. Four
/// `GET /v1/files` streams at once hold about four each (one filling, two queued, one being sent).
const KEEP: usize = 16;
/// Reads shorter than this take an exact allocation rather than a pooled buffer.
const SMALL: usize = 4096;

static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty buffer with room for `len` bytes (`len <= IO_CHUNK` for a pooled one).
pub fn take(len: usize) -> Vec<u8> {
    if !(SMALL..=IO_CHUNK).contains(&len) {
        return Vec::with_capacity(len);
    }
    let reused = FREE.lock().unwrap_or_else(|e| e.into_inner()).pop();
    reused.unwrap_or_else(|| Vec::with_capacity(IO_CHUNK))
}

/// Wraps a filled buffer as `Bytes`; a pooled buffer returns to the pool when the last clone drops.
pub fn bytes(buf: Vec<u8>) -> Bytes {
    if buf.capacity() == IO_CHUNK {
        Bytes::from_owner(Pooled(buf))
    } else {
        Bytes::from(buf)
    }
}

/// Number of buffers waiting in the pool (for tests).
#[cfg(test)]
pub fn idle() -> usize {
    FREE.lock().unwrap_or_else(|e| e.into_inner()).len()
}

struct Pooled(Vec<u8>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.0);
        buf.clear();
        let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < KEEP {
            free.push(buf);
        }
    }
}
