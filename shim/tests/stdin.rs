//! Stdin through the shim: bytes reach the process in order, retried offsets are idempotent, gaps
//! are refused, EOF closes the pipe, and a process that does not read back-pressures the writer.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::Duration;

use common::{Shim, follow, sh};
use protocol::{Exit, SpawnRequest};

fn with_stdin(script: &str) -> SpawnRequest {
    SpawnRequest {
        stdin: true,
        ..sh(script)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_and_overlapping_offsets_deliver_each_byte_once() {
    let shim = Shim::start();
    let c = &shim.client;
    c.spawn("cat", &with_stdin("cat; echo done >&2"))
        .await
        .unwrap();
    let ack = c.stdin("cat", 0, "hello ".into(), false).await.unwrap();
    assert_eq!(ack.stdin_offset, 6);
    // The same request again (its answer was "lost"): nothing new.
    assert_eq!(
        c.stdin("cat", 0, "hello ".into(), false)
            .await
            .unwrap()
            .stdin_offset,
        6
    );
    // Overlapping: only the part past 6 goes in.
    assert_eq!(
        c.stdin("cat", 3, "lo world".into(), false)
            .await
            .unwrap()
            .stdin_offset,
        11
    );
    // A gap is refused and writes nothing.
    let err = c.stdin("cat", 20, "??".into(), false).await.unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::StdinGap));
    let ack = c.stdin("cat", 11, "!\n".into(), true).await.unwrap();
    assert!(ack.stdin_closed);
    assert_eq!(ack.stdin_offset, 13);
    // EOF again with no new bytes is fine; new bytes after EOF are not.
    assert!(
        c.stdin("cat", 13, bytes::Bytes::new(), true)
            .await
            .unwrap()
            .stdin_closed
    );
    assert_eq!(
        c.stdin("cat", 13, "more".into(), false)
            .await
            .unwrap_err()
            .code(),
        Some(protocol::ErrorCode::StdinClosed)
    );
    let ran = follow(c, "cat").await;
    assert_eq!(ran.stdout, b"hello world!\n");
    assert_eq!(ran.stderr, b"done\n");
    assert_eq!(ran.exit, Some(Exit::code(0)));
    let p = c.get("cat").await.unwrap();
    assert_eq!((p.stdin_offset, p.stdin_closed), (13, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_stdin_is_back_pressured_and_arrives_whole() {
    let shim = Shim::start();
    let c = &shim.client;
    // The process does not read until the test says so: the pipe fills and the request must wait
    // with the bytes still in the client, not buffered in the shim.
    let gate = std::env::temp_dir().join(format!("stepshim-gate-{}", common::random_hex(6)));
    let script = format!(
        "while [ ! -e {0} ]; do sleep 0.01; done; sha256sum",
        gate.display()
    );
    c.spawn("slow", &with_stdin(&script)).await.unwrap();
    let data: Vec<u8> = (0..8 << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let writer = tokio::spawn({
        let c = c.clone();
        let data = data.clone();
        async move { c.stdin("slow", 0, data.into(), true).await }
    });
    // The pipe takes what it holds (64 KiB here, at most 1 MiB anywhere) and no more.
    let mut stalled_at = 0;
    for _ in 0..500 {
        stalled_at = c.get("slow").await.unwrap().stdin_offset;
        if stalled_at > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        stalled_at > 0 && stalled_at <= 1 << 20,
        "stdin accepted {stalled_at} bytes before the reader read"
    );
    assert!(
        !writer.is_finished(),
        "the request must wait for the reader"
    );
    std::fs::write(&gate, b"").unwrap();
    let ack = writer.await.unwrap().unwrap();
    std::fs::remove_file(&gate).ok();
    assert_eq!(ack.stdin_offset, data.len() as u64);
    let ran = follow(c, "slow").await;
    use sha2::{Digest, Sha256};
    let want: String = Sha256::digest(&data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(String::from_utf8_lossy(&ran.stdout).starts_with(&want));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_to_a_process_that_closed_it_or_exited_is_409() {
    let shim = Shim::start();
    let c = &shim.client;
    c.spawn("closer", &with_stdin("exec 0<&-; sleep 2"))
        .await
        .unwrap();
    let mut code = None;
    for _ in 0..100 {
        match c
            .stdin(
                "closer",
                c.get("closer").await.unwrap().stdin_offset,
                vec![b'x'; 100_000].into(),
                false,
            )
            .await
        {
            Err(e) => {
                code = e.code();
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert_eq!(code, Some(protocol::ErrorCode::StdinClosed));
    c.signal("closer", "KILL").await.unwrap();
    c.wait("closer", 10).await.unwrap();
    c.spawn("gone", &with_stdin("true")).await.unwrap();
    c.wait("gone", 10).await.unwrap();
    assert_eq!(
        c.stdin("gone", 0, "late".into(), false)
            .await
            .unwrap_err()
            .code(),
        Some(protocol::ErrorCode::NotRunning)
    );
}
