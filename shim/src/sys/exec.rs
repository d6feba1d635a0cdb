//! Starting a process in its own session with `clone(CLONE_VM | CLONE_VFORK)`: everything prepared
//! before the clone, only raw system calls in the child, every signal blocked until the child has
//! reset the dispositions it inherited, and a failed set-up reported through the shared memory.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use child::{ChildArgs, KernelSigaction, child_main};

mod child;

/// What the child does with its standard streams.
#[derive(Debug)]
pub(crate) enum ChildStdio {
    /// Three fds for 0, 1 and 2.
    Fds {
        /// Becomes fd 0; `None` is `/dev/null` (one opened at the first spawn and kept).
        stdin: Option<OwnedFd>,
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
pub(crate) struct Credentials {
    /// User id.
    pub(crate) uid: u32,
    /// Primary group id.
    pub(crate) gid: u32,
    /// Supplementary groups.
    pub(crate) groups: Vec<u32>,
}

/// Everything needed to start a process, prepared before the fork.
#[derive(Debug)]
pub(crate) struct Exec {
    /// Executable path, already resolved against `PATH`.
    pub(crate) path: CString,
    /// argv, argv[0] first.
    pub(crate) argv: Vec<CString>,
    /// `K=V` environment (shared: most spawns pass the shim's own, made once).
    pub(crate) envp: std::sync::Arc<[CString]>,
    /// Working directory.
    pub(crate) dir: Option<CString>,
    /// Credentials to switch to, if any.
    pub(crate) creds: Option<Credentials>,
    /// Standard streams.
    pub(crate) stdio: ChildStdio,
    /// `oom_score_adj` the child inherits when it is the shim's own (see [`super::own_score`]) or
    /// else sets for itself before `execve` (through `/proc/self`, which only root can write while
    /// the shim is non-dumpable); see [`Forked::oom_set`].
    pub(crate) oom_score_adj: Option<i32>,
}

/// The step of the child's set-up that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    /// Session, terminal, fd or limit set-up.
    Setup = 0,
    /// setgroups/setgid/setuid.
    Credentials,
    /// chdir.
    Chdir,
    /// execve itself.
    Exec,
}

/// A started child: its pid, and why its set-up failed if it did. `clone` with `CLONE_VFORK` returns
/// only once the child has exec'd or exited, so the outcome is known when [`fork_exec`] returns.
#[derive(Debug)]
pub(crate) struct Forked {
    /// Pid of the child; also its process group and session id. A child whose set-up failed has
    /// exited with status 127 and must still be reaped.
    pub(crate) pid: i32,
    /// The set-up step that failed and its error; `None` when `execve` succeeded.
    pub(crate) failed: Option<(Stage, io::Error)>,
    /// Whether the child inherited or set its own `oom_score_adj` before `execve`. When it could
    /// not (a shim that is not root), the caller sets it through `/proc/<pid>` once the new
    /// program's credentials make that entry the user's.
    pub(crate) oom_set: bool,
}

/// The signals a child must reset before unblocking: every one this process catches (std's SIGSEGV
/// and SIGBUS; SIGCHLD and the shutdown signals are read from `signalfd`s, not caught) or
/// ignores (SIGPIPE, and whatever the shim inherited ignored). Read once, at the first spawn: the
/// shim installs every handler at start-up, before it serves a request, and a handler installed
/// later must be added here. Three system calls per spawn (SIGSEGV, SIGBUS, SIGPIPE) instead of
/// one per signal.
fn signals_to_reset() -> &'static [libc::c_int] {
    static RESET: std::sync::OnceLock<Vec<libc::c_int>> = std::sync::OnceLock::new();
    RESET.get_or_init(|| {
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
                r == 0 && old.handler != libc::SIG_DFL
            })
            .collect()
    })
}

/// Starts a child that sets up `ex` and execs it, with `clone(CLONE_VM | CLONE_VFORK)`: no copy of
/// the shim's page tables (a `fork` costs ~150 µs more here), and the outcome is known on return.
/// The child fds in `ex.stdio` stay open in the parent until `ex` is dropped; callers drop it right
/// after this returns.
pub(crate) fn fork_exec(ex: &Exec) -> io::Result<Forked> {
    let argv = null_terminated(&ex.argv);
    let envp = null_terminated(&ex.envp);
    let groups: Vec<libc::gid_t> = ex
        .creds
        .as_ref()
        .map(|c| c.groups.clone())
        .unwrap_or_default();
    // Nothing to write when the child inherits its score from the shim.
    let inherited = ex.oom_score_adj.is_some_and(super::own_score::inherits);
    let mut args = ChildArgs {
        argv: &argv,
        envp: &envp,
        ex,
        groups: &groups,
        reset: signals_to_reset(),
        nofile: super::child_nofile_limit(),
        oom: ex.oom_score_adj.filter(|_| !inherited).map(decimal),
        null: dev_null()?,
        oom_set: false,
        report: (0, 0),
    };
    let pid = clone_child(&mut args)?;
    // SAFETY: the child wrote `report` (if at all) before it exited; read it as memory another
    // task changed.
    let (stage, errno) = unsafe { std::ptr::read_volatile(&raw const args.report) };
    // SAFETY: as above, for the flag the child set before `execve`.
    let oom_set = inherited || unsafe { std::ptr::read_volatile(&raw const args.oom_set) };
    let failed = (stage != 0).then(|| {
        let stage = match stage - 1 {
            1 => Stage::Credentials,
            2 => Stage::Chdir,
            3 => Stage::Exec,
            _ => Stage::Setup,
        };
        (stage, io::Error::from_raw_os_error(errno))
    });
    Ok(Forked {
        pid,
        failed,
        oom_set,
    })
}

/// The pointers of `strings` and a null after them: an `argv` or `envp` for `execve`.
fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// `adj` as decimal text and its length, for the child to write without formatting.
fn decimal(adj: i32) -> ([u8; 12], usize) {
    let mut text = [0u8; 12];
    let mut w = &mut text[..];
    // An i32 in decimal fits in 11 bytes.
    let _ = std::io::Write::write_fmt(&mut w, format_args!("{adj}"));
    let len = 12 - w.len();
    (text, len)
}

/// Clones the child that runs [`child_main`] on `args`, with every signal of this thread blocked
/// until it has exec'd or exited; its pid.
fn clone_child(args: &mut ChildArgs<'_>) -> io::Result<libc::pid_t> {
    let mut stack = super::child_stack::take();
    let top = stack.top();
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: blocks every signal in this thread (raw, so libc's own are included) until the child
    // has exec'd, so no handler of ours runs in the child's shared memory before it resets them.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &all,
            &mut old,
            8usize,
        );
    }
    // SAFETY: the child runs `child_main` on `stack`, locked for this thread until the child has
    // exec'd or exited (this thread is suspended until then), and reads only `args`, alive for the
    // same span.
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_mut(args).cast(),
        )
    };
    let clone_err = io::Error::last_os_error();
    // SAFETY: restores this thread's mask as it was.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &old,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
    }
    drop(stack);
    if pid == -1 {
        return Err(clone_err);
    }
    Ok(pid)
}

/// `/dev/null` for the stdin of children that have none: opened at the first spawn and kept, so a
/// spawn costs no `open` for it.
fn dev_null() -> io::Result<libc::c_int> {
    static NULL: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();
    if let Some(fd) = NULL.get() {
        return Ok(fd.as_raw_fd());
    }
    let fd = OwnedFd::from(std::fs::File::open("/dev/null")?);
    Ok(NULL.get_or_init(|| fd).as_raw_fd())
}
