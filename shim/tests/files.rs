//! Files in and out over HTTP: a tree round-trips through PUT and GET, and a hostile tar is refused
//! with 400 `invalid_tar` without writing anything outside the target directory.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use bytes::Bytes;
use common::{Shim, error_code, raw};
use http_body_util::BodyExt;

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("stepshim-files-{name}-{}", common::random_hex(4)));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tar with a hostile second entry that tries to write through a symlink to `outside`.
fn escaping_tar(outside: &std::path::Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    b.append_link(&mut h, "link", outside).unwrap();
    let data = b"pwned";
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "link/evil", &data[..]).unwrap();
    b.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_round_trips_and_escapes_are_refused() {
    let shim = Shim::start();
    let src = scratch("src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/b/data.bin"), vec![7u8; 300_000]).unwrap();
    std::fs::write(src.join("top.txt"), b"hello").unwrap();
    std::os::unix::fs::symlink("top.txt", src.join("link")).unwrap();
    let tar_bytes = shim
        .client
        .files_out(&format!("{}/", src.display()))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    let dst = scratch("dst").join("new/nested");
    shim.client
        .files_in_bytes(dst.to_str().unwrap(), tar_bytes)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(dst.join("a/b/data.bin")).unwrap(),
        vec![7u8; 300_000]
    );
    assert_eq!(std::fs::read(dst.join("top.txt")).unwrap(), b"hello");
    assert_eq!(
        std::fs::read_link(dst.join("link")).unwrap().to_str(),
        Some("top.txt")
    );

    let outside = scratch("outside");
    let target = scratch("target");
    let (status, _, body) = raw(
        &shim.addr,
        "PUT",
        &format!("/v1/files?path={}", target.display()),
        Some(&shim.token),
        &escaping_tar(&outside),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&body), "invalid_tar");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing may be written outside"
    );
    let err = shim
        .client
        .files_in_bytes(target.to_str().unwrap(), Bytes::from_static(b"garbage"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::InvalidTar));
    for d in [
        src,
        dst.parent().unwrap().parent().unwrap().to_path_buf(),
        outside,
        target,
    ] {
        std::fs::remove_dir_all(d).ok();
    }
}

/// Bytes that differ from one 4 KiB block to the next (a misplaced block would show).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    test_support::noise(len, seed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_and_modes_land_byte_for_byte() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let shim = Shim::start();
    // Large files (written with O_DIRECT): an unaligned tail, an exact multiple of the buffer, a
    // trailing run of zeros (a hole); small files of several modes in one directory (the first
    // one's mode is kept at creation, the others set after).
    let mut trailing_zeros = pattern(8 << 20, 3);
    trailing_zeros.resize(11 << 20, 0);
    let files: Vec<(&str, u32, Vec<u8>)> = vec![
        ("big/unaligned.bin", 0o751, pattern((9 << 20) + 1234, 1)),
        ("big/exact.bin", 0o600, pattern(8 << 20, 2)),
        ("big/zeros_at_end.bin", 0o644, trailing_zeros),
        ("small/a.txt", 0o640, b"a".to_vec()),
        ("small/b.sh", 0o755, b"#!/bin/sh\n".to_vec()),
        ("small/c.txt", 0o640, b"c".to_vec()),
        ("small/d.txt", 0o000, b"d".to_vec()),
        ("small/e.txt", 0o4755, b"e".to_vec()),
    ];
    let mut b = tar::Builder::new(Vec::new());
    for (name, mode, data) in &files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_mtime(1_234_567_890);
        h.set_uid(0);
        h.set_gid(0);
        h.set_cksum();
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    let dir = scratch("large");
    shim.client
        .files_in_bytes(dir.to_str().unwrap(), Bytes::from(b.into_inner().unwrap()))
        .await
        .unwrap();
    for (name, mode, data) in &files {
        let path = dir.join(name);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, *mode, "{name}");
        assert_eq!(meta.mtime(), 1_234_567_890, "{name}");
        assert!(
            std::fs::read(&path).unwrap() == *data,
            "{name}: contents differ"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Pages of `path` in the page cache, from `fincore` (util-linux).
fn cached_bytes(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--raw", "--output", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux) is needed");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `STEPSHIM_FILES_DIRECT_MIN_BYTES`: by default a 16 MiB file is written around the page cache
/// (only its unaligned tail is cached); 0 writes it through the page cache. On a disk file system
/// (the test target's), where direct I/O is allowed.
#[tokio::test]
async fn direct_writes_follow_their_setting() {
    let data = pattern((16 << 20) + 100, 7);
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_cksum();
    b.append_data(&mut h, "big.bin", &data[..]).unwrap();
    let tar = Bytes::from(b.into_inner().unwrap());
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("direct-writes");
    for (setting, cached_at_least, cached_at_most) in
        [(None, 0, 1 << 20), (Some("0"), 15 << 20, u64::MAX)]
    {
        let env: Vec<(&str, &str)> = setting
            .map(|v| ("STEPSHIM_FILES_DIRECT_MIN_BYTES", v))
            .into_iter()
            .collect();
        let shim = Shim::start_with(&env, None);
        let dir = base.join(setting.unwrap_or("default"));
        std::fs::remove_dir_all(&dir).ok();
        shim.client
            .files_in_bytes(dir.to_str().unwrap(), tar.clone())
            .await
            .unwrap();
        let path = dir.join("big.bin");
        let cached = cached_bytes(&path);
        assert!(
            (cached_at_least..=cached_at_most).contains(&cached),
            "{setting:?}: {cached} bytes of {} cached",
            data.len()
        );
        assert!(
            std::fs::read(&path).unwrap() == data,
            "{setting:?}: contents differ"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A symlink keeps its own mtime through `PUT /v1/files` and through a pull between two shims
/// (4.8), so the pulled tree reads the same as its source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_mtimes_survive_an_upload_and_a_pull() {
    use std::os::unix::fs::MetadataExt;
    const OLD: u64 = 1_000_000_000;
    let lmtime = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap().mtime();
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    h.set_mtime(OLD);
    h.set_uid(0);
    h.set_gid(0);
    b.append_link(&mut h, "d/link", "../missing").unwrap();
    let src_shim = Shim::start();
    let src = scratch("symlink-mtime-src");
    src_shim
        .client
        .files_in_bytes(src.to_str().unwrap(), Bytes::from(b.into_inner().unwrap()))
        .await
        .unwrap();
    assert_eq!(lmtime(&src.join("d/link")), OLD as i64);

    let dst_shim = Shim::start();
    src_shim
        .client
        .grant(&common::artifacts::grant(&src, "mtime-tok", 60, None))
        .await
        .unwrap();
    let dst = scratch("symlink-mtime-dst").join("in");
    let spec = common::artifacts::pull_spec(&src_shim.url(), &src, "mtime-tok", &dst);
    dst_shim.client.pull("m", &spec, None).await.unwrap();
    let done = dst_shim.client.pull_status("m", Some(30)).await.unwrap();
    assert_eq!(done.state, protocol::artifacts::PullState::Done, "{done:?}");
    assert_eq!(lmtime(&dst.join("d/link")), OLD as i64);
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(dst.parent().unwrap());
}
