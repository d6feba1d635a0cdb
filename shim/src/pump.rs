//! The pump of one process: reads its stdout and stderr (or its terminal) into the output log as fast
//! as they produce, waits for the reaper's news of its exit, drains the pipes for a bounded window, and
//! writes the exit frame. If the log cannot take a frame (spill disk full) it stops reading, so the
//! process blocks on its own writes instead of losing output.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::{debug, warn};
use protocol::{Exit, FrameType, HEADER_LEN};
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep_until};

use crate::output_log::{IO_CHUNK, OutputLog};
use crate::proc::Proc;

thread_local! {
    /// One frame buffer per runtime thread (header room, then up to [`IO_CHUNK`] read straight from
    /// the pipe into uninitialised space): a read and its append happen without an await between
    /// them, so the buffer is never shared, and 2,000 quiet processes do not cost 2,000 buffers.
    static BUF: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(HEADER_LEN + IO_CHUNK));
}

/// The parent's ends of a process's output.
#[derive(Debug)]
pub(crate) enum Sources {
    /// Read ends of the stdout and stderr pipes.
    Pipes {
        /// stdout
        out: AsyncFd<File>,
        /// stderr
        err: AsyncFd<File>,
    },
    /// The pty master.
    Tty(AsyncFd<File>),
}

/// Buffer a stdout pipe gets once its writer has filled the default one (a full [`IO_CHUNK`] read):
/// a fast writer then goes on while the pump catches up. Asked for then rather than at the spawn,
/// where it cost every process a system call and the kernel an allocation; a refusal (a lowered
/// pipe-max-size, or the user's pipe quota) only costs speed.
const PIPE_SIZE: usize = 1 << 20;

/// Reads [`read_now`] makes at most: a full 1 MiB stdout pipe in [`IO_CHUNK`]s, and its end of file.
const READ_NOW_MAX: usize = (1 << 20) / IO_CHUNK + 1;

enum Outcome {
    /// Data appended; true when the read filled the chunk.
    Data(bool),
    Eof,
    /// The log refused the frame (header room, then payload); it must be appended before anything
    /// else is read.
    Stalled(Vec<u8>, io::Error),
}

