//! The spilled part of one output log: an unlinked file plus, while the process runs, a write-behind
//! tail in memory. Frames collect in the tail and reach the file in page-aligned writes of about
//! [`FLUSH`] bytes: the page cache takes aligned 256 KiB writes for about half the kernel CPU of the
//! unaligned 64 KiB + 8 frames one at a time (fewer, larger folios; this machine's ext4, README
//! footprint). A follower that keeps up reads the newest bytes from the tail, not back from the file.
//! The tail is flushed whole and freed when the exit frame is in, so a finished log holds no tail.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use protocol::HEADER_LEN;

use super::IO_CHUNK;

/// Tail bytes that trigger a write to the file.
const FLUSH: usize = 256 * 1024;
/// File writes are multiples of this, at offsets that are multiples of it.
const PAGE: usize = 4096;
/// Capacity of a tail: a flush threshold's worth, the unaligned rest of the last flush and one
/// largest frame, so appending never grows it.
pub(crate) const TAIL_CAP: usize = FLUSH + PAGE + HEADER_LEN + IO_CHUNK;

/// The spill file and its unwritten tail.
#[derive(Debug)]
pub(crate) struct Spilled {
    file: File,
    /// Bytes of the file written so far: the tail starts at this file offset.
    written: u64,
    /// Bytes not yet written; empty with no capacity when the log writes straight through.
    tail: Vec<u8>,
}

impl Spilled {
    /// A spill over `file`, with a tail when `tail` (its memory already accounted by the caller).
    pub(crate) fn new(file: File, tail: bool) -> Self {
        Spilled {
            file,
            written: 0,
            tail: if tail {
                Vec::with_capacity(TAIL_CAP)
            } else {
                Vec::new()
            },
        }
    }

    /// Bytes written to the file.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Whether a tail buffer is held (its capacity is accounted as memory).
    pub(crate) fn has_tail(&self) -> bool {
        self.tail.capacity() > 0
    }

    /// Appends one frame. On an error nothing is appended: the tail is as it was (the file may hold
    /// some of the bytes past `written`; a retry writes them again at the same offsets).
    pub(crate) fn append(&mut self, frame: &[u8]) -> io::Result<()> {
        if !self.has_tail() {
            self.file.write_all_at(frame, self.written)?;
            self.written += frame.len() as u64;
            return Ok(());
        }
        if self.tail.len() + frame.len() > self.tail.capacity() {
            // Only a frame larger than the shim's reads: write the tail and the frame through.
            self.flush(self.tail.len())?;
            self.file.write_all_at(frame, self.written)?;
            self.written += frame.len() as u64;
            return Ok(());
        }
        let before = self.tail.len();
        self.tail.extend_from_slice(frame);
        if self.tail.len() >= FLUSH {
            let aligned = self.tail.len() / PAGE * PAGE;
            if let Err(e) = self.flush(aligned) {
                self.tail.truncate(before);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes the whole tail and frees it; later appends write straight through. Returns whether a
    /// tail was freed (its memory can be given back). On an error the tail is kept.
    pub(crate) fn finish(&mut self) -> io::Result<bool> {
        if !self.has_tail() {
            return Ok(false);
        }
        self.flush(self.tail.len())?;
        self.tail = Vec::new();
        Ok(true)
    }

    /// Writes the first `n` tail bytes to the file and drops them from the tail.
    fn flush(&mut self, n: usize) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.file.write_all_at(&self.tail[..n], self.written)?;
        self.written += n as u64;
        // At most a page's worth (or nothing) is left to move to the front.
        self.tail.drain(..n);
        Ok(())
    }

    /// Appends `len` spilled bytes from spill offset `at` to `out` (the caller has checked the range).
    pub(crate) fn read(&self, mut at: u64, len: usize, out: &mut Vec<u8>) -> io::Result<()> {
        let stop = at + len as u64;
        // Bounded: every pass reads at least one byte or returns.
        while at < stop.min(self.written) {
            let want = (stop.min(self.written) - at) as usize;
            match crate::sys::read_spare(&self.file, out, want, Some(at))? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => at += n as u64,
            }
        }
        if at < stop {
            let from = (at - self.written) as usize;
            let to = (stop - self.written) as usize;
            let part = self
                .tail
                .get(from..to)
                .ok_or_else(|| io::Error::other("spill tail range missing"))?;
            out.extend_from_slice(part);
        }
        Ok(())
    }
}
