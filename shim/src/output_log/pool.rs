//! Two small pools of buffers: chunk-sized ones ([`IO_CHUNK`]) for the chunks of a `GET /v1/files` tar
//! stream (`http/files.rs`) and reads of up to a chunk out of the output log, and stream-sized ones
//! ([`STREAM_READ`]) for a follower's reads of a log it is behind on. A buffer handed to a stream lives
//! until hyper has written it, then comes back here, so a busy stream cycles through two or three
//! buffers instead of asking the allocator (musl: `mmap`/`munmap` for large sizes) for a fresh one per
//! chunk. Small reads (a follower's few new lines) take an exact allocation instead, so a thousand idle
//! followers never pin a pooled buffer each.

use std::sync::Mutex;

use bytes::Bytes;

use super::IO_CHUNK;

/// Largest read out of the output log into one buffer: four reads of the pipe. A follower that is
/// behind (the process writes faster than the client reads, so the usual case on a busy stream)
/// moves a quarter as many chunks through the log's lock, `pread`, the stream's channel and hyper's
/// `writev` as with [`IO_CHUNK`]: 0.79 -> 0.72 shim CPU s per GiB (README, footprint).
pub(crate) const STREAM_READ: usize = 4 * IO_CHUNK;
/// Chunk-sized buffers kept for reuse at most; more in flight at once are allocated and freed as
/// usual. Four `GET /v1/files` streams at once hold about four each (one filling, two queued, one
/// being sent).
const KEEP: usize = 16;
/// Stream-sized buffers kept for reuse at most: a stream has about three in flight.
const KEEP_STREAM: usize = 4;
/// Reads shorter than this take an exact allocation rather than a pooled buffer.
const SMALL: usize = 4096;

static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
static FREE_STREAM: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// The pool of buffers of `capacity`, and how many it keeps.
fn class(capacity: usize) -> Option<(&'static Mutex<Vec<Vec<u8>>>, usize)> {
    match capacity {
        IO_CHUNK => Some((&FREE, KEEP)),
        STREAM_READ => Some((&FREE_STREAM, KEEP_STREAM)),
        _ => None,
    }
}

/// An empty buffer with room for `len` bytes (`len <= STREAM_READ` for a pooled one).
pub(crate) fn take(len: usize) -> Vec<u8> {
    let capacity = match len {
        n if !(SMALL..=STREAM_READ).contains(&n) => return Vec::with_capacity(len),
        n if n <= IO_CHUNK => IO_CHUNK,
        _ => STREAM_READ,
    };
    let reused = class(capacity).and_then(|(free, _)| lock(free).pop());
    reused.unwrap_or_else(|| Vec::with_capacity(capacity))
}

/// Wraps a filled buffer as `Bytes`; a pooled buffer returns to its pool when the last clone drops.
pub(crate) fn bytes(buf: Vec<u8>) -> Bytes {
    if class(buf.capacity()).is_some() {
        Bytes::from_owner(Pooled(buf))
    } else {
        Bytes::from(buf)
    }
}

fn lock(free: &Mutex<Vec<Vec<u8>>>) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
    free.lock().unwrap_or_else(|e| e.into_inner())
}

/// Number of chunk-sized and stream-sized buffers waiting in the pools (for tests).
#[cfg(test)]
pub(crate) fn idle() -> (usize, usize) {
    (lock(&FREE).len(), lock(&FREE_STREAM).len())
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
        if let Some((free, keep)) = class(buf.capacity()) {
            let mut free = lock(free);
            if free.len() < keep {
                free.push(buf);
            }
        }
    }
}
