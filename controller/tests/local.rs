//! `stepctl --local` killed while a process runs (`SIGKILL`: no chance to stop its shim) leaves
//! nothing behind: the shim stops as on SIGTERM (it was started with `STEPSHIM_PARENT_PID`), the
//! process ends with it, and the shim's ready-file directory is already gone. Needs the `stepshim`
//! binary beside `stepctl` (`cargo build -p stepshim`) or in `$STEPSHIM_BIN`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use test_support::alive;

/// The pid of the running process whose command line is exactly `argv`.
fn find(argv: &[&str]) -> Option<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        (std::fs::read(e.path().join("cmdline")).ok()? == want && alive(pid)).then_some(pid)
    })
}

/// The parent pid of `pid`.
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit(") ").next().unwrap();
    rest.split(' ').nth(1).unwrap().parse().unwrap()
}

/// One variable of `pid`'s environment.
fn env_of(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|&b| b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix(name)?.strip_prefix('=').map(str::to_owned)
    })
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn a_killed_stepctl_leaves_no_shim_and_no_process() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_stepctl"));
    let shim_bin = std::env::var_os("STEPSHIM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| exe.with_file_name("stepshim"));
    assert!(shim_bin.exists(), "no stepshim at {}", shim_bin.display());
    // A command line no other process has.
    let secs = format!("900.{}", std::process::id());
    let mut stepctl = Command::new(&exe)
        .arg("--local")
        .arg("--shim-bin")
        .arg(&shim_bin)
        .args(["run", "--", "sleep", &secs])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stepctl runs");
    let mut sleep = None;
    let started = wait_until(Duration::from_secs(20), || {
        sleep = find(&["sleep", &secs]);
        sleep.is_some()
    });
    if !started {
        let _ = stepctl.kill();
        panic!("the process did not start");
    }
    let sleep = sleep.unwrap();
    let shim = parent(sleep);
    assert_eq!(
        parent(shim),
        stepctl.id(),
        "the process's parent is stepctl's shim"
    );
    let ready = env_of(shim, "STEPSHIM_READY_FILE").expect("the shim has a ready file");
    let ready_dir = PathBuf::from(ready).parent().unwrap().to_owned();
    assert!(!ready_dir.exists(), "{} left behind", ready_dir.display());

    stepctl.kill().unwrap();
    stepctl.wait().unwrap();
    let gone = wait_until(Duration::from_secs(10), || !alive(shim) && !alive(sleep));
    if !gone {
        // Leave nothing running for the next test, then fail.
        for pid in [sleep, shim] {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    assert!(
        gone,
        "the shim ({shim}) or its process ({sleep}) outlived stepctl"
    );
}
