//! What a process leaves behind, against the real binary: background children of an exited leader
//! and children that called `setsid` are signalled, force-deleted and stopped at shutdown; and a
//! new process that reuses an orphan's pid (forced with `ns_last_pid` in a PID namespace) is never
//! reported with the orphan's exit.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::Duration;

use common::{Shim, alive, eventually, run, sh};
use protocol::{Exit, State};

fn pids(stdout: &[u8]) -> Vec<i32> {
    String::from_utf8_lossy(stdout)
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Spawns `script` (which prints the pids it leaves behind, then exits) and waits until the
/// process is `exited`, returning the pids.
async fn leave_behind(shim: &Shim, id: &str, script: &str) -> Vec<i32> {
    let ran = run(&shim.client, id, &sh(script)).await;
    assert_eq!(ran.exit, Some(Exit::code(0)));
    let left = pids(&ran.stdout);
    for &p in &left {
        assert!(alive(p), "{p} should still run after its leader exited");
    }
    left
}

const DRAIN: &[(&str, &str)] = &[("STEPSHIM_DRAIN_SECONDS", "0.2")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_delete_kills_the_group_and_setsid_children_after_the_leader_exited() {
    let shim = Shim::start_with(DRAIN, None);
    // A background member of the group, and in a second member a child that left the session.
    let left = leave_behind(
        &shim,
        "bg",
        "sleep 33 >/dev/null 2>&1 & echo $!; \
         (setsid sleep 34 >/dev/null 2>&1 & echo $!; exec sleep 35 >/dev/null 2>&1) & echo $!; exit 0",
    )
    .await;
    assert_eq!(left.len(), 3);
    assert_eq!(shim.client.get("bg").await.unwrap().state, State::Exited);
    // Without force an exited process is only forgotten; its children are left alone.
    let plain = leave_behind(&shim, "plain", "sleep 36 >/dev/null 2>&1 & echo $!; exit 0").await;
    shim.client.delete("plain", false).await.unwrap();
    assert!(alive(plain[0]));
    shim.client.delete("bg", true).await.unwrap();
    let survivors = || {
        left.iter()
            .filter(|&&p| alive(p))
            .map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !survivors().is_empty() {
        // Which process lived on, and as what (a reused pid shows another command).
        assert!(
            std::time::Instant::now() < deadline,
            "left behind by bg and still alive after its forced delete: {:?}\nshim log:\n{}",
            survivors(),
            shim.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(shim.client.get("bg").await.is_err());
    assert!(
        alive(plain[0]),
        "a forced delete of bg must not touch plain's children"
    );
    let _ = std::process::Command::new("kill")
        .arg(plain[0].to_string())
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_reaches_the_group_while_members_live() {
    let shim = Shim::start_with(DRAIN, None);
    let left = leave_behind(&shim, "bg", "sleep 33 >/dev/null 2>&1 & echo $!; exit 0").await;
    let p = shim.client.signal("bg", "TERM").await.unwrap();
    assert_eq!(p.state, State::Exited);
    eventually(
        Duration::from_secs(5),
        "the background sleep to die of TERM",
        || !alive(left[0]),
    )
    .await;
    // Nobody is left in the group: the process is not running any more.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match shim.client.signal("bg", "TERM").await {
            Err(e) if e.code() == Some(protocol::ErrorCode::NotRunning) => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "signal still answers {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_terms_every_descendant_then_kills_the_stubborn() {
    let mut shim = Shim::start_with(DRAIN, None);
    // A background child, a child that left the session (re-parented to the shim when its
    // parent exits), and one that ignores TERM.
    let left = leave_behind(
        &shim,
        "bg",
        "sleep 33 >/dev/null 2>&1 & echo $!; setsid sleep 34 >/dev/null 2>&1 & echo $!; \
         (trap '' TERM; exec sleep 35 >/dev/null 2>&1) & echo $!; exit 0",
    )
    .await;
    assert_eq!(left.len(), 3);
    let (running, _) = shim.client.spawn("fg", &sh("exec sleep 37")).await.unwrap();
    let started = std::time::Instant::now();
    let status = shim.terminate();
    assert!(status.success(), "{status:?}");
    for &p in left.iter().chain([&running.pid]) {
        assert!(!alive(p), "{p} outlived the shim");
    }
    // The stubborn one needed the KILL after the grace period (2 s in the tests).
    assert!(started.elapsed() >= Duration::from_secs(2));
    let log = shim.log.lock().unwrap().clone();
    assert!(log.contains("sent SIGKILL"), "{log}");
}

fn can_unshare() -> bool {
    std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_pid_never_gets_an_orphans_exit() {
    assert!(
        can_unshare(),
        "unshare --pid --fork --mount-proc is not available: run the tests as root"
    );
    let shim = Shim::start_with(
        &[],
        Some(&["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]),
    );
    let mut proved = 0;
    for attempt in 0..5 {
        // An orphan that exits 42 once its parent is gone: reaped by the shim, claimed by nobody.
        let ran = run(
            &shim.client,
            &format!("leaver{attempt}"),
            &sh("(sleep 0.2; exit 42) >/dev/null 2>&1 & echo $!; exit 0"),
        )
        .await;
        let orphan = pids(&ran.stdout)[0];
        // Wait (inside the namespace) until the orphan is reaped, then make its pid the next one.
        let wait = format!(
            "i=0; while [ -e /proc/{orphan} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
             echo {} > /proc/sys/kernel/ns_last_pid",
            orphan - 1
        );
        let ran = run(&shim.client, &format!("setpid{attempt}"), &sh(&wait)).await;
        assert_eq!(ran.exit, Some(Exit::code(0)), "{:?}", ran.stderr);
        let id = format!("reuser{attempt}");
        let (p, _) = shim
            .client
            .spawn(
                &id,
                &protocol::SpawnRequest {
                    path: "/bin/sleep".into(),
                    args: vec!["8".into()],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        if p.pid != orphan {
            continue; // something else forked in between; try again
        }
        proved += 1;
        // The new process runs: not "exited 42", signal reaches it, and it dies of it.
        let p = shim.client.wait(&id, 1).await.unwrap();
        assert_eq!((p.state, p.exit), (State::Running, None));
        shim.client.signal(&id, "TERM").await.unwrap();
        let p = shim.client.wait(&id, 10).await.unwrap();
        assert_eq!(p.exit, Some(Exit::signal(15)));
    }
    assert!(
        proved > 0,
        "the pid was never reused; the test proved nothing"
    );
}
