//! The child side of [`super::fork_exec`]'s `clone`: it shares the parent's memory and runs on a
//! small stack, so everything here is raw system calls on data the parent prepared, inlined into
//! one frame, and a failure is recorded in that shared memory before `_exit(127)`.

use std::os::fd::AsRawFd;

use super::{ChildStdio, Credentials, Exec, Stage};

/// Everything the child reads, prepared by the parent; the child writes only `report`.
pub(super) struct ChildArgs<'a> {
    pub(super) argv: &'a [*const libc::c_char],
    pub(super) envp: &'a [*const libc::c_char],
    pub(super) ex: &'a Exec,
    pub(super) groups: &'a [libc::gid_t],
    pub(super) reset: &'a [libc::c_int],
    pub(super) nofile: Option<libc::rlimit>,
    /// The `oom_score_adj` value as decimal text and its length, if one is to be set.
    pub(super) oom: Option<([u8; 12], usize)>,
    /// Stdin when none is given: the kept `/dev/null`.
    pub(super) null: libc::c_int,
    /// Set by the child once its `oom_score_adj` is written.
    pub(super) oom_set: bool,
    /// (stage + 1, errno) of a failed set-up; stage 0 means none. The parent reads it after the
    /// child has exited; a successful exec leaves it untouched (the memory is no longer shared).
    pub(super) report: (u8, i32),
}

/// The child side of the `clone`: set up and exec, or record (stage, errno) and `_exit(127)`.
/// It shares the parent's memory, so it runs only raw system calls on data prepared by the parent:
/// no allocation, no lock, no libc wrapper with process-wide state (musl's `setuid` would try to
/// synchronise threads that are not the child's).
pub(super) extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive and not touched by the suspended parent.
    let a = unsafe { &mut *arg.cast::<ChildArgs<'_>>() };
    let ok = |r: libc::c_long| r != -1;
    // SAFETY (all of this block): raw system calls on memory the parent prepared.
    let stage = unsafe { set_up_and_exec(a, ok) };
    // execve returned, or a step failed: errno is the parent thread's (shared TLS), only read here.
    let errno = unsafe { *libc::__errno_location() };
    a.report = (stage as u8 + 1, errno);
    // SAFETY: ends the child only (it is its own thread group).
    unsafe { libc::_exit(127) }
}

/// The child's set-up, ending in `execve`; returns the stage that failed. Its steps below are
/// `#[inline(always)]`: they run on the child's small stack (`child_stack.rs`) and must cost it no
/// more frames than one function does.
unsafe fn set_up_and_exec(a: &mut ChildArgs<'_>, ok: impl Fn(libc::c_long) -> bool) -> Stage {
    unsafe {
        reset_signals(a.reset);
        if !ok(libc::syscall(libc::SYS_setsid)) {
            return Stage::Setup;
        }
        // Before the credentials change, while `/proc/self` is still writable for a root shim.
        if let Some((text, len)) = a.oom {
            a.oom_set = write_oom_score(&text[..len]);
        }
        if !std_streams(a, &ok) {
            return Stage::Setup;
        }
        // The shim raised its own open-files limit; the step gets the one the shim was given.
        if let Some(lim) = &a.nofile
            && !ok(libc::syscall(
                libc::SYS_prlimit64,
                0,
                libc::RLIMIT_NOFILE,
                lim,
                std::ptr::null_mut::<libc::rlimit>(),
            ))
        {
            return Stage::Setup;
        }
        if let Some(c) = &a.ex.creds
            && !switch_user(c, a.groups, &ok)
        {
            return Stage::Credentials;
        }
        if let Some(dir) = &a.ex.dir
            && !ok(libc::syscall(libc::SYS_chdir, dir.as_ptr()))
        {
            return Stage::Chdir;
        }
        libc::syscall(
            libc::SYS_execve,
            a.ex.path.as_ptr(),
            a.argv.as_ptr(),
            a.envp.as_ptr(),
        );
        Stage::Exec
    }
}

/// In the child: every signal is blocked (the parent blocked them all around the clone). A handler
/// of the parent must never run here, in shared memory: resets every caught and ignored signal in
/// `reset` to its default, then unblocks, so a child starts from defaults.
#[inline(always)]
unsafe fn reset_signals(reset: &[libc::c_int]) {
    unsafe {
        let dfl = KernelSigaction::default();
        for &sig in reset {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                &dfl,
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
        let empty: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
    }
}

/// In the child: writes `text` to its own `oom_score_adj`; whether all of it was written.
#[inline(always)]
unsafe fn write_oom_score(text: &[u8]) -> bool {
    unsafe {
        let fd = libc::syscall(
            libc::SYS_open,
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let n = libc::syscall(libc::SYS_write, fd, text.as_ptr(), text.len());
        libc::syscall(libc::SYS_close, fd);
        n == text.len() as libc::c_long
    }
}

/// In the child: puts its standard streams on 0, 1 and 2 (a pty slave also becomes the
/// controlling terminal); whether that worked.
#[inline(always)]
unsafe fn std_streams(a: &ChildArgs<'_>, ok: &impl Fn(libc::c_long) -> bool) -> bool {
    unsafe {
        let (i, o, e) = match &a.ex.stdio {
            ChildStdio::Fds {
                stdin,
                stdout,
                stderr,
            } => (
                stdin.as_ref().map_or(a.null, AsRawFd::as_raw_fd),
                stdout.as_raw_fd(),
                stderr.as_raw_fd(),
            ),
            ChildStdio::Tty { slave } => {
                let s = slave.as_raw_fd();
                if !ok(libc::syscall(libc::SYS_ioctl, s, libc::TIOCSCTTY, 0)) {
                    return false;
                }
                (s, s, s)
            }
        };
        // All source fds are > 2 (the shim keeps its own 0-2 open) and close-on-exec; dup2 gives
        // the copies on 0-2 no close-on-exec flag, so only they survive the exec.
        for (src, dst) in [(i, 0), (o, 1), (e, 2)] {
            if !ok(libc::syscall(libc::SYS_dup2, src, dst)) {
                return false;
            }
        }
        true
    }
}

/// In the child: switches to the groups, group and user of `c` (`groups`: its supplementary
/// groups as the kernel takes them); whether every call worked.
#[inline(always)]
unsafe fn switch_user(
    c: &Credentials,
    groups: &[libc::gid_t],
    ok: &impl Fn(libc::c_long) -> bool,
) -> bool {
    unsafe {
        ok(libc::syscall(
            libc::SYS_setgroups,
            groups.len(),
            groups.as_ptr(),
        )) && ok(libc::syscall(libc::SYS_setgid, c.gid))
            && ok(libc::syscall(libc::SYS_setuid, c.uid))
    }
}

/// `struct sigaction` as the x86-64 kernel's `rt_sigaction` takes it (not libc's layout).
#[repr(C)]
#[derive(Debug, Default)]
pub(super) struct KernelSigaction {
    pub(super) handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}
