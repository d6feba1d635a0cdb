//! Stdin through the shim: bytes reach the process in order, retried offsets are idempotent, gaps
//! are refused, EOF closes the pipe, and a process that does not read back-pressures the writer.
#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

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
    assert_eq!(err.code(), Some("stdin_gap"));
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
        Some("stdin_closed")
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
    // The process waits before reading, so the pipe fills and the request must wait, not buffer.
    c.spawn("slow", &with_stdin("sleep 0.5; sha256sum"))
        .await
        .unwrap();
    let data: Vec<u8> = (0..8 << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let started = std::time::Instant::now();
    let ack = c.stdin("slow", 0, data.clone().into(), true).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "the write must wait for the reader"
    );
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
                code = e.code().map(str::to_owned);
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert_eq!(code.as_deref(), Some("stdin_closed"));
    c.signal("closer", "KILL").await.unwrap();
    c.wait("closer", 10).await.unwrap();
    c.spawn("gone", &with_stdin("true")).await.unwrap();
    c.wait("gone", 10).await.unwrap();
    assert_eq!(
        c.stdin("gone", 0, "late".into(), false)
            .await
            .unwrap_err()
            .code(),
        Some("not_running")
    );
}
