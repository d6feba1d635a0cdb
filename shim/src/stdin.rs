//! A process's stdin: offset-idempotent writes from the stdin route into the process's pipe (or pty),
//! back-pressured by the pipe itself, and EOF.
//!
//! One request writes at a time (an async mutex), so `accepted` only moves forward and a retried
//! request skips exactly the bytes that already went in.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::BodyExt;
use protocol::StdinAck;
use tokio::io::unix::AsyncFd;

use crate::error::Error;

/// The terminal's end-of-file character (Ctrl-D), written for EOF on a tty.
const VEOF: u8 = 0x04;

/// The writing side of a process's stdin.
#[derive(Debug)]
pub(crate) struct Stdin {
    fd: tokio::sync::Mutex<Option<AsyncFd<File>>>,
    accepted: AtomicU64,
    closed: AtomicBool,
    tty: bool,
}

impl Stdin {
    /// Wraps a non-blocking fd: the write end of a stdin pipe, or a pty master.
    pub(crate) fn new(file: File, tty: bool) -> io::Result<Self> {
        Ok(Stdin {
            fd: tokio::sync::Mutex::new(Some(crate::sys::async_fd(file)?)),
            accepted: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            tty,
        })
    }

    /// Bytes written so far.
    pub(crate) fn offset(&self) -> u64 {
        self.accepted.load(Ordering::Acquire)
    }

    /// Whether EOF was sent or the process closed its end.
    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn ack(&self) -> StdinAck {
        StdinAck {
            stdin_offset: self.offset(),
            stdin_closed: self.closed(),
        }
    }

    /// Writes the body, whose first byte is at stdin offset `offset`, skipping bytes already accepted;
    /// then closes stdin if `eof`. `running` tells whether the process is still running.
    pub(crate) async fn write<B>(
        &self,
        offset: u64,
        mut body: B,
        eof: bool,
        running: bool,
        id: &str,
    ) -> Result<StdinAck, Error>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let mut guard = self.fd.lock().await;
        let accepted = self.offset();
        if offset > accepted {
            return Err(Error::StdinGap { offset, accepted });
        }
        let mut pos = offset;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Error::BadRequest(format!("reading stdin body: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let end = pos + data.len() as u64;
            let accepted = self.offset();
            if end > accepted {
                let fresh = data.slice((accepted - pos) as usize..);
                if self.closed() {
                    return Err(Error::StdinClosed { accepted });
                }
                if !running {
                    return Err(Error::NotRunning(id.to_owned()));
                }
                let Some(fd) = guard.as_ref() else {
                    return Err(Error::StdinClosed { accepted });
                };
                if let Err(e) = self.write_all(fd, &fresh).await {
                    if e.raw_os_error() == Some(libc::EPIPE) {
                        self.closed.store(true, Ordering::Release);
                        *guard = None;
                        return Err(Error::StdinClosed {
                            accepted: self.offset(),
                        });
                    }
                    return Err(Error::internal("writing stdin", e));
                }
            }
            pos = end;
        }
        if eof && !self.closed() {
            if self.tty {
                if let Some(fd) = guard.as_ref() {
                    // Best effort: a terminal whose reader is gone just drops it.
                    let _ = write_some(fd, &[VEOF]).await;
                }
            } else {
                *guard = None;
            }
            self.closed.store(true, Ordering::Release);
        }
        Ok(self.ack())
    }

    async fn write_all(&self, fd: &AsyncFd<File>, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = write_some(fd, data).await?;
            self.accepted.fetch_add(n as u64, Ordering::AcqRel);
            data = &data[n..];
        }
        Ok(())
    }
}

async fn write_some(fd: &AsyncFd<File>, data: &[u8]) -> io::Result<usize> {
    loop {
        let mut ready = fd.writable().await?;
        match ready.try_io(|f| f.get_ref().write(data)) {
            Ok(r) => return r,
            Err(_would_block) => continue,
        }
    }
}
