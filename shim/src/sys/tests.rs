//! One test per `unsafe` wrapper, against real processes. Tests that fork hold `CHILDREN` so that one
//! test's `reap_one` (a `waitpid(-1)`) never reaps another test's child.

use super::*;
use std::ffi::CString;
use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static CHILDREN: Mutex<()> = Mutex::new(());

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

fn null_stdio() -> (OwnedFd, OwnedFd) {
    let (r, w) = pipe().expect("pipe");
    (r, w)
}

/// Stdout and stderr both into one pipe, whose read end comes back for the test to read.
fn output_to_pipe(stdin: Option<OwnedFd>) -> (OwnedFd, ChildStdio) {
    let (r, w) = pipe().expect("pipe");
    let stderr = w.try_clone().expect("dup");
    let stdio = ChildStdio::Fds {
        stdin,
        stdout: w,
        stderr,
    };
    (r, stdio)
}

fn exec(path: &str, args: &[&str], stdio: ChildStdio) -> Exec {
    let mut argv = vec![cstr(path)];
    argv.extend(args.iter().map(|a| cstr(a)));
    Exec {
        path: cstr(path),
        argv,
        envp: vec![cstr("PATH=/usr/bin:/bin")].into(),
        dir: None,
        creds: None,
        stdio,
        oom_score_adj: None,
    }
}

