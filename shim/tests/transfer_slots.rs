//! Fair transfer slots and the minimum rate against the real shim: grant holders draw from their own
//! pool and never lock the pod's token out of `GET /v1/files`; a download taken at a trickle is cut
//! and frees its slot; a download at a normal speed is never cut.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::artifacts::{grant, scratch};
use common::{Shim, error_code, raw};
use http_body_util::BodyExt;

/// A tree of one 32 MiB file: far more than the socket buffers between a shim and a client hold,
/// so a download that is not read stays running.
fn big_tree(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    std::fs::write(dir.join("big.bin"), vec![7u8; 32 << 20]).unwrap();
    dir
}

/// Sends `GET /v1/files?path=dir/` with `token` and reads nothing.
fn start_get(shim: &Shim, dir: &Path, token: &str) -> TcpStream {
    let mut s = TcpStream::connect(&shim.addr).unwrap();
    let head = format!(
        "GET /v1/files?path={}/ HTTP/1.1\r\nHost: shim\r\nAuthorization: Bearer {token}\r\n\r\n",
        dir.display()
    );
    s.write_all(head.as_bytes()).unwrap();
    s
}

/// The status of an answer, from its first bytes.
fn status(s: &mut TcpStream) -> u16 {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[9..12]).parse().unwrap()
}

