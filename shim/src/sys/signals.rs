//! The shim's signals as readable fds: SIGCHLD (the reaper's) and SIGTERM, SIGINT, SIGHUP and
//! SIGQUIT (shutdown) stay blocked in every thread and are taken from `signalfd`s, polled like any
//! socket.
//! No handler is installed for them:
//! - a handler costs each child's exit an interrupted `epoll_wait`, a signal frame, a write to the
//!   runtime's wake-up socket, a `rt_sigreturn` and two reads of that socket; the fd costs one read;
//! - a runtime's signal driver allocates per signal number (tokio: a watch channel for each of 64,
//!   22 KiB of the idle shim's heap), where the fds allocate nothing;
//! - a child of a spawn resets every caught signal before it unblocks them, so each handler is a
//!   system call more on the spawn path.
//!
//! A blocked signal is queued even where its default action would drop it (SIGTERM sent to the
//! init of a PID namespace, which the shim is in a pod), so the fd sees it. Children do not inherit
//! the blocked mask: the child of a spawn clears its mask before `execve`.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};

use super::cvt;

/// The signals the shim takes from fds, one fd per set.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Signals {
    /// SIGCHLD: a child ended (the reaper).
    Child,
    /// SIGTERM, SIGINT, SIGHUP and SIGQUIT: stop serving and end every process. The last two are
    /// there for a shim started from a terminal (`stepctl --local`): when the terminal hangs up,
    /// or on `Ctrl-\`, their default action would end the shim at once and leave the processes,
    /// each in a session of its own, running (the shim is not dumpable: SIGQUIT dumps no core).
    Shutdown,
}

impl Signals {
    fn set(self) -> libc::sigset_t {
        let signals: &[libc::c_int] = match self {
            Signals::Child => &[libc::SIGCHLD],
            Signals::Shutdown => &[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT],
        };
        // SAFETY: an all-zero sigset_t is a valid value, and the calls only write into it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &sig in signals {
                libc::sigaddset(&mut set, sig);
            }
            set
        }
    }
}

/// Blocks `signals` in the calling thread; threads it starts later inherit the mask. Called before
/// the shim starts any thread, so that no thread can take a signal instead of its fd (the default
/// action would discard SIGCHLD, and end the shim at once on SIGTERM outside a PID namespace).
pub(crate) fn block_signals(signals: Signals) -> io::Result<()> {
    let set = signals.set();
    // SAFETY: valid set pointer, null old-set pointer.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// Blocks `signals` (again, for a caller that did not do it before its threads started) and opens a
/// non-blocking, close-on-exec `signalfd` for them on the runtime's reactor: readable when one of
/// them is pending.
pub(crate) fn watch_signals(signals: Signals) -> io::Result<AsyncFd<File>> {
    block_signals(signals)?;
    let set = signals.set();
    // SAFETY: -1 asks for a new fd; the set is valid; the returned fd is new and ours.
    let fd = cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
    // SAFETY: just returned by signalfd, owned by nobody else.
    super::async_fd(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Takes the pending signals once a [`watch_signals`] fd has reported readable, and clears that
/// readiness: a standard signal is pending at most once, so one read empties the fd, and a signal
/// after the read raises a new edge. Returns how many were taken, 0 when none was pending.
pub(crate) fn take_signals(mut ready: AsyncFdReadyGuard<'_, File>) -> io::Result<usize> {
    let taken = read_signals(ready.get_ref().get_ref());
    ready.clear_ready();
    match taken {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        taken => taken,
    }
}

/// One read of a signalfd, retried if interrupted.
fn read_signals(fd: &impl AsRawFd) -> io::Result<usize> {
    const INFO: usize = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: an all-zero signalfd_siginfo array is valid; the kernel writes whole records into it.
    let mut infos: [libc::signalfd_siginfo; 4] = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: reads into a buffer of exactly the size given.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                infos.as_mut_ptr().cast(),
                std::mem::size_of_val(&infos),
            )
        };
        if n >= 0 {
            return Ok(n as usize / INFO);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
