//! The output log of one process: every frame it produced, from offset 0 until the process is deleted.
//!
//! The first bytes live in memory (bounded per log and by a shim-wide [`Budget`]); once either bound is
//! reached, later bytes go to an unlinked spill file in the data directory, so the log's memory stays
//! bounded while nothing is ever dropped; a running process's newest spilled bytes wait in a write-behind
//! tail ([`behind`]) that reaches the file in page-aligned writes. Readers copy byte ranges out under the log's lock; followers
//! watch [`LogState`] to learn of new bytes. A sparse index of frame starts lets an offset be checked
//! for being a frame boundary without keeping one entry per frame.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use protocol::{FrameHeader, FrameType, HEADER_LEN};
use tokio::sync::watch;

/// Largest read from a process's pipe (hence the largest frame payload the shim writes; a client
/// resumes only from whole frames, so this also bounds what a flaky connection must carry to make
/// progress). Measured against 16, 32 and 128 KiB on one stream (README, footprint). Reads out of
/// the log into a stream take up to [`pool::STREAM_READ`].
pub(crate) const IO_CHUNK: usize = 64 * 1024;

/// Size of an in-memory chunk; chunks grow by doubling up to this, so a quiet process costs little.
const CHUNK: usize = 64 * 1024;
/// Distance between entries of the frame-start index.
const STRIDE: u64 = 64 * 1024;

/// Shim-wide accounting of output bytes, shared by every log.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    per_log: u64,
    memory: AtomicU64,
    disk: AtomicU64,
}

impl Budget {
    /// A budget of `limit` bytes in memory across all logs; one log keeps at most a sixteenth of it.
    pub(crate) fn new(limit: u64) -> Self {
        Budget {
            limit,
            per_log: (limit / 16).max(64 * 1024),
            memory: AtomicU64::new(0),
            disk: AtomicU64::new(0),
        }
    }

    fn try_take(&self, n: u64) -> bool {
        self.memory
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + n <= self.limit).then_some(used + n)
            })
            .is_ok()
    }

    /// Whether a spilling log gets a write-behind tail: only when one log's share holds it twice.
    fn tails(&self) -> bool {
        self.per_log >= 2 * behind::TAIL_CAP as u64
    }

    /// Bytes one log keeps in memory chunks: its share, less a tail's room when it may take one.
    fn chunk_limit(&self) -> u64 {
        if self.tails() {
            self.per_log - behind::TAIL_CAP as u64
        } else {
            self.per_log
        }
    }

    /// Bytes of output held in memory (write-behind tails count by their capacity).
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.memory.load(Ordering::Relaxed)
    }

    /// Bytes of output spilled to disk.
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.disk.load(Ordering::Relaxed)
    }
}

/// What followers of a log watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LogState {
    /// Offset just past the last frame.
    pub(crate) end: u64,
    /// The exit frame is in: nothing more will be appended.
    pub(crate) complete: bool,
    /// The process was deleted and the log freed: readers must stop.
    pub(crate) freed: bool,
}

#[derive(Debug, Default)]
struct Inner {
    chunks: Vec<Vec<u8>>,
    mem_len: u64,
    spilling: bool,
    spill: Option<behind::Spilled>,
    end: u64,
    index: Vec<u64>,
    complete: bool,
    freed: bool,
}

/// The output log of one process.
#[derive(Debug)]
pub(crate) struct OutputLog {
    inner: Mutex<Inner>,
    state: watch::Sender<LogState>,
    budget: Arc<Budget>,
    spill_dir: PathBuf,
}

