//! SIGCHLD as a readable fd: the signal stays blocked in every thread of the shim and is taken from a
//! `signalfd`, which the reaper polls like any socket. A handler would cost each exit an interrupted
//! `epoll_wait`, a signal frame, a write to the runtime's wake-up socket, a `rt_sigreturn` and two
//! reads of that socket; the fd costs one read. Children do not inherit the blocked mask: the child
//! of a spawn clears its mask before `execve`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::cvt;

/// SIGCHLD alone, as a signal set.
fn sigchld_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is a valid value, and the calls only write into it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        set
    }
}

/// Blocks SIGCHLD in the calling thread; threads it starts later inherit the mask. Called before the
/// shim starts any thread, so that no thread can take the signal instead of the fd (its default
/// action discards it).
pub fn block_sigchld() -> io::Result<()> {
    let set = sigchld_set();
    // SAFETY: valid set pointer, null old-set pointer.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// A non-blocking, close-on-exec `signalfd` that becomes readable when SIGCHLD is pending.
pub fn sigchld_fd() -> io::Result<OwnedFd> {
    let set = sigchld_set();
    // SAFETY: -1 asks for a new fd; the set is valid; the returned fd is new and ours.
    let fd = cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
    // SAFETY: just returned by signalfd, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Takes the pending SIGCHLD off a [`sigchld_fd`] (a standard signal is pending at most once);
/// returns how many were taken, or `WouldBlock` when none was pending.
pub fn take_sigchld(fd: &impl AsRawFd) -> io::Result<usize> {
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