/// Runs the pump until the exit frame is written.
pub(crate) async fn run(
    proc: Arc<Proc>,
    sources: Sources,
    reaped: oneshot::Receiver<Exit>,
    drain: Duration,
) {
    let (mut a, mut b) = match sources {
        Sources::Pipes { out, err } => (
            Some((out, FrameType::Stdout)),
            Some((err, FrameType::Stderr)),
        ),
        Sources::Tty(master) => (Some((master, FrameType::Stdout)), None),
    };
    // The stdout pipe still has its default size (see [`PIPE_SIZE`]).
    let mut small = b.is_some();
    let mut reaped = reaped;
    let mut exit: Option<Exit> = None;
    let mut deadline: Option<Instant> = None;
    // Sources at end of file once the exit is known: closed only after the exit frame is written and
    // its waiters have run, so a spawn waiting for the exit is answered before two `epoll_ctl` and
    // two `close` calls.
    let mut ended: Vec<(AsyncFd<File>, FrameType)> = Vec::new();
    while a.is_some() || b.is_some() || exit.is_none() {
        tokio::select! {
            out = pump_once(a.as_ref(), &proc.log), if a.is_some() => {
                if small && matches!(out, Ok((Outcome::Data(true), _))) && let Some((fd, _)) = &a {
                    small = false;
                    let _ = crate::sys::set_pipe_size(fd.get_ref(), PIPE_SIZE);
                }
                if handle(&proc, out, a.as_ref().map(|s| s.1)).await { a = None; }
            }
            out = pump_once(b.as_ref(), &proc.log), if b.is_some() => {
                if handle(&proc, out, b.as_ref().map(|s| s.1)).await { b = None; }
            }
            got = &mut reaped, if exit.is_none() => {
                // The sender lives in the Proc we hold, so it is never dropped unsent.
                let e = got.unwrap_or(Exit::code(255));
                exit = Some(e);
                deadline = Some(Instant::now() + drain);
                // The shim's write ends closed at the reap: unless the process left writers
                // behind, what is left reads at once and then end of file, without waiting for
                // the reactor to report the hang-up.
                for src in [&mut a, &mut b] {
                    let out = src.as_ref().map(|(fd, kind)| read_now(fd, *kind, &proc.log));
                    if let Some(out) = out
                        && handle(&proc, out, src.as_ref().map(|s| s.1)).await
                    {
                        ended.extend(src.take());
                    }
                }
            }
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                debug!(id = %proc.id, pid = proc.pid, "drain window over; closing output with writers left");
                break;
            }
        }
    }
    drop((a, b));
    let exit = exit.unwrap_or(Exit::code(255));
    let mut warned = false;
    while let Err(e) = proc.finish(exit) {
        if !warned {
            warn!(id = %proc.id, cause = %e, "cannot write exit frame; retrying");
            warned = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if !ended.is_empty() {
        tokio::task::yield_now().await;
        drop(ended);
    }
}

/// Returns true at end of file.
async fn handle(
    proc: &Proc,
    out: io::Result<(Outcome, FrameType)>,
    kind: Option<FrameType>,
) -> bool {
    match out {
        Ok((Outcome::Data(_), _)) => false,
        Ok((Outcome::Eof, _)) => true,
        Ok((Outcome::Stalled(mut frame, cause), kind)) => {
            warn!(id = %proc.id, %cause, "output log cannot take more; holding the process's pipes");
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if proc.log.append_frame(kind, &mut frame).is_ok() {
                    return false;
                }
            }
        }
        Err(e) => {
            warn!(id = %proc.id, ?kind, cause = %e, "reading process output failed; treating as end of file");
            true
        }
    }
}

async fn pump_once(
    src: Option<&(AsyncFd<File>, FrameType)>,
    log: &OutputLog,
) -> io::Result<(Outcome, FrameType)> {
    let Some((fd, kind)) = src else {
        return std::future::pending().await;
    };
    loop {
        let mut ready = fd.readable().await?;
        match ready.try_io(|f| read_one(f.get_ref(), *kind, log)) {
            Ok(r) => return r.map(|o| (o, *kind)),
            Err(_would_block) => continue,
        }
    }
}

/// Reads without waiting for readiness until end of file, a stall, or nothing more for now (then
/// `Data`: the pump's loop goes on waiting for the fd). Bounded: a writer the process left behind
/// may keep the pipe full, and the runtime has other work.
fn read_now(
    fd: &AsyncFd<File>,
    kind: FrameType,
    log: &OutputLog,
) -> io::Result<(Outcome, FrameType)> {
    for _ in 0..READ_NOW_MAX {
        match read_one(fd.get_ref(), kind, log) {
            Ok(Outcome::Data(_)) => continue,
            Ok(o) => return Ok((o, kind)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Ok((Outcome::Data(false), kind));
            }
            Err(e) => return Err(e),
        }
    }
    Ok((Outcome::Data(false), kind))
}

/// One read of at most [`IO_CHUNK`] into the thread's frame buffer, appended to the log.
fn read_one(f: &File, kind: FrameType, log: &OutputLog) -> io::Result<Outcome> {
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        buf.clear();
        buf.extend_from_slice(&[0; HEADER_LEN]);
        match crate::sys::read_spare(f, &mut buf, IO_CHUNK, None) {
            Ok(0) => Ok(Outcome::Eof),
            Ok(n) => Ok(match log.append_frame(kind, &mut buf) {
                Ok(()) => Outcome::Data(n == IO_CHUNK),
                Err(e) => Outcome::Stalled(buf.to_vec(), e),
            }),
            // A pty master reports EIO once every holder of the slave side has closed it.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => Ok(Outcome::Eof),
            Err(e) => Err(e),
        }
    })
}
