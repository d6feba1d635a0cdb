//! Upload bombs and stalls against the real binary: a sparse entry declaring 2 GiB (written
//! sparse) or 1 TiB (refused), a 1 GiB GNU long name and a 512 MiB pax header (refused at their
//! header with RSS bounded), the total size cap, an upload cut midway (nothing left), and the
//! concurrency cap with the idle deadline (stalled uploads cannot starve a normal download).
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Shim, error_code};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stepshim-limits-{name}-{}", common::random_hex(4)));
    fs::create_dir_all(&d).unwrap();
    d
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    n.sort();
    n
}

/// Opens a `PUT /v1/files?path=dir` declaring `len` body bytes and sends `prefix` of them.
fn start_put(shim: &Shim, dir: &Path, len: u64, prefix: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(&shim.addr).unwrap();
    let head = format!(
        "PUT /v1/files?path={} HTTP/1.1\r\nHost: shim\r\nAuthorization: Bearer {}\r\n\
         Content-Length: {len}\r\n\r\n",
        dir.display(),
        shim.token
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(prefix); // the shim may answer and close before taking it all
    s
}

/// Reads an answer until the connection closes (or 30 s pass): (status, body).
fn answer(mut s: TcpStream) -> (u16, Vec<u8>) {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("answer");
    let status = String::from_utf8_lossy(&resp[9..12]).parse().unwrap();
    (status, resp[split + 4..].to_vec())
}

/// The shim's peak resident set (VmHWM), in KiB.
fn peak_rss_kib(shim: &Shim) -> u64 {
    let status = fs::read_to_string(format!("/proc/{}/status", shim.pid())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A header block of `kind` declaring `size` bytes.
fn header(kind: tar::EntryType, name: &str, size: u64) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_path(name).unwrap();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    h.as_bytes().to_vec()
}

/// A GNU sparse entry of apparent size `real`: 4 KiB of data at its start and its end.
fn sparse_tar(real: u64) -> Bytes {
    let mut h = tar::Header::new_gnu();
    h.set_path("sparse.img").unwrap();
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(8192);
    let gnu = h.as_gnu_mut().unwrap();
    gnu.set_real_size(real);
    gnu.sparse[0].set_offset(0);
    gnu.sparse[0].set_length(4096);
    gnu.sparse[1].set_offset(real - 4096);
    gnu.sparse[1].set_length(4096);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend([b'a'; 4096]);
    out.extend([b'b'; 4096]);
    out.extend([0; 1024]);
    Bytes::from(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_bombs_are_written_sparse_or_refused() {
    let shim = Shim::start();
    let dir = scratch("sparse");
    let small = sparse_tar(2 << 30);
    assert!(small.len() < 10 * 1024);
    shim.client
        .files_in_bytes(dir.to_str().unwrap(), small)
        .await
        .unwrap();
    let meta = fs::metadata(dir.join("sparse.img")).unwrap();
    assert_eq!(meta.len(), 2 << 30);
    let on_disk = meta.blocks() * 512;
    assert!(
        on_disk < 1 << 20,
        "{on_disk} bytes on disk for a 2 GiB sparse file"
    );
    let target = dir.join("tib");
    let err = shim
        .client
        .files_in_bytes(target.to_str().unwrap(), sparse_tar(1 << 40))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::BodyTooLarge), "{err}");
    assert!(!target.exists());
    assert_eq!(names(&dir), ["sparse.img"]);
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_long_names_and_pax_headers_are_refused_with_rss_bounded() {
    let shim = Shim::start();
    let dir = scratch("headers");
    let before = peak_rss_kib(&shim);
    for (kind, size) in [
        (tar::EntryType::GNULongName, 1u64 << 30),
        (tar::EntryType::XHeader, 512 << 20),
    ] {
        // The header, then 4 MiB of the declared contents: the shim must answer without more.
        let mut prefix = header(kind, "././@LongLink", size);
        prefix.resize(512 + (4 << 20), b'n');
        let (status, body) = answer(start_put(&shim, &dir, 512 + size + 1024, &prefix));
        assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
        assert_eq!(error_code(&body), "body_too_large");
        assert!(String::from_utf8_lossy(&body).contains("65536"));
    }
    let after = peak_rss_kib(&shim);
    eprintln!("peak RSS: {before} KiB before, {after} KiB after");
    assert!(
        after < before + 32 * 1024,
        "peak RSS grew from {before} to {after} KiB"
    );
    assert!(names(&dir).is_empty());
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_cap_refuses_and_leaves_nothing() {
    let shim = Shim::start_with(&[("STEPSHIM_FILES_MAX_BYTES", "1048576")], None);
    let dir = scratch("total");
    let tar = |n: usize| {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(n as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        b.append_data(&mut h, "one", &vec![1u8; n][..]).unwrap();
        Bytes::from(b.into_inner().unwrap())
    };
    let err = shim
        .client
        .files_in_bytes(dir.to_str().unwrap(), tar(2 << 20))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::BodyTooLarge), "{err}");
    assert!(names(&dir).is_empty());
    shim.client
        .files_in_bytes(dir.to_str().unwrap(), tar(500_000))
        .await
        .unwrap();
    assert_eq!(fs::metadata(dir.join("one")).unwrap().len(), 500_000);
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cut_midway_leaves_nothing() {
    let shim = Shim::start();
    let dir = scratch("cut");
    fs::write(dir.join("keep"), "old").unwrap();
    let mut b = tar::Builder::new(Vec::new());
    for name in ["keep", "a", "b"] {
        let mut h = tar::Header::new_gnu();
        h.set_size(100_000);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        b.append_data(&mut h, name, &vec![9u8; 100_000][..])
            .unwrap();
    }
    let tar = b.into_inner().unwrap();
    let s = start_put(&shim, &dir, tar.len() as u64, &tar[..tar.len() / 2]);
    drop(s); // the client goes away mid-body
    common::eventually(
        Duration::from_secs(10),
        "the staging directory to go",
        || names(&dir) == ["keep"],
    )
    .await;
    // Give a late commit every chance to show up before concluding it does not.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(names(&dir), ["keep"]);
    assert_eq!(fs::read_to_string(dir.join("keep")).unwrap(), "old");
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_transfers_are_capped_and_abandoned() {
    let shim = Shim::start_with(
        &[
            ("STEPSHIM_FILES_MAX_CONCURRENT", "4"),
            ("STEPSHIM_FILES_IDLE_TIMEOUT", "2"),
        ],
        None,
    );
    let dir = scratch("stalled");
    fs::write(dir.join("f"), "f").unwrap();
    // 40 uploads that send the header of a 1 MB file and stall.
    let first = header(tar::EntryType::Regular, "big", 1 << 20);
    let stalled: Vec<TcpStream> = (0..40)
        .map(|_| start_put(&shim, &dir.join("up"), 2 << 20, &first))
        .collect();
    let t0 = Instant::now();
    let mut answers = Vec::new();
    let mut waiting = Vec::new();
    for mut s in stalled {
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 12];
        match s.read_exact(&mut buf) {
            Ok(()) => answers.push(String::from_utf8_lossy(&buf[9..12]).into_owned()),
            Err(_) => waiting.push(s),
        }
    }
    assert_eq!(waiting.len(), 4, "exactly the cap is let in: {answers:?}");
    assert!(answers.iter().all(|a| a == "503"), "{answers:?}");
    // The shim keeps serving everything else meanwhile.
    let t = Instant::now();
    shim.client.healthz().await.unwrap();
    let ran = common::run(&shim.client, "alive", &common::sh("echo alive")).await;
    assert_eq!(ran.stdout, b"alive\n");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // A download is refused while the slots are taken, then served once the stalls expire.
    let err = shim
        .client
        .files_out(dir.to_str().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::Unavailable), "{err}");
    for s in waiting {
        let (status, body) = answer(s);
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("STEPSHIM_FILES_IDLE_TIMEOUT"));
    }
    let waited = t0.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "stalls held for {waited:?}"
    );
    use http_body_util::BodyExt;
    let tar = shim
        .client
        .files_out(&format!("{}/", dir.display()))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    assert!(tar.len() >= 1024);
    assert_eq!(names(&dir), ["f"], "nothing left by the abandoned uploads");
    let _ = fs::remove_dir_all(&dir);
}