impl OutputLog {
    /// An empty log that spills into `spill_dir`.
    pub(crate) fn new(budget: Arc<Budget>, spill_dir: PathBuf) -> Self {
        OutputLog {
            inner: Mutex::new(Inner::default()),
            state: watch::Sender::new(LogState::default()),
            budget,
            spill_dir,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock aborts the shim (panic = "abort"), so poisoning cannot be
        // observed; recover the guard rather than add a panic path.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one frame. On an I/O error (the spill file cannot be written) nothing is appended and
    /// the caller retries later with the same frame: that is the back-pressure path.
    pub(crate) fn append(&self, kind: FrameType, payload: &[u8]) -> io::Result<()> {
        let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
        frame.extend_from_slice(&[0; HEADER_LEN]);
        frame.extend_from_slice(payload);
        self.append_frame(kind, &mut frame)
    }

    /// Appends one frame whose payload follows `HEADER_LEN` bytes of room in `frame`; the header is
    /// written there, so the frame reaches memory or the spill file in one piece without a copy.
    /// Errors as [`OutputLog::append`].
    pub(crate) fn append_frame(&self, kind: FrameType, frame: &mut [u8]) -> io::Result<()> {
        let payload_len = frame
            .len()
            .checked_sub(HEADER_LEN)
            .ok_or_else(|| io::Error::other("frame without header room"))?;
        let len = u32::try_from(payload_len).map_err(|_| io::Error::other("frame too long"))?;
        let header = FrameHeader {
            kind,
            flags: 0,
            len,
        }
        .encode();
        frame[..HEADER_LEN].copy_from_slice(&header);
        let frame = &*frame;
        let mut inner = self.lock();
        if inner.freed || inner.complete {
            return Ok(());
        }
        let n = frame.len() as u64;
        if !inner.spilling
            && inner.mem_len + n <= self.budget.chunk_limit()
            && self.budget.try_take(n)
        {
            push_mem(&mut inner.chunks, frame);
            inner.mem_len += n;
        } else {
            inner.spilling = true;
            if inner.spill.is_none() {
                let file = spill::open(&self.spill_dir)?;
                let tail = self.budget.tails() && self.budget.try_take(behind::TAIL_CAP as u64);
                inner.spill = Some(behind::Spilled::new(file, tail));
            }
            let spilled = inner
                .spill
                .as_mut()
                .ok_or_else(|| io::Error::other("no spill file"))?;
            let before = spilled.written();
            spilled.append(frame)?;
            if kind == FrameType::Exit {
                // Nothing follows the exit frame: write the tail out and give its memory back. On
                // an error the tail stays readable in memory.
                if let Ok(true) = spilled.finish() {
                    self.budget
                        .memory
                        .fetch_sub(behind::TAIL_CAP as u64, Ordering::AcqRel);
                }
            }
            let wrote = spilled.written() - before;
            self.budget.disk.fetch_add(wrote, Ordering::Relaxed);
        }
        let start = inner.end;
        if start >= inner.index.len() as u64 * STRIDE {
            inner.index.push(start);
        }
        inner.end += n;
        inner.complete = kind == FrameType::Exit;
        let state = LogState {
            end: inner.end,
            complete: inner.complete,
            freed: false,
        };
        drop(inner);
        self.state.send_replace(state);
        Ok(())
    }

    /// The state followers watch.
    pub(crate) fn subscribe(&self) -> watch::Receiver<LogState> {
        self.state.subscribe()
    }

    /// The current state.
    pub(crate) fn state(&self) -> LogState {
        *self.state.borrow()
    }

    /// Up to `max` bytes of the log from `offset`, and never more than [`pool::STREAM_READ`] (fewer at the
    /// end; empty at or past it). The bytes live in a pooled buffer until the last clone is dropped.
    pub(crate) fn read(&self, offset: u64, max: usize) -> io::Result<Bytes> {
        let inner = self.lock();
        if inner.freed || offset >= inner.end {
            return Ok(Bytes::new());
        }
        let len = (inner.end - offset).min(max.min(pool::STREAM_READ) as u64) as usize;
        let mut buf = pool::take(len);
        read_range(&inner, offset, len, &mut buf)?;
        drop(inner);
        Ok(pool::bytes(buf))
    }

    /// Whether `offset` is a frame boundary within the log (0 and the end always are).
    pub(crate) fn is_boundary(&self, offset: u64) -> io::Result<bool> {
        let inner = self.lock();
        if offset == 0 || offset == inner.end {
            return Ok(true);
        }
        if offset > inner.end || inner.freed {
            return Ok(false);
        }
        let i = inner
            .index
            .partition_point(|&c| c <= offset)
            .saturating_sub(1);
        let mut pos = inner.index.get(i).copied().unwrap_or(0);
        let span_len = (offset + HEADER_LEN as u64).min(inner.end) - pos;
        let mut span = Vec::new();
        read_range(&inner, pos, span_len as usize, &mut span)?;
        let base = pos;
        while pos < offset {
            let at = (pos - base) as usize;
            let Some(head) = span
                .get(at..at + HEADER_LEN)
                .and_then(|h| h.first_chunk::<HEADER_LEN>())
            else {
                return Ok(false);
            };
            let header = FrameHeader::decode(head).map_err(io::Error::other)?;
            pos += header.frame_len();
        }
        Ok(pos == offset)
    }

    /// Releases the log's memory and spill file; later appends are ignored and followers stop.
    pub(crate) fn free(&self) {
        let mut inner = self.lock();
        if inner.freed {
            return;
        }
        self.release(&mut inner);
        inner.freed = true;
        let state = LogState {
            end: inner.end,
            complete: inner.complete,
            freed: true,
        };
        drop(inner);
        self.state.send_replace(state);
    }

    fn release(&self, inner: &mut Inner) {
        let (tail, written) = inner.spill.as_ref().map_or((0, 0), |s| {
            let tail = if s.has_tail() { behind::TAIL_CAP } else { 0 };
            (tail as u64, s.written())
        });
        self.budget
            .memory
            .fetch_sub(inner.mem_len + tail, Ordering::AcqRel);
        self.budget.disk.fetch_sub(written, Ordering::Relaxed);
        inner.chunks = Vec::new();
        inner.index = Vec::new();
        inner.spill = None;
        inner.mem_len = 0;
    }
}

impl Drop for OutputLog {
    fn drop(&mut self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !inner.freed {
            self.release(&mut inner);
            inner.freed = true;
        }
    }
}

fn push_mem(chunks: &mut Vec<Vec<u8>>, mut data: &[u8]) {
    while !data.is_empty() {
        let need_new = chunks.last().is_none_or(|c| c.len() == CHUNK);
        if need_new {
            chunks.push(Vec::with_capacity(
                data.len().clamp(512, CHUNK).next_power_of_two(),
            ));
        }
        let Some(last) = chunks.last_mut() else {
            return;
        };
        let take = (CHUNK - last.len()).min(data.len());
        last.extend_from_slice(&data[..take]);
        data = &data[take..];
    }
}

/// Appends `len` bytes from `offset` to `out`; the caller has checked the range lies within the log.
fn read_range(inner: &Inner, offset: u64, len: usize, out: &mut Vec<u8>) -> io::Result<()> {
    out.reserve(len);
    let mut pos = offset;
    let stop = offset + len as u64;
    while pos < stop && pos < inner.mem_len {
        let chunk = (pos / CHUNK as u64) as usize;
        let within = (pos % CHUNK as u64) as usize;
        let data = inner
            .chunks
            .get(chunk)
            .ok_or_else(|| io::Error::other("log chunk missing"))?;
        let take = ((stop - pos) as usize).min(data.len() - within);
        out.extend_from_slice(&data[within..within + take]);
        pos += take as u64;
    }
    if pos < stop {
        let spilled = inner
            .spill
            .as_ref()
            .ok_or_else(|| io::Error::other("spill file missing"))?;
        spilled.read(pos - inner.mem_len, (stop - pos) as usize, out)?;
    }
    Ok(())
}

mod behind;
pub(crate) mod pool;
mod spill;

#[cfg(test)]
mod tests;
