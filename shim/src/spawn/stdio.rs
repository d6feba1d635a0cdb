//! A child's standard streams: a pty, or pipes (stdin only when asked), made before the fork; the
//! shim's ends kept, registered with the reactor once the child runs; the child's copies closed.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;

use crate::error::Error;
use crate::pump::Sources;
use crate::stdin::Stdin;
use crate::sys::{self, ChildStdio};

/// The parent's ends of a child's output before the fork. The read ends of pipes are made
/// non-blocking and registered with the reactor only once the child runs: four system calls fewer
/// between a spawn request and the child's start (output written meanwhile is reported at once when
/// they are registered).
pub(super) enum Unwatched {
    Ready(Sources),
    Pipes(OwnedFd, OwnedFd),
}

/// A pipe's read end, non-blocking and registered with the reactor.
fn watch(fd: OwnedFd) -> Result<AsyncFd<File>, Error> {
    sys::set_nonblocking(&fd, true).map_err(|e| Error::io("configuring pipes", e))?;
    crate::sys::async_fd(File::from(fd)).map_err(|e| Error::io("polling pipes", e))
}

/// Both sides of a child's standard streams before the fork: the child's, and the shim's.
pub(super) struct Ends {
    /// What the child gets as 0, 1 and 2.
    pub(super) stdio: ChildStdio,
    /// Where the shim reads its output.
    pub(super) sources: Unwatched,
    /// Where the shim writes its stdin, if anywhere.
    pub(super) stdin: Option<Stdin>,
    /// The pty master, if any.
    pub(super) tty: Option<OwnedFd>,
}

/// The error context of a failed system call while setting up a child's streams.
fn io_err(context: &'static str) -> impl Fn(io::Error) -> Error {
    move |e| Error::io(context, e)
}

/// A pty of `size` for a child: the slave for it, the master to read, write and resize.
pub(super) fn pty(size: protocol::TtySize) -> Result<Ends, Error> {
    let (master, slave) = sys::openpty(size.cols, size.rows).map_err(io_err("opening a pty"))?;
    sys::set_nonblocking(&master, true).map_err(io_err("configuring the pty"))?;
    let reader = master.try_clone().map_err(io_err("duplicating the pty"))?;
    let writer = master.try_clone().map_err(io_err("duplicating the pty"))?;
    let sources = Unwatched::Ready(Sources::Tty(
        crate::sys::async_fd(File::from(reader)).map_err(io_err("polling the pty"))?,
    ));
    let stdin = Stdin::new(File::from(writer), true).map_err(io_err("polling the pty"))?;
    Ok(Ends {
        stdio: ChildStdio::Tty { slave },
        sources,
        stdin: Some(stdin),
        tty: Some(master),
    })
}

/// Pipes for a child's stdout and stderr, and for its stdin if it `wants_stdin`.
pub(super) fn pipes(wants_stdin: bool) -> Result<Ends, Error> {
    let (out_r, out_w) = sys::pipe().map_err(io_err("creating pipes"))?;
    let (err_r, err_w) = sys::pipe().map_err(io_err("creating pipes"))?;
    let (child_in, stdin) = if wants_stdin {
        let (r, w) = sys::pipe().map_err(io_err("creating pipes"))?;
        sys::set_nonblocking(&w, true).map_err(io_err("configuring pipes"))?;
        (
            Some(r),
            Some(Stdin::new(File::from(w), false).map_err(io_err("polling pipes"))?),
        )
    } else {
        (None, None)
    };
    Ok(Ends {
        stdio: ChildStdio::Fds {
            stdin: child_in,
            stdout: out_w,
            stderr: err_w,
        },
        sources: Unwatched::Pipes(out_r, err_r),
        stdin,
        tty: None,
    })
}

/// After the fork the child has its copies of `stdio`. The write ends of its output pipes stay
/// open here until it is reaped (when it `started`); everything else of ours closes now.
pub(super) fn keep_writers(stdio: ChildStdio, started: bool) -> Option<(OwnedFd, OwnedFd)> {
    match stdio {
        ChildStdio::Fds {
            stdin,
            stdout,
            stderr,
        } if started => {
            drop(stdin);
            Some((stdout, stderr))
        }
        other => {
            drop(other);
            None
        }
    }
}

/// The read ends of a running child's output pipes, watched.
pub(super) fn watch_pipes(out: OwnedFd, err: OwnedFd) -> Result<Sources, Error> {
    Ok(Sources::Pipes {
        out: watch(out)?,
        err: watch(err)?,
    })
}
