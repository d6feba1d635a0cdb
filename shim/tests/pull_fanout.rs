//! One artifact feeding many pulls (PROTOCOL.md 4.11): a source whose transfer slots for grant
//! holders are all taken answers 503, and the pulls past its slots wait their turn (shown in their
//! status) instead of failing after `STEPSHIM_PULL_RETRIES`, up to `STEPSHIM_PULL_BUSY_SECONDS`.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::path::Path;

use common::Shim;
use common::artifacts::{grant, listing, pull_spec, scratch};
use protocol::artifacts::PullState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A source tree of one file of `mib` MiB.
fn big_tree(name: &str, mib: usize) -> std::path::PathBuf {
    let src = scratch(name);
    std::fs::write(src.join("big.bin"), vec![7u8; mib << 20]).unwrap();
    src
}

/// Takes the source's one slot for grant holders: a GET of `src` with the grant token on a socket
/// with a tiny receive buffer, whose answer's head says 200 and whose body is then left unread, so
/// the transfer blocks with its slot. Dropping the socket ends it.
async fn hold_the_slot(source: &Shim, src: &Path, token: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut held = socket.connect(source.addr.parse().unwrap()).await.unwrap();
    let request = format!(
        "GET /v1/files?path={}/ HTTP/1.1\r\nHost: shim\r\nAuthorization: Bearer {token}\r\n\r\n",
        src.display()
    );
    held.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        head.push(held.read_u8().await.unwrap());
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "the held GET: {head}");
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_source_is_waited_out_and_shown() {
    let source = Shim::start_with(&[("STEPSHIM_FILES_GRANT_MAX_CONCURRENT", "1")], None);
    // One retry: a 503 counted as a failed attempt would fail the pull within a second.
    let dst = Shim::start_with(&[("STEPSHIM_PULL_RETRIES", "1")], None);
    let impatient = Shim::start_with(
        &[
            ("STEPSHIM_PULL_RETRIES", "1"),
            ("STEPSHIM_PULL_BUSY_SECONDS", "1"),
        ],
        None,
    );
    // More than the loopback buffers on both sides of the held connection hold (tcp_rmem's
    // maximum is 32 MiB here, tcp_wmem's 4 MiB), so the held transfer keeps its slot.
    let src = big_tree("busy-src", 128);
    source
        .client
        .grant(&grant(&src, "busy-tok", 120, None))
        .await
        .unwrap();
    let held = hold_the_slot(&source, &src, "busy-tok").await;
    let base = format!("http://{}", source.addr);
    let out = scratch("busy-dst");

    let spec = pull_spec(&base, &src, "busy-tok", &out.join("waited"));
    dst.client.pull("waited", &spec, None).await.unwrap();
    let spec = pull_spec(&base, &src, "busy-tok", &out.join("gave-up"));
    impatient.client.pull("gave-up", &spec, None).await.unwrap();
    let failed = impatient
        .client
        .pull_status("gave-up", Some(30))
        .await
        .unwrap();
    assert_eq!(failed.state, PullState::Failed, "{failed:?}");
    let error = failed.error.as_deref().unwrap();
    assert!(
        error.contains("503") && error.contains("STEPSHIM_PULL_BUSY_SECONDS"),
        "{error}"
    );
    assert!(!out.join("gave-up").exists());

    // Still held: the first pull waits and says so, well past its one retry.
    let waiting = dst.client.pull_status("waited", None).await.unwrap();
    assert_eq!(waiting.state, PullState::Running, "{waiting:?}");
    assert!(waiting.waiting && waiting.busy >= 2, "{waiting:?}");

    drop(held); // the held transfer now writes into a closed socket and ends
    let done = dst.client.pull_status("waited", Some(60)).await.unwrap();
    assert_eq!(done.state, PullState::Done, "{done:?}");
    assert!(!done.waiting && done.busy >= 2, "{done:?}");
    assert_eq!(listing(&out.join("waited")), listing(&src));
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&out);
}

/// One get feeding parallel tasks: nine pulls by three shims of one tree from a source with one
/// slot for grant holders. Before, those meeting 503 failed after their retries (a 1-slot source,
/// 12 pulls: 7 done, 5 failed); now every one lands, in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_feeds_many_pulls() {
    let source = Shim::start_with(&[("STEPSHIM_FILES_GRANT_MAX_CONCURRENT", "1")], None);
    let shims: Vec<Shim> = (0..3)
        .map(|_| Shim::start_with(&[("STEPSHIM_PULL_RETRIES", "2")], None))
        .collect();
    let src = big_tree("fanout-src", 16);
    source
        .client
        .grant(&grant(&src, "fan-tok", 300, None))
        .await
        .unwrap();
    let base = format!("http://{}", source.addr);
    let out = scratch("fanout-dst");
    let mut ids = Vec::new();
    for (s, shim) in shims.iter().enumerate() {
        for p in 0..3 {
            let id = format!("fan-{s}-{p}");
            let spec = pull_spec(&base, &src, "fan-tok", &out.join(&id));
            shim.client.pull(&id, &spec, None).await.unwrap();
            ids.push((shim, id));
        }
    }
    let mut busy = 0;
    for (shim, id) in &ids {
        let st = shim.client.pull_status(id, Some(120)).await.unwrap();
        assert_eq!(st.state, PullState::Done, "{st:?}");
        assert_eq!(listing(&out.join(id)), listing(&src));
        busy += st.busy;
    }
    assert!(
        busy > 0,
        "no pull met the busy source: the test proves nothing"
    );
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&out);
}