/// The whole tar of `dir/` with the pod's token: its length must be the stream's.
async fn full_download(shim: &Shim, dir: &Path) -> usize {
    let out = shim
        .client
        .files_out_at(&format!("{}/", dir.display()), 0, None)
        .await
        .unwrap();
    let total = out.total;
    let tar = out.body.collect().await.unwrap().to_bytes();
    assert_eq!(tar.len() as u64, total);
    assert!(tar.ends_with(&[0u8; 1024]), "the tar end marker");
    tar.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_holders_cannot_take_the_pods_own_transfer_slots() {
    let shim = Shim::start_with(
        &[
            ("STEPSHIM_FILES_MAX_CONCURRENT", "4"),
            ("STEPSHIM_FILES_GRANT_MAX_CONCURRENT", "2"),
        ],
        None,
    );
    let dir = big_tree("grant-slots");
    shim.client
        .grant(&grant(&dir, "tok-slots", 600, Some(10)))
        .await
        .unwrap();
    // 40 downloads with the grant's token, none of them read.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..40 {
        let mut s = start_get(&shim, &dir, "tok-slots");
        match status(&mut s) {
            200 => held.push(s),
            503 => refused += 1,
            other => panic!("answered {other}"),
        }
    }
    // The pod's token still gets its whole pool: four full downloads at once.
    let t = Instant::now();
    let (a, b, c, d) = tokio::join!(
        full_download(&shim, &dir),
        full_download(&shim, &dir),
        full_download(&shim, &dir),
        full_download(&shim, &dir),
    );
    assert!(
        [a, b, c, d].iter().all(|n| *n > 32 << 20),
        "{a} {b} {c} {d}"
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!((held.len(), refused), (2, 38), "the grants' pool only");
    // One more grant download is refused with the protocol's JSON error, naming the setting.
    let q = format!("/v1/files?path={}/", dir.display());
    let (code, _, body) = raw(&shim.addr, "GET", &q, Some("tok-slots"), b"").await;
    assert_eq!((code, error_code(&body).as_str()), (503, "unavailable"));
    assert!(String::from_utf8_lossy(&body).contains("STEPSHIM_FILES_GRANT_MAX_CONCURRENT"));
    // Only the downloads let in counted a use of the grant.
    let listed = shim.client.grants().await.unwrap();
    assert_eq!(listed[0].used, 2);
    drop(held);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shim with one transfer slot, no idle cut within the test, and a minimum of 1 MiB per second
/// spent waiting on the client.
fn paced_shim() -> Shim {
    Shim::start_with(
        &[
            ("STEPSHIM_FILES_MAX_CONCURRENT", "1"),
            ("STEPSHIM_FILES_IDLE_TIMEOUT", "600"),
            ("STEPSHIM_FILES_MIN_RATE_BYTES", "1048576"),
            ("STEPSHIM_FILES_MIN_RATE_INTERVAL", "1"),
        ],
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_taken_at_a_trickle_is_cut_and_frees_its_slot() {
    let shim = paced_shim();
    let dir = big_tree("trickle");
    let mut s = start_get(&shim, &dir, &shim.token);
    assert_eq!(status(&mut s), 200);
    let t = Instant::now();
    // One byte every 20 ms on a thread: never idle, far below the minimum.
    let trickle = std::thread::spawn(move || {
        let mut got = 12;
        let mut b = [0u8; 1];
        while got < 400 && s.read(&mut b).unwrap_or(0) == 1 {
            got += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        (s, got)
    });
    // Meanwhile the only slot is held.
    let q = format!("/v1/files?path={}/", dir.display());
    let (code, _, body) = raw(&shim.addr, "GET", &q, Some(&shim.token), b"").await;
    assert_eq!((code, error_code(&body).as_str()), (503, "unavailable"));
    // Cut within a few intervals: the slot serves a full download again.
    let mut freed = None;
    let path = format!("{}/", dir.display());
    while t.elapsed() < Duration::from_secs(15) {
        if shim.client.files_out_at(&path, 0, None).await.is_ok() {
            freed = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let freed = freed.expect("the trickled download still holds the slot after 15 s");
    assert!(freed < Duration::from_secs(10), "freed after {freed:?}");
    let log = shim.log.lock().unwrap().clone();
    assert!(
        log.contains("file transfer cut off") && log.contains("STEPSHIM_FILES_MIN_RATE_BYTES"),
        "the cut is logged: {log}"
    );
    // The trickled client, read out at last, gets less than the stream: cut off, not ended.
    let (mut s, got) = trickle.join().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let all = got + rest.len();
    assert!(all < 32 << 20, "{all} bytes of a stream over 32 MiB");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_at_a_normal_speed_is_never_cut() {
    let shim = paced_shim();
    let dir = big_tree("normal");
    let whole = full_download(&shim, &dir).await;
    // Read at about 12 MiB/s, over several intervals: every byte of the stream arrives.
    let mut s = start_get(&shim, &dir, &shim.token);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let head = got.windows(4).position(|w| w == b"\r\n\r\n");
            if let Some(end) = head
                && got.len() >= end + 4 + whole
            {
                return (got, end + 4);
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return (got, head.map_or(0, |e| e + 4)),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let (got, body_at) = tokio::task::spawn_blocking(move || reader.join().unwrap())
        .await
        .unwrap();
    let head = String::from_utf8_lossy(&got[..body_at]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains(&format!("content-length: {whole}")), "{head}");
    assert_eq!(
        got.len() - body_at,
        whole,
        "cut off after {:?}",
        t.elapsed()
    );
    assert!(
        t.elapsed() > Duration::from_secs(2),
        "not slow enough to span intervals"
    );
    assert!(!shim.log.lock().unwrap().contains("cut off"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_sent_at_a_trickle_is_refused_and_leaves_nothing() {
    let shim = paced_shim();
    let dir = scratch("trickle-up");
    let mut h = tar::Header::new_gnu();
    h.set_path("big").unwrap();
    h.set_size(1 << 20);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    let mut s = TcpStream::connect(&shim.addr).unwrap();
    let head = format!(
        "PUT /v1/files?path={}/in HTTP/1.1\r\nHost: shim\r\nAuthorization: Bearer {}\r\n\
         Content-Length: {}\r\n\r\n",
        dir.display(),
        shim.token,
        2 << 20
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(h.as_bytes()).unwrap();
    let t = Instant::now();
    // One byte every 20 ms: never idle, far below the minimum; the answer ends the trickle.
    s.set_nonblocking(true).unwrap();
    let mut resp = Vec::new();
    let mut buf = [0u8; 4096];
    while t.elapsed() < Duration::from_secs(15) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => resp.extend_from_slice(&buf[..n]),
            Err(_) => {
                let _ = s.write(&[1]);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let resp = String::from_utf8_lossy(&resp).into_owned();
    assert!(
        resp.starts_with("HTTP/1.1 400"),
        "after {:?}: {resp}",
        t.elapsed()
    );
    assert!(resp.contains("STEPSHIM_FILES_MIN_RATE_BYTES"), "{resp}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(!dir.join("in/big").exists(), "nothing left");
    let _ = std::fs::remove_dir_all(&dir);
}
