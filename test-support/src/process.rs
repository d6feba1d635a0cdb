//! Running a process to completion through a shim, waiting for a condition with a deadline, and
//! whether a pid still runs.

use std::time::{Duration, Instant};

use bytes::Bytes;
use client::ShimClient;
use protocol::{Exit, FrameType, SpawnRequest};

/// `/bin/sh -c script`
pub fn sh(script: &str) -> SpawnRequest {
    SpawnRequest {
        path: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        ..Default::default()
    }
}

/// Output of a finished process.
#[derive(Debug, Default)]
pub struct Ran {
    /// Its stdout.
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
    /// (type, payload) in log order.
    pub frames: Vec<(FrameType, Bytes)>,
    /// Its exit.
    pub exit: Option<Exit>,
}

/// Spawns and follows a process to its exit.
pub async fn run(client: &ShimClient, id: &str, spec: &SpawnRequest) -> Ran {
    client.spawn(id, spec).await.expect("spawn");
    follow(client, id).await
}

/// Follows a process's output from offset 0 to its exit.
pub async fn follow(client: &ShimClient, id: &str) -> Ran {
    let mut ran = Ran::default();
    let attached = client
        .attach(id, 0, 5, |kind, data| {
            match kind {
                FrameType::Stdout => ran.stdout.extend_from_slice(&data),
                FrameType::Stderr => ran.stderr.extend_from_slice(&data),
                _ => {}
            }
            ran.frames.push((kind, data));
        })
        .await
        .expect("attach");
    ran.exit = Some(attached.exit);
    ran
}

/// Polls `cond` every 10 ms until it holds; panics naming `what` after `limit`.
pub async fn eventually<F: FnMut() -> bool>(limit: Duration, what: &str, mut cond: F) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `pid` is a live process, seen from the caller's PID namespace: it has a `/proc` entry
/// and is neither a zombie nor dead.
pub fn alive(pid: impl std::fmt::Display) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .is_some_and(|i| !matches!(s[i + 2..].chars().next(), Some('Z' | 'X')))
    })
}
