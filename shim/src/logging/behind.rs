//! Lines written behind: info and finer lines wait in memory for up to `STEPSHIM_LOG_FLUSH_MS` and
//! reach stderr together. Each write to stderr wakes its reader (in a pod, the container runtime's
//! log copier, a Go process that then copies the line into the pod's log file); a spawn's line,
//! written right after the fork, had that reader compete for the node's CPUs with the process just
//! started and with the shim waiting for it. Errors and warnings are written at once, after every
//! line that waits, so the order of lines is kept; so is every line while no flusher runs (before
//! the runtime starts, after shutdown, or with a delay of 0). At most [`CAP`] bytes wait; a line
//! that would pass it writes everything at once.

use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Bytes that may wait for the flusher.
pub(crate) const CAP: usize = 64 * 1024;

/// Capacity kept for waiting lines after a flush; a burst's larger buffer is freed.
const KEEP: usize = 4096;

/// The lines waiting, in order.
static PENDING: Mutex<Pending> = Mutex::new(Pending { bytes: Vec::new() });
/// Milliseconds a line may wait; 0 while no flusher runs.
static DELAY_MS: AtomicU64 = AtomicU64::new(0);
/// Every line waits, errors and warnings too, while the shim starts (see [`hold`]).
static HELD: AtomicBool = AtomicBool::new(false);
/// Wakes the flusher when a first line starts waiting.
static WAKE: Notify = Notify::const_new();

/// What [`Pending::push`] asks of its caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Push {
    /// The line waits; `true` when it is the first one (the flusher must be woken).
    Waits(bool),
    /// Write these bytes now (everything that waited, then the line).
    WriteNow(Vec<u8>),
}

/// Lines waiting for a flush, bounded by a cap.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    bytes: Vec<u8>,
}

impl Pending {
    /// Adds `line`: it waits unless it is `urgent` or would take the waiting bytes past `cap`, in
    /// which case everything that waited comes back with it, in order.
    pub(crate) fn push(&mut self, line: &[u8], urgent: bool, cap: usize) -> Push {
        if urgent || self.bytes.len() + line.len() > cap {
            let mut out = self.take();
            out.extend_from_slice(line);
            return Push::WriteNow(out);
        }
        let first = self.bytes.is_empty();
        self.bytes.extend_from_slice(line);
        Push::Waits(first)
    }

    /// Everything waiting, leaving the buffer empty (and small).
    pub(crate) fn take(&mut self) -> Vec<u8> {
        let keep = self.bytes.capacity().min(KEEP);
        std::mem::replace(&mut self.bytes, Vec::with_capacity(keep))
    }
}

fn pending() -> std::sync::MutexGuard<'static, Pending> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

fn out(bytes: &[u8]) {
    if !bytes.is_empty() {
        // Logging never takes the shim down: a closed stderr is ignored.
        let _ = std::io::stderr().lock().write_all(bytes);
    }
}

/// Writes `line` (newline included) now or behind, as the module header says. The write happens
/// under the lock, so lines from several threads keep one order.
pub(crate) fn write(line: &[u8], urgent: bool) {
    let mut p = pending();
    let direct = DELAY_MS.load(Ordering::Relaxed) == 0;
    let held = HELD.load(Ordering::Relaxed);
    let first = match p.push(line, !held && (urgent || direct), CAP) {
        Push::WriteNow(bytes) => {
            out(&bytes);
            false
        }
        Push::Waits(first) => first,
    };
    drop(p);
    if first && !held {
        WAKE.notify_one();
    }
}

/// Writes every waiting line now.
pub(crate) fn flush() {
    let mut p = pending();
    let bytes = p.take();
    out(&bytes);
}

/// Stops holding lines back and writes the waiting ones: the shim is about to exit.
pub fn stop() {
    DELAY_MS.store(0, Ordering::Relaxed);
    flush();
}

/// Holds every line back until [`release`] or [`discard`]: while the shim starts, a start-up that
/// fails writes its one line and nothing else (PROTOCOL.md section 7).
pub fn hold() {
    HELD.store(true, Ordering::Relaxed);
}

/// Ends [`hold`] and writes the lines held: the shim started.
pub fn release() {
    HELD.store(false, Ordering::Relaxed);
    flush();
}

/// Ends [`hold`] and drops the lines held: the start-up failed, and its one line says why.
pub fn discard() {
    HELD.store(false, Ordering::Relaxed);
    drop(pending().take());
}

/// Holds info and finer lines back for up to `delay` from now on and writes them when it has
/// passed since the first of a batch; returns at once for a delay of 0. Runs for the life of the
/// runtime; [`stop`] ends the holding back.
pub(crate) async fn flusher(delay: Duration) {
    if delay.is_zero() {
        return;
    }
    let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX).max(1);
    DELAY_MS.store(ms, Ordering::Relaxed);
    loop {
        WAKE.notified().await;
        tokio::time::sleep(delay).await;
        flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_wait_until_urgent_or_the_cap_and_keep_their_order() {
        let mut p = Pending::default();
        assert_eq!(p.push(b"a\n", false, 8), Push::Waits(true));
        assert_eq!(p.push(b"b\n", false, 8), Push::Waits(false));
        assert_eq!(
            p.push(b"E\n", true, 8),
            Push::WriteNow(b"a\nb\nE\n".to_vec())
        );
        assert_eq!(p.push(b"c\n", false, 8), Push::Waits(true));
        assert_eq!(p.push(b"dddd\n", false, 8), Push::Waits(false));
        // 7 bytes wait; 2 more would pass the cap of 8.
        assert_eq!(
            p.push(b"e\n", false, 8),
            Push::WriteNow(b"c\ndddd\ne\n".to_vec())
        );
        assert_eq!(p.take(), b"");
    }

    #[test]
    fn a_flush_frees_a_bursts_buffer() {
        let mut p = Pending::default();
        for _ in 0..1000 {
            p.push(b"0123456789abcdef\n", false, CAP);
        }
        assert_eq!(p.take().len(), 17_000);
        assert!(p.bytes.capacity() <= KEEP, "{}", p.bytes.capacity());
    }
}
