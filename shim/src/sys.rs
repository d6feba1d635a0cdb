//! Every `unsafe` call of the shim, each wrapped in a small safe function: fork/exec of a process in its
//! own session, the single `waitpid` call (used only by the reaper), process-group signals, pseudo-
//! terminals, pipes and process-wide settings. The rest of the crate denies `unsafe`.
//!
//! Fork safety: between `fork` and `execve` the child runs only async-signal-safe libc calls on data
//! prepared before the fork (C strings, pointer arrays, fds), never allocating or locking, because the
//! shim is multi-threaded and another thread may hold the allocator's lock at the moment of the fork.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// What the child does with its standard streams.
#[derive(Debug)]
pub enum ChildStdio {
    /// Three fds for 0, 1 and 2 (stdin may be `/dev/null`).
    Fds {
        /// Becomes fd 0.
        stdin: OwnedFd,
        /// Becomes fd 1.
        stdout: OwnedFd,
        /// Becomes fd 2.
        stderr: OwnedFd,
    },
    /// The slave side of a pty: becomes 0, 1, 2 and the controlling terminal.
    Tty {
        /// The pty slave.
        slave: OwnedFd,
    },
}

/// The credentials a child switches to before exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// Everything needed to start a process, prepared before the fork.
#[derive(Debug)]
pub struct Exec {
    /// Executable path, already resolved against `PATH`.
    pub path: CString,
    /// argv, argv[0] first.
    pub argv: Vec<CString>,
    /// `K=V` environment.
    pub envp: Vec<CString>,
    /// Working directory.
    pub dir: Option<CString>,
    /// Credentials to switch to, if any.
    pub creds: Option<Credentials>,
    /// Standard streams.
    pub stdio: ChildStdio,
}

/// The step of the child's set-up that failed, reported through the exec-status pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Session, terminal or fd set-up.
    Setup,
    /// setgroups/setgid/setuid.
    Credentials,
    /// chdir.
    Chdir,
    /// execve itself.
    Exec,
}

/// A started child: its pid and the read end of the exec-status pipe, which reaches EOF when `execve`
/// succeeded and carries 5 bytes (stage, errno) when it did not.
#[derive(Debug)]
pub struct Forked {
    /// Pid of the child; also its process group and session id.
    pub pid: i32,
    /// Read end of the exec-status pipe (close-on-exec, blocking).
    pub status_pipe: OwnedFd,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints; on success both fds are new and owned by us.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both fds were just returned by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Asks for a pipe buffer of `bytes` (the kernel rounds up to pages and caps it at
/// /proc/sys/fs/pipe-max-size); returns the size granted. Fewer, larger reads move output faster.
pub fn set_pipe_size(fd: &OwnedFd, bytes: usize) -> io::Result<usize> {
    // SAFETY: fcntl on a valid, owned fd with an integer argument.
    let n = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes as libc::c_int) })?;
    Ok(n as usize)
}

/// Sets or clears `O_NONBLOCK` on a fd.
pub fn set_nonblocking(fd: &OwnedFd, on: bool) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a valid, owned fd.
    let flags = cvt(unsafe { libc::fcntl(raw, libc::F_GETFL) })?;
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(raw, libc::F_SETFL, flags) })?;
    Ok(())
}

/// A new pseudo-terminal of the given size: (master, slave), both close-on-exec.
pub fn openpty(cols: u16, rows: u16) -> io::Result<(OwnedFd, OwnedFd)> {
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
pub fn set_winsize(fd: &OwnedFd, cols: u16, rows: u16) -> io::Result<()> {
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

/// The window size of a terminal: (cols, rows).
pub fn get_winsize(fd: &OwnedFd) -> io::Result<(u16, u16)> {
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
pub fn kill_group(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill has no memory effects; a negative pid addresses a process group.
    cvt(unsafe { libc::kill(-pgid, sig) })?;
    Ok(())
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaped {
    /// Exited with a code.
    Exited(i32, i32),
    /// Killed by a signal.
    Signaled(i32, i32),
}

/// Reaps one child without blocking: `Ok(None)` when no child is waiting to be reaped (or there are
/// no children). Only the reaper may call this: it is the shim's single `waitpid`.
pub fn reap_one() -> io::Result<Option<Reaped>> {
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
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) })?;
    Ok(())
}

/// Raises the soft limit of open files to the hard limit (2,000 followed processes need several
/// thousand fds), returning the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: valid in-pointer.
    cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(lim.rlim_cur)
}

/// Registers a file with the runtime's reactor. The `AsyncFd` takes ownership of the `File`, so the
/// fd can be neither closed nor replaced while registered.
pub fn async_fd(file: std::fs::File) -> io::Result<tokio::io::unix::AsyncFd<std::fs::File>> {
    // SAFETY: the File owns its fd for as long as the AsyncFd owns the File.
    unsafe { tokio::io::unix::AsyncFd::register(file) }.map_err(|e| e.into_parts().1)
}

/// Effective user id of the shim.
pub fn geteuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

