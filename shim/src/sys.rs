//! Every `unsafe` call of the shim, each wrapped in a small safe function: fork/exec of a process
//! in its own session, the single `waitpid` call (used only by the reaper), process-group signals,
//! pseudo-terminals, pipes and process-wide settings (the clone/exec itself lives in
//! `sys/exec.rs`, what the child runs in `sys/exec/child.rs`, its stack in `sys/child_stack.rs`,
//! reads into uninitialised buffers in `sys/buf.rs`, signals as fds in `sys/signals.rs`, the heap
//! on musl in `sys/alloc.rs`, the shim's own credentials and capabilities in `sys/creds.rs`). The
//! rest of the crate denies `unsafe`.
//!
//! Spawn safety: between `clone` and `execve` the child shares the shim's memory and runs only raw
//! system calls on data prepared before the clone (C strings, pointer arrays, fds), never allocating
//! or locking, because the shim is multi-threaded and another thread may hold the allocator's lock.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A close-on-exec pipe: (read end, write end).
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints; on success both fds are new and owned by us.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both fds were just returned by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Asks for a pipe buffer of `bytes` (the kernel rounds up to pages and caps it at
/// /proc/sys/fs/pipe-max-size); returns the size granted. Fewer, larger reads move output faster.
pub(crate) fn set_pipe_size(fd: &impl AsRawFd, bytes: usize) -> io::Result<usize> {
    // SAFETY: fcntl on a valid, owned fd with an integer argument.
    let n = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes as libc::c_int) })?;
    Ok(n as usize)
}

/// Sets or clears `O_NONBLOCK` on a fd (one `FIONBIO` call rather than a read and a write of the
/// flags: a spawn does this for every pipe).
pub(crate) fn set_nonblocking(fd: &OwnedFd, on: bool) -> io::Result<()> {
    let on = libc::c_int::from(on);
    // SAFETY: FIONBIO reads one int from a valid pointer; the fd is valid and owned.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONBIO, &on) })?;
    Ok(())
}

/// A new pseudo-terminal of the given size: (master, slave), both close-on-exec.
pub(crate) fn openpty(cols: u16, rows: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut master: RawFd = -1;
    let mut slave: RawFd = -1;
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: out-pointers are valid; name and termios are null (allowed); winsize is a valid struct.
    cvt(unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    })?;
    // SAFETY: openpty returned two new fds that we own.
    let (m, s) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&m, &s] {
        // SAFETY: fcntl on a valid fd we own.
        cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
    }
    Ok((m, s))
}

/// Sets the window size of a terminal (the kernel then signals SIGWINCH to its foreground group).
pub(crate) fn set_winsize(fd: &OwnedFd, cols: u16, rows: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize struct from a valid pointer.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) })?;
    Ok(())
}

/// The window size of a terminal: (cols, rows). Only the tests of [`set_winsize`] ask.
#[cfg(test)]
pub(crate) fn get_winsize(fd: &OwnedFd) -> io::Result<(u16, u16)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize struct to a valid pointer.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) })?;
    Ok((ws.ws_col, ws.ws_row))
}

/// Sends `sig` to the process group `pgid`.
pub(crate) fn kill_group(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill has no memory effects; a negative pid addresses a process group.
    cvt(unsafe { libc::kill(-pgid, sig) })?;
    Ok(())
}

/// Sends `sig` to the single process `pid` (never a group: `pid` must be above 1).
pub(crate) fn kill_pid(pid: i32, sig: i32) -> io::Result<()> {
    if pid <= 1 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill has no memory effects; a positive pid addresses one process.
    cvt(unsafe { libc::kill(pid, sig) })?;
    Ok(())
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaped {
    /// Exited with a code.
    Exited(i32, i32),
    /// Killed by a signal.
    Signaled(i32, i32),
}

/// Reaps one child without blocking: `Ok(None)` when no child is waiting to be reaped (or there are
/// no children). Only the reaper may call this: it is the shim's single `waitpid`.
pub(crate) fn reap_one() -> io::Result<Option<Reaped>> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: status is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid == 0 {
            return Ok(None);
        }
        if pid == -1 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ECHILD) => Ok(None),
                Some(libc::EINTR) => continue,
                _ => Err(err),
            };
        }
        if libc::WIFEXITED(status) {
            return Ok(Some(Reaped::Exited(pid, libc::WEXITSTATUS(status))));
        }
        if libc::WIFSIGNALED(status) {
            return Ok(Some(Reaped::Signaled(pid, libc::WTERMSIG(status))));
        }
        // Stopped/continued are not reported without WUNTRACED/WCONTINUED; loop defensively.
    }
}

/// Makes this process a child subreaper, so orphaned descendants are re-parented to it (as they are to
/// PID 1 anyway) and it can reap them.
pub(crate) fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) })?;
    Ok(())
}

/// Asks for SIGTERM when the thread that started this process ends, and says whether `parent` is
/// still this process's parent (if it ended before the request, no signal will come).
pub(crate) fn stop_with_parent(parent: i32) -> io::Result<bool> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    // SAFETY: getppid has no arguments and cannot fail.
    Ok(unsafe { libc::getppid() } == parent)
}

/// Marks this process non-dumpable: no core dumps, and a process of the same uid (a step) can
/// neither `ptrace` it nor read its memory through `/proc/<pid>/mem`. `execve` in a child resets
/// the flag for the new program, so the step's own processes stay debuggable.
pub(crate) fn set_non_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) })?;
    Ok(())
}

/// The open-files limit the shim started with, recorded by [`raise_nofile_limit`] for children.
static ORIGINAL_NOFILE: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// The open-files limit a child must get back: the one the shim started with, if the shim raised
/// its own (children must not inherit a limit raised for the shim's thousands of streams).
pub(crate) fn child_nofile_limit() -> Option<libc::rlimit> {
    ORIGINAL_NOFILE
        .get()
        .copied()
        .filter(|o| o.rlim_cur != o.rlim_max)
}

/// Raises the soft limit of open files to the hard limit (2,000 followed processes need several
/// thousand fds), returning the new soft limit. Processes started later get the original limit.
pub(crate) fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    let original = *ORIGINAL_NOFILE.get_or_init(|| lim);
    if original.rlim_cur == lim.rlim_max {
        return Ok(lim.rlim_cur);
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: valid in-pointer.
    cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(lim.rlim_cur)
}

/// Registers a file with the runtime's reactor. The `AsyncFd` takes ownership of the `File`, so the
/// fd can be neither closed nor replaced while registered.
pub(crate) fn async_fd(file: std::fs::File) -> io::Result<tokio::io::unix::AsyncFd<std::fs::File>> {
    // SAFETY: the File owns its fd for as long as the AsyncFd owns the File.
    unsafe { tokio::io::unix::AsyncFd::register(file) }.map_err(|e| e.into_parts().1)
}

/// Effective user id of the shim.
pub(crate) fn geteuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(target_env = "musl")]
mod alloc;
mod buf;
mod child_stack;
pub(crate) mod creds;
pub(crate) mod direct;
mod exec;
pub(crate) mod fs;
mod own_score;
mod signals;

pub(crate) use buf::read_spare;
pub(crate) use signals::{Signals, block_signals, take_signals, watch_signals};

pub(crate) use exec::{ChildStdio, Credentials, Exec, Forked, Stage, fork_exec};

#[cfg(test)]
mod tests;
