//! fork/exec of a process in its own session: everything prepared before the fork, only
//! async-signal-safe calls after it, and the exec status reported through a close-on-exec pipe.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::pipe;

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
