//! Extraction against a step process that moves things under it, on the real binary: `DIR/a`
//! swapped between a directory and a symlink to an outside directory with `RENAME_EXCHANGE` in a
//! tight loop while uploads of `a/...` run, a symlink planted as the target directory, and a `./`
//! entry that must not rewrite the target's own metadata.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use common::Shim;
use stepshim::rename::{Rename, rename_at};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stepshim-race-{name}-{}", common::random_hex(4)));
    fs::create_dir_all(&d).unwrap();
    d
}

/// A tar of `entries`: (name, mode, contents); a name ending in `/` is a directory.
fn tar_of(entries: &[(&str, u32, &[u8])]) -> Bytes {
    let mut b = tar::Builder::new(Vec::new());
    for (name, mode, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(if name.ends_with('/') {
            tar::EntryType::Directory
        } else {
            tar::EntryType::Regular
        });
        h.set_mode(*mode);
        h.set_mtime(1_000_000_000);
        h.set_uid(1234);
        h.set_gid(1234);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, *data).unwrap();
    }
    Bytes::from(b.into_inner().unwrap())
}

/// Everything below `dir`, as paths relative to it.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_directory_for_a_symlink_never_lets_a_write_out() {
    const UPLOADS: usize = 150;
    let shim = Shim::start();
    let root = scratch("swap");
    let dir = root.join("dir");
    let outside = root.join("outside");
    fs::create_dir_all(dir.join("a")).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o755)).unwrap();
    let outside_before = fs::metadata(&outside).unwrap();
    symlink(&outside, dir.join("b")).unwrap();

    // The step process: swaps DIR/a and DIR/b (a directory and a symlink to outside) until told,
    // planting a new symlink whenever an upload replaced the one it had.
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let replants = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps, replants) = (stop.clone(), swaps.clone(), replants.clone());
        let dirfd: OwnedFd = fs::File::open(&dir).unwrap().into();
        let (dir, outside) = (dir.clone(), outside.clone());
        std::thread::spawn(move || {
            for i in 0..200_000_000u64 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (a, b) = (OsStr::new("a"), OsStr::new("b"));
                if rename_at(dirfd.as_fd(), a, dirfd.as_fd(), b, Rename::Exchange).is_ok() {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
                let is_link =
                    |n: &str| fs::symlink_metadata(dir.join(n)).is_ok_and(|m| m.is_symlink());
                if i % 64 == 0 && !is_link("a") && !is_link("b") {
                    let n = replants.fetch_add(1, Ordering::Relaxed);
                    if fs::rename(dir.join("b"), dir.join(format!("old{n}"))).is_ok() {
                        let _ = symlink(&outside, dir.join("b"));
                    }
                }
            }
        })
    };

    let (mut ok, mut refused) = (0, 0);
    for i in 0..UPLOADS {
        let name = format!("a/f{i}");
        let sub = format!("a/d{i}/");
        let deep = format!("a/d{i}/g");
        // Every other upload also names a/ itself (mode 0777), which would chmod outside if it
        // followed the symlink.
        let mut entries: Vec<(&str, u32, &[u8])> = vec![
            (&name, 0o4755, b"#!/bin/sh\n"),
            (&sub, 0o777, b""),
            (&deep, 0o4755, b"x"),
        ];
        if i % 2 == 0 {
            entries.insert(0, ("a/", 0o777, b""));
        }
        match shim
            .client
            .files_in_bytes(dir.to_str().unwrap(), tar_of(&entries))
            .await
        {
            Ok(()) => ok += 1,
            Err(e) => {
                assert!(
                    matches!(
                        e.code(),
                        Some(protocol::ErrorCode::InvalidTar | protocol::ErrorCode::Internal)
                    ),
                    "{e}"
                );
                refused += 1;
            }
        }
        assert!(tree(&outside).is_empty(), "upload {i} wrote outside DIR");
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    let replants = replants.load(Ordering::Relaxed);
    let after = fs::metadata(&outside).unwrap();
    assert!(tree(&outside).is_empty(), "nothing outside DIR");
    assert_eq!(
        after.mode(),
        outside_before.mode(),
        "outside's mode unchanged"
    );
    assert_eq!(
        after.mtime(),
        outside_before.mtime(),
        "outside's mtime unchanged"
    );
    assert_eq!(
        after.uid(),
        outside_before.uid(),
        "outside's owner unchanged"
    );
    let leftovers: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".stepshim-put-"))
        .filter(|n| !n.starts_with("old"))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");
    eprintln!(
        "race: {UPLOADS} uploads ({ok} committed, {refused} refused), {swaps} swaps, \
         {replants} symlinks replanted"
    );
    assert!(swaps > UPLOADS as u64, "the swapper ran ({swaps} swaps)");
    let _ = fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_planted_as_the_target_is_not_followed() {
    let shim = Shim::start();
    let root = scratch("planted");
    let outside = root.join("outside");
    fs::create_dir(&outside).unwrap();
    symlink(&outside, root.join("dir")).unwrap();
    let tar = tar_of(&[("f", 0o4755, b"pwned")]);
    for target in [root.join("dir"), root.join("dir/sub")] {
        let err = shim
            .client
            .files_in_bytes(target.to_str().unwrap(), tar.clone())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(protocol::ErrorCode::InvalidPath), "{err}");
    }
    assert!(tree(&outside).is_empty());
    let _ = fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dot_entry_leaves_the_target_metadata_alone() {
    let shim = Shim::start();
    let root = scratch("dot");
    let dir = root.join("dir");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
    let before = fs::metadata(&dir).unwrap();
    let tar = tar_of(&[
        ("./", 0o777, b""),
        ("./sub/", 0o700, b""),
        ("./f", 0o644, b"f"),
    ]);
    shim.client
        .files_in_bytes(dir.to_str().unwrap(), tar)
        .await
        .unwrap();
    let after = fs::metadata(&dir).unwrap();
    assert_eq!(after.mode() & 0o7777, 0o750);
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_ne!(after.mtime(), 1_000_000_000);
    let sub = fs::metadata(dir.join("sub")).unwrap();
    assert_eq!((sub.mode() & 0o7777, sub.mtime()), (0o700, 1_000_000_000));
    if before.uid() == 0 {
        assert_eq!(sub.uid(), 1234, "entries below keep their owners as root");
    }
    let _ = fs::remove_dir_all(&root);
}