fn wait_for(pid: i32) -> Reaped {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match reap_one().expect("waitpid") {
            Some(r @ (Reaped::Exited(p, _) | Reaped::Signaled(p, _))) if p == pid => return r,
            Some(_) => {}
            None => {
                assert!(Instant::now() < deadline, "child {pid} not reaped in time");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

fn exec_status(f: &Forked) -> Option<(Stage, &io::Error)> {
    f.failed.as_ref().map(|(s, e)| (*s, e))
}

#[test]
fn fork_exec_runs_in_own_session_with_output_and_exit_code() {
    let _g = CHILDREN.lock();
    let (out_r, stdio) = output_to_pipe(None);
    let mut ex = exec(
        "/bin/sh",
        &[
            "-c",
            "echo $$ $(ps -o sid= -p $$ 2>/dev/null || cut -d' ' -f6 /proc/$$/stat) \
             $(cat /proc/$$/oom_score_adj) $(readlink /proc/$$/fd/0); exit 7",
        ],
        stdio,
    );
    ex.oom_score_adj = Some(700);
    let f = fork_exec(&ex).unwrap();
    drop(ex);
    assert!(exec_status(&f).is_none());
    // A root parent's child has its value before exec (set by the child itself: the parent's own
    // differs); the parent's is unchanged.
    if geteuid() == 0 {
        assert!(f.oom_set);
    }
    let own = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
    assert_ne!(own.trim(), "700");
    let mut out = String::new();
    std::fs::File::from(out_r).read_to_string(&mut out).unwrap();
    let fields: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(fields[0], f.pid.to_string());
    assert_eq!(
        fields[1],
        f.pid.to_string(),
        "child must lead its own session"
    );
    if f.oom_set {
        assert_eq!(fields[2], "700");
    }
    assert_eq!(fields[3], "/dev/null", "no stdin given: /dev/null");
    assert_eq!(wait_for(f.pid), Reaped::Exited(f.pid, 7));
}

/// When the parent's own `oom_score_adj` already is the children's, the child inherits it (no
/// write of its own) and still reports it set; the parent's is never changed by a spawn.
#[test]
fn child_inherits_an_equal_oom_score_adj() {
    if geteuid() != 0 {
        return;
    }
    let _g = CHILDREN.lock();
    let path = "/proc/self/oom_score_adj";
    let own = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, "600").unwrap();
    let (out_r, stdio) = output_to_pipe(None);
    let mut ex = exec("/bin/sh", &["-c", "cat /proc/$$/oom_score_adj"], stdio);
    ex.oom_score_adj = Some(600);
    let f = fork_exec(&ex).unwrap();
    drop(ex);
    assert!(f.oom_set);
    let mut out = String::new();
    std::fs::File::from(out_r).read_to_string(&mut out).unwrap();
    assert_eq!(wait_for(f.pid), Reaped::Exited(f.pid, 0));
    assert_eq!(std::fs::read_to_string(path).unwrap().trim(), "600");
    std::fs::write(path, own.trim()).unwrap();
    assert_eq!(out.trim(), "600");
}

#[test]
fn missing_executable_reports_exec_stage_enoent() {
    let _g = CHILDREN.lock();
    let (r, w) = pipe().unwrap();
    let ex = exec(
        "/nonexistent/x",
        &[],
        ChildStdio::Fds {
            stdin: Some(r),
            stdout: w.try_clone().unwrap(),
            stderr: w,
        },
    );
    let f = fork_exec(&ex).unwrap();
    let (stage, err) = exec_status(&f).expect("exec must fail");
    assert_eq!(stage, Stage::Exec);
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(wait_for(f.pid), Reaped::Exited(f.pid, 127));
}

#[test]
fn bad_dir_reports_chdir_stage() {
    let _g = CHILDREN.lock();
    let (r, w) = pipe().unwrap();
    let mut ex = exec(
        "/bin/true",
        &[],
        ChildStdio::Fds {
            stdin: Some(r),
            stdout: w.try_clone().unwrap(),
            stderr: w,
        },
    );
    ex.dir = Some(cstr("/nonexistent-dir"));
    let f = fork_exec(&ex).unwrap();
    assert_eq!(exec_status(&f).expect("chdir must fail").0, Stage::Chdir);
    wait_for(f.pid);
}

#[test]
fn group_signal_kills_and_is_reported() {
    let _g = CHILDREN.lock();
    let (r, w) = pipe().unwrap();
    let ex = exec(
        "/bin/sleep",
        &["30"],
        ChildStdio::Fds {
            stdin: Some(r),
            stdout: w.try_clone().unwrap(),
            stderr: w,
        },
    );
    let f = fork_exec(&ex).unwrap();
    assert!(exec_status(&f).is_none());
    kill_group(f.pid, libc::SIGTERM).unwrap();
    assert_eq!(wait_for(f.pid), Reaped::Signaled(f.pid, libc::SIGTERM));
    assert!(
        kill_group(1, libc::SIGTERM).is_err(),
        "never signal init or everyone"
    );
}

#[test]
fn pty_has_size_and_is_controlling_terminal() {
    let _g = CHILDREN.lock();
    let (master, slave) = openpty(100, 30).unwrap();
    assert_eq!(get_winsize(&master).unwrap(), (100, 30));
    set_winsize(&master, 120, 40).unwrap();
    assert_eq!(get_winsize(&master).unwrap(), (120, 40));
    let ex = exec(
        "/bin/sh",
        &["-c", "stty size; test -t 0 && echo tty"],
        ChildStdio::Tty { slave },
    );
    let f = fork_exec(&ex).unwrap();
    drop(ex);
    assert!(exec_status(&f).is_none());
    let mut out = Vec::new();
    let mut file = std::fs::File::from(master);
    let mut buf = [0u8; 256];
    // A pty master reports EIO once the last slave holder is gone.
    while let Ok(n @ 1..) = file.read(&mut buf) {
        out.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("40 120"), "stty size saw {text:?}");
    assert!(text.contains("tty"), "stdin must be a terminal: {text:?}");
    assert_eq!(wait_for(f.pid), Reaped::Exited(f.pid, 0));
}

#[test]
fn nonblocking_flag_and_limits() {
    let (r, _w) = pipe().unwrap();
    assert!(set_pipe_size(&r, 1 << 20).unwrap() >= 1 << 20);
    set_nonblocking(&r, true).unwrap();
    let mut buf = [0u8; 1];
    let err = std::fs::File::from(r).read(&mut buf).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    assert!(raise_nofile_limit().unwrap() >= 1024);
    assert_eq!(geteuid(), unsafe { libc::geteuid() });
}

#[test]
fn child_starts_with_no_ignored_or_blocked_signals() {
    let _g = CHILDREN.lock();
    // The test harness, like the shim, ignores SIGPIPE; block SIGCHLD as the shim does and one more
    // to prove the mask is reset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let (in_r, _) = null_stdio();
    let (out_r, stdio) = output_to_pipe(Some(in_r));
    let ex = exec("/bin/cat", &["/proc/self/status"], stdio);
    let f = fork_exec(&ex).unwrap();
    drop(ex);
    let mut out = String::new();
    std::fs::File::from(out_r).read_to_string(&mut out).unwrap();
    wait_for(f.pid);
    assert!(out.contains("SigIgn:\t0000000000000000"), "{out}");
    assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
}

#[test]
fn read_spare_appends_what_the_kernel_wrote_and_preads_at_offsets() {
    let (r, w) = pipe().unwrap();
    std::fs::File::from(w).write_all(b"hello").unwrap();
    let mut buf = b"ab".to_vec();
    assert_eq!(read_spare(&r, &mut buf, 3, None).unwrap(), 3);
    assert_eq!(buf, b"abhel");
    assert_eq!(read_spare(&r, &mut buf, 100, None).unwrap(), 2);
    assert_eq!(
        read_spare(&r, &mut buf, 100, None).unwrap(),
        0,
        "end of file"
    );
    assert_eq!(buf, b"abhello");
    let path = std::env::temp_dir().join(format!("stepshim-pread-{}", std::process::id()));
    std::fs::write(&path, b"0123456789").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_spare(&file, &mut buf, 4, Some(6)).unwrap(), 4);
    assert_eq!(buf, b"6789");
    std::fs::remove_file(path).ok();
}

#[test]
fn fork_exec_restores_the_parents_signal_mask() {
    let _g = CHILDREN.lock();
    let blocked = || {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status
            .lines()
            .find(|l| l.starts_with("SigBlk:"))
            .unwrap()
            .to_owned()
    };
    let before = blocked();
    let (r, w) = pipe().unwrap();
    let ex = exec(
        "/bin/true",
        &[],
        ChildStdio::Fds {
            stdin: Some(r),
            stdout: w.try_clone().unwrap(),
            stderr: w,
        },
    );
    let f = fork_exec(&ex).unwrap();
    assert!(f.failed.is_none());
    assert_eq!(
        blocked(),
        before,
        "every signal is blocked only around the clone"
    );
    assert_eq!(wait_for(f.pid), Reaped::Exited(f.pid, 0));
}

#[test]
fn child_stack_depth_stays_far_below_its_size() {
    let _g = CHILDREN.lock();
    // Every set-up path the child can take: credentials, a directory, a terminal, its own oom
    // score, and the failures after each stage.
    let mut runs: Vec<Exec> = Vec::new();
    let (_, stdio) = output_to_pipe(None);
    let mut ex = exec("/bin/true", &[], stdio);
    ex.creds = Some(Credentials {
        uid: geteuid(),
        // SAFETY: no arguments, no memory.
        gid: unsafe { libc::getegid() },
        groups: vec![0, 1, 2],
    });
    ex.dir = Some(cstr("/"));
    let own: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    ex.oom_score_adj = Some(if own < 1000 { own + 1 } else { own - 1 });
    runs.push(ex);
    let (_master, slave) = openpty(80, 24).unwrap();
    runs.push(exec("/bin/true", &[], ChildStdio::Tty { slave }));
    let (_, stdio) = output_to_pipe(None);
    let mut ex = exec("/bin/true", &[], stdio);
    ex.dir = Some(cstr("/nonexistent/dir"));
    runs.push(ex);
    let (_, stdio) = output_to_pipe(None);
    runs.push(exec("/nonexistent/program", &[], stdio));
    for ex in runs {
        let f = fork_exec(&ex).unwrap();
        drop(ex);
        wait_for(f.pid);
    }
    use super::child_stack::{DEEPEST, SIZE as CHILD_STACK};
    let deepest = DEEPEST.load(std::sync::atomic::Ordering::Relaxed);
    assert!(deepest > 0, "the child's stack was not used at all");
    assert!(
        deepest <= CHILD_STACK / 4,
        "the child reached {deepest} bytes into its {CHILD_STACK}-byte stack"
    );
}
