//! The shim as PID 1: orphans reaped with no zombie left (in a fresh PID namespace, where the shim
//! really is PID 1), SIGCHLD blocked in every thread and taken from its fd, SIGTERM shutdown with
//! grace then KILL (SIGHUP and SIGQUIT alike), a killed starter stopping the shim
//! (`STEPSHIM_PARENT_PID`), and configuration errors exit 64.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Shim, alive, follow, run, sh};
use protocol::Exit;

fn can_unshare() -> bool {
    Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// Zombie processes among the shim's namespace, from `ps` run through the shim itself.
async fn zombies(shim: &Shim, id: &str) -> String {
    let ran = run(
        &shim.client,
        id,
        &sh("for s in /proc/[0-9]*/stat; do cat $s 2>/dev/null; echo; done"),
    )
    .await;
    String::from_utf8_lossy(&ran.stdout)
        .lines()
        .filter(|l| {
            l.split(") ")
                .nth(1)
                .is_some_and(|rest| rest.starts_with('Z'))
        })
        .map(str::to_owned)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_grandchildren_are_reaped_as_pid_1() {
    if !can_unshare() {
        // CI runs as root where unshare works; say loudly why this run cannot prove it.
        panic!("unshare --pid --fork --mount-proc is not available: run the tests as root");
    }
    let shim = Shim::start_with(
        &[],
        Some(&["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]),
    );
    let ran = run(&shim.client, "whoami", &sh("cat /proc/1/comm")).await;
    assert_eq!(
        ran.stdout, b"stepshim\n",
        "the shim must be PID 1 of its namespace"
    );
    // Each process leaves daemonized grandchildren behind that exit later as orphans.
    for i in 0..20 {
        let spec = sh("(sleep 0.2; exit 3) & (sh -c 'sleep 0.1 & exit 0') & exit 0");
        let ran = run(&shim.client, &format!("leaver{i}"), &spec).await;
        assert_eq!(ran.exit, Some(Exit::code(0)));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let z = zombies(&shim, &format!("ps{}", Instant::now().elapsed().as_nanos())).await;
        if z.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "zombies left:\n{z}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = shim.client.metrics().await.unwrap();
    let orphans = common::metric(&m, "stepshim_orphans_reaped_total").unwrap();
    assert!(
        orphans >= 40,
        "every orphan was reaped by the shim, saw {orphans}"
    );
}

/// The signal mask and caught signals of each of a process's threads, from `/proc`.
fn thread_signal_masks(pid: u32) -> Vec<(String, u64, u64)> {
    let hex = |status: &str, key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap()
    };
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| {
            let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
            let name = status.lines().next().unwrap_or_default().to_owned();
            (name, hex(&status, "SigBlk:"), hex(&status, "SigCgt:"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_are_blocked_in_every_thread_and_exits_are_seen_at_once() {
    let shim = Shim::start();
    // A spawn with a directory starts a blocking thread (see `spawn::prepare`).
    let mut spec = sh("exit 3");
    spec.dir = Some(std::env::temp_dir().to_string_lossy().into_owned());
    let (p, _) = shim.client.spawn_wait("dir", &spec, 10).await.unwrap();
    assert_eq!(p.exit, Some(Exit::code(3)));
    // SIGCHLD for the reaper, SIGTERM, SIGINT, SIGHUP and SIGQUIT for shutdown: all from signalfds.
    let sigchld = [
        libc::SIGCHLD,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
    ]
    .iter()
    .fold(0u64, |m, s| m | 1u64 << (s - 1));
    let threads = thread_signal_masks(shim.pid());
    assert!(
        threads.len() >= 2,
        "a blocking thread was started: {threads:?}"
    );
    for (name, blocked, caught) in &threads {
        assert!(
            blocked & sigchld == sigchld,
            "{name}: SIGCHLD or a shutdown signal not blocked ({blocked:x})"
        );
        assert!(
            caught & sigchld == 0,
            "{name}: SIGCHLD or a shutdown signal caught by a handler ({caught:x})"
        );
    }
    // Each exit wakes the reaper through the signalfd: without it only the reaper's 1 s timer
    // would notice, and 20 waits would take about 10 s.
    let started = Instant::now();
    for i in 0..20 {
        let (p, _) = shim
            .client
            .spawn_wait(&format!("quick{i}"), &sh("true"), 10)
            .await
            .unwrap();
        assert_eq!(p.exit, Some(Exit::code(0)));
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "20 spawn-waits took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_terms_groups_then_kills_stragglers_and_exits_zero() {
    let mut shim = Shim::start(); // grace 2 s
    let c = shim.client.clone();
    c.spawn(
        "polite",
        &sh("trap 'echo bye; exit 0' TERM; while :; do sleep 0.05; done"),
    )
    .await
    .unwrap();
    c.spawn(
        "stubborn",
        &sh("trap '' TERM; echo ready; while :; do sleep 0.05; done"),
    )
    .await
    .unwrap();
    let mut o = c.output("stubborn", 0, true).await.unwrap();
    o.next().await.unwrap().expect("ready line");
    let polite = tokio::spawn({
        let c = c.clone();
        async move { follow(&c, "polite").await }
    });
    let started = Instant::now();
    let status = tokio::task::spawn_blocking(move || {
        let s = shim.terminate();
        (s, shim)
    })
    .await
    .unwrap();
    assert!(status.0.success(), "shim exit status {:?}", status.0);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "stragglers get the whole grace period, took {took:?}"
    );
    let ran = polite.await.unwrap();
    assert_eq!(ran.stdout, b"bye\n");
    assert_eq!(ran.exit, Some(Exit::code(0)));
    let log = status.1.log.lock().unwrap().clone();
    assert!(log.contains("sent SIGKILL"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_sigquit_stop_the_shim_and_its_processes_like_sigterm() {
    // A terminal sends SIGHUP to its foreground group when it hangs up, SIGQUIT on Ctrl-\: a shim
    // started from it must end its processes (each in a session of its own, so the terminal's
    // signal misses them).
    for sig in ["HUP", "QUIT"] {
        let mut shim = Shim::start();
        let (p, _) = shim
            .client
            .spawn("long", &sh("exec sleep 300"))
            .await
            .unwrap();
        let sent = Command::new("kill")
            .args([&format!("-{sig}"), &shim.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = shim.local.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the shim did not stop on SIG{sig}:\n{}",
                shim.log.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(status.success(), "SIG{sig}: shim exit status {status:?}");
        assert!(!alive(p.pid), "SIG{sig}: the shim's process outlived it");
    }
}

#[test]
fn bad_configuration_exits_64_with_one_line() {
    let bin = env!("CARGO_BIN_EXE_stepshim");
    for env in [
        vec![],
        vec![("STEPSHIM_TOKEN_SHA256", "nothex")],
        vec![
            ("STEPSHIM_INSECURE_NO_AUTH", "1"),
            ("STEPSHIM_LISTEN", "not-an-address"),
        ],
        vec![
            ("STEPSHIM_INSECURE_NO_AUTH", "1"),
            ("STEPSHIM_GRACE_SECONDS", "forever"),
        ],
        vec![
            ("STEPSHIM_INSECURE_NO_AUTH", "1"),
            ("STEPSHIM_PARENT_PID", "0"),
        ],
    ] {
        let mut cmd = Command::new(bin);
        cmd.env_clear();
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("stepshim: "), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_starter_stops_the_shim_and_its_processes() {
    let dir = std::env::temp_dir().join(format!("stepshim-starter-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let ready = dir.join("ready");
    // The starter: a shell that starts the shim with its own pid, prints the shim's, then waits.
    let mut starter = Command::new("sh")
        .arg("-c")
        .arg(r#"STEPSHIM_PARENT_PID=$$ "$0" & echo $!; exec sleep 60"#)
        .arg(env!("CARGO_BIN_EXE_stepshim"))
        .env("STEPSHIM_INSECURE_NO_AUTH", "1")
        .env("STEPSHIM_LISTEN", "127.0.0.1:0")
        .env("STEPSHIM_READY_FILE", &ready)
        .env("STEPSHIM_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(starter.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let shim: u32 = line.trim().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        if let Ok(a) = std::fs::read_to_string(&ready) {
            break a.trim().to_owned();
        }
        assert!(Instant::now() < deadline, "the shim wrote no ready file");
        std::thread::sleep(Duration::from_millis(10));
    };
    let c = client::ShimClient::new(&format!("http://{addr}"), None).unwrap();
    let (p, _) = c.spawn("long", &sh("exec sleep 300")).await.unwrap();
    assert!(alive(shim) && alive(p.pid), "shim and process run");

    starter.kill().unwrap(); // SIGKILL: the starter cannot stop the shim itself
    starter.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while (alive(shim) || alive(p.pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!alive(shim), "the shim outlived its starter");
    assert!(!alive(p.pid), "the shim's process outlived its starter");
}

#[test]
fn a_starter_already_gone_exits_69_with_one_line() {
    // Pid 1 is never the parent of a process a test starts.
    let mut shim = Command::new(env!("CARGO_BIN_EXE_stepshim"))
        .env_clear()
        .env("STEPSHIM_INSECURE_NO_AUTH", "1")
        .env("STEPSHIM_LISTEN", "127.0.0.1:0")
        .env("STEPSHIM_PARENT_PID", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = shim.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            shim.kill().unwrap();
            shim.wait().unwrap();
            panic!("the shim serves although its starter is gone");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(69));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut shim.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("STEPSHIM_PARENT_PID"), "{err}");
}
