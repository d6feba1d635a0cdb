//! The shim's own log through the real binary: info lines wait up to `STEPSHIM_LOG_FLUSH_MS` and are
//! written together, reach stderr within that delay while the shim runs, and are all written at
//! shutdown however long they could still have waited.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Shim, sh};

/// Waits up to `limit` for `needle` in the shim's log; whether it came.
async fn logged_within(shim: &Shim, needle: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if shim.log.lock().unwrap().contains(needle) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_lines_wait_and_are_all_written_at_shutdown() {
    let mut shim = Shim::start_with(
        &[("STEPSHIM_LOG", "info"), ("STEPSHIM_LOG_FLUSH_MS", "10000")],
        None,
    );
    let (p, _) = shim
        .client
        .spawn_wait("held", &sh("exit 0"), 10)
        .await
        .unwrap();
    let line = format!("spawned id=\"held\" pid={}", p.pid);
    // The spawn's line waits in the shim for up to 10 s: not on stderr half a second later.
    assert!(
        !logged_within(&shim, &line, Duration::from_millis(500)).await,
        "{}",
        shim.log.lock().unwrap()
    );
    let status = tokio::task::block_in_place(|| shim.terminate());
    assert!(status.success(), "{status:?}");
    // Written at shutdown, in order, before the last line.
    assert!(
        logged_within(&shim, "stopped", Duration::from_secs(5)).await,
        "{}",
        shim.log.lock().unwrap()
    );
    let log = shim.log.lock().unwrap().clone();
    let (at, stopped) = (log.find(&line), log.find("stopped"));
    assert!(at.is_some() && at < stopped, "{log}");
}

#[tokio::test]
async fn waiting_lines_reach_stderr_within_the_delay() {
    let shim = Shim::start_with(
        &[("STEPSHIM_LOG", "info"), ("STEPSHIM_LOG_FLUSH_MS", "200")],
        None,
    );
    for id in ["a", "b", "c"] {
        let (p, _) = shim.client.spawn_wait(id, &sh("exit 0"), 10).await.unwrap();
        let line = format!("spawned id=\"{id}\" pid={}", p.pid);
        // 200 ms of delay; the rest is room for a loaded machine.
        assert!(
            logged_within(&shim, &line, Duration::from_secs(5)).await,
            "{}",
            shim.log.lock().unwrap()
        );
    }
}