/// The child side of a fork: set up and exec, or report (stage, errno) and `_exit(127)`.
/// Only async-signal-safe calls; every pointer was prepared by the parent.
unsafe fn child_after_fork(
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    ex: &Exec,
    groups: &[libc::gid_t],
    ignored: &[libc::c_int],
    report: RawFd,
) -> ! {
    unsafe {
        let fail = |stage: Stage| -> ! {
            let errno = *libc::__errno_location();
            let mut msg = [0u8; 5];
            msg[0] = stage as u8;
            msg[1..].copy_from_slice(&errno.to_be_bytes());
            libc::write(report, msg.as_ptr().cast(), msg.len());
            libc::_exit(127)
        };
        // Signals: the shim ignores SIGPIPE and may block others; a child starts from defaults.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        // execve resets caught signals to their defaults itself; only ignored ones survive it.
        for &sig in ignored {
            let dfl = KernelSigaction::default();
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                &dfl,
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
        if libc::setsid() == -1 {
            fail(Stage::Setup);
        }
        let (i, o, e) = match &ex.stdio {
            ChildStdio::Fds {
                stdin,
                stdout,
                stderr,
            } => (stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()),
            ChildStdio::Tty { slave } => {
                if libc::ioctl(slave.as_raw_fd(), libc::TIOCSCTTY, 0) == -1 {
                    fail(Stage::Setup);
                }
                (slave.as_raw_fd(), slave.as_raw_fd(), slave.as_raw_fd())
            }
        };
        // All source fds are > 2 (the shim keeps its own 0-2 open) and close-on-exec; dup2 gives
        // the copies on 0-2 no close-on-exec flag, so only they survive the exec.
        for (src, dst) in [(i, 0), (o, 1), (e, 2)] {
            if libc::dup2(src, dst) == -1 {
                fail(Stage::Setup);
            }
        }
        if let Some(c) = &ex.creds
            && (libc::setgroups(groups.len(), groups.as_ptr()) == -1
                || libc::setgid(c.gid) == -1
                || libc::setuid(c.uid) == -1)
        {
            fail(Stage::Credentials);
        }
        if let Some(dir) = &ex.dir
            && libc::chdir(dir.as_ptr()) == -1
        {
            fail(Stage::Chdir);
        }
        libc::execve(ex.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
        fail(Stage::Exec)
    }
}

/// The signals this process ignores (SIGPIPE, by the Rust runtime's choice, and whatever the shim
/// inherited ignored), read once: they are the only dispositions that survive `execve`, so the
/// only ones a child must reset, instead of one syscall per signal on every spawn.
fn ignored_signals() -> &'static [libc::c_int] {
    static IGNORED: std::sync::OnceLock<Vec<libc::c_int>> = std::sync::OnceLock::new();
    IGNORED.get_or_init(|| {
        (1..=64)
            .filter(|&sig| {
                let mut old = KernelSigaction::default();
                // SAFETY: a null new action only reads the current disposition into `old`, a
                // struct of the kernel's layout. The raw syscall also sees the signals libc keeps
                // for itself (32-34), which a parent may have left ignored.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_rt_sigaction,
                        sig,
                        std::ptr::null::<KernelSigaction>(),
                        &mut old,
                        8usize,
                    )
                };
                r == 0 && old.handler == libc::SIG_IGN
            })
            .collect()
    })
}

/// `struct sigaction` as the x86-64 kernel's `rt_sigaction` takes it (not libc's layout).
#[repr(C)]
#[derive(Debug, Default)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Forks a child that sets up `ex` and execs it. The child fds in `ex.stdio` stay open in the parent
/// until `ex` is dropped; callers drop it right after this returns.
pub fn fork_exec(ex: &Exec) -> io::Result<Forked> {
    let argv: Vec<*const libc::c_char> = ex
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = ex
        .envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let groups: Vec<libc::gid_t> = ex
        .creds
        .as_ref()
        .map(|c| c.groups.clone())
        .unwrap_or_default();
    let ignored = ignored_signals();
    let (status_read, status_write) = pipe()?;
    // SAFETY: the child branch runs only async-signal-safe calls on memory prepared above and never
    // returns; the parent branch continues normally.
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above; this call never returns.
        unsafe { child_after_fork(&argv, &envp, ex, &groups, ignored, status_write.as_raw_fd()) }
    }
    drop(status_write);
    Ok(Forked {
        pid,
        status_pipe: status_read,
    })
}

/// Decodes the exec-status message: `None` for success (EOF), else the failed stage and error.
pub fn decode_exec_status(msg: &[u8]) -> Option<(Stage, io::Error)> {
    if msg.len() < 5 {
        return None;
    }
    let stage = match msg[0] {
        1 => Stage::Credentials,
        2 => Stage::Chdir,
        3 => Stage::Exec,
        _ => Stage::Setup,
    };
    let errno = i32::from_be_bytes([msg[1], msg[2], msg[3], msg[4]]);
    Some((stage, io::Error::from_raw_os_error(errno)))
}

#[cfg(test)]
mod tests;
