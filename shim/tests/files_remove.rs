//! `DELETE /v1/files?path=P` (PROTOCOL.md 4.8.2) on the real binary: a tree, a file and a symlink
//! (itself, not its target) are removed; a symlinked component, `/`, relative paths and `..` are
//! refused; a missing path is 404; a grant token is refused; a tree deeper than the limit is
//! refused; and a process swapping directories for symlinks to an outside directory while trees
//! are removed never gets anything outside removed.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::artifacts::{grant, scratch};
use common::{Shim, error_code, raw};
use protocol::ErrorCode;
use stepshim::rename::{Rename, rename_at};

/// `outside/` with a file and a subdirectory with a file: what no removal may touch.
fn sentinel(root: &Path) -> PathBuf {
    let o = root.join("outside");
    fs::create_dir_all(o.join("sub")).unwrap();
    fs::write(o.join("keep"), b"keep").unwrap();
    fs::write(o.join("sub/keep"), b"keep").unwrap();
    o
}

fn intact(outside: &Path) {
    assert_eq!(fs::read(outside.join("keep")).unwrap(), b"keep");
    assert_eq!(fs::read(outside.join("sub/keep")).unwrap(), b"keep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_files_and_symlinks_are_removed_without_following_links() {
    let shim = Shim::start();
    let root = scratch("rm");
    let outside = sentinel(&root);
    let tree = root.join("tree");
    fs::create_dir_all(tree.join("a/b/c")).unwrap();
    for i in 0..50 {
        fs::write(tree.join(format!("a/b/c/f{i}")), b"x").unwrap();
    }
    // Symlinks inside the tree, to outside: removed as links.
    symlink(&outside, tree.join("a/to-dir")).unwrap();
    symlink(outside.join("keep"), tree.join("a/b/to-file")).unwrap();
    shim.client
        .remove_files(tree.to_str().unwrap())
        .await
        .unwrap();
    assert!(fs::symlink_metadata(&tree).is_err(), "the tree is gone");
    intact(&outside);

    let file = root.join("file");
    fs::write(&file, b"f").unwrap();
    shim.client
        .remove_files(file.to_str().unwrap())
        .await
        .unwrap();
    assert!(fs::symlink_metadata(&file).is_err());

    // A symlink at P: the link goes, its target stays (a directory or a file).
    // A trailing `/` changes nothing.
    for (name, target) in [
        ("ldir", outside.clone()),
        ("lfile", outside.join("keep")),
        ("ldir-slash/", outside.clone()),
    ] {
        let link = root.join(name.trim_end_matches('/'));
        symlink(&target, &link).unwrap();
        let at = format!("{}/{name}", root.display());
        shim.client.remove_files(&at).await.unwrap();
        assert!(fs::symlink_metadata(&link).is_err(), "{name}");
        intact(&outside);
    }
    // Absent: 404 file_not_found, which the client reports as such.
    let err = shim
        .client
        .remove_files(root.join("nothing").to_str().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::FileNotFound), "{err}");
    let err = shim
        .client
        .remove_files(root.join("nothing/below").to_str().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::FileNotFound), "{err}");
    let _ = fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinked_components_and_bad_paths_are_refused() {
    let shim = Shim::start();
    let root = scratch("rm-refused");
    let outside = sentinel(&root);
    symlink(&outside, root.join("link")).unwrap();
    fs::write(root.join("file"), b"f").unwrap();
    let refused = |p: &str| {
        let (shim, p) = (&shim, p.to_owned());
        async move {
            let q = format!("/v1/files?path={p}");
            let (status, _, body) = raw(&shim.addr, "DELETE", &q, Some(&shim.token), b"").await;
            (status, error_code(&body))
        }
    };
    let r = root.display();
    for p in [
        format!("{r}/link/keep"),
        format!("{r}/link/sub"),
        format!("{r}/file/x"),
        "/".to_owned(),
        "//".to_owned(),
        "/.".to_owned(),
        "relative/path".to_owned(),
        format!("{r}/outside/../outside"),
    ] {
        assert_eq!(refused(&p).await, (400, "invalid_path".to_owned()), "{p}");
    }
    intact(&outside);
    assert!(root.join("file").exists());
    // The grant token of a path may read it, never remove it.
    shim.client
        .grant(&grant(&outside, "rm-tok", 60, None))
        .await
        .unwrap();
    let q = format!("/v1/files?path={}", outside.display());
    let (status, _, body) = raw(&shim.addr, "DELETE", &q, Some("rm-tok"), b"").await;
    assert_eq!((status, error_code(&body).as_str()), (403, "forbidden"));
    let (status, _, _) = raw(&shim.addr, "DELETE", &q, None, b"").await;
    assert_eq!(status, 401);
    intact(&outside);
    let _ = fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_deeper_than_the_limit_is_refused() {
    let shim = Shim::start();
    let root = scratch("rm-deep");
    let ok = root.join("ok");
    let deep = root.join("deep");
    // 512 levels below P are removed; 513 are not entered.
    fs::create_dir_all(ok.join("d/".repeat(512))).unwrap();
    fs::create_dir_all(deep.join("d/".repeat(513))).unwrap();
    shim.client
        .remove_files(ok.to_str().unwrap())
        .await
        .unwrap();
    assert!(!ok.exists());
    let err = shim
        .client
        .remove_files(deep.to_str().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidPath), "{err}");
    assert!(deep.exists());
    let _ = fs::remove_dir_all(&root);
}

/// The step process: swaps `dir/a` with `dir/b` (a symlink to outside) in a loop with
/// `RENAME_EXCHANGE`, and plants a fresh tree and link whenever a removal took them.
fn swapper(
    dir: PathBuf,
    outside: PathBuf,
    stop: Arc<AtomicBool>,
) -> (std::thread::JoinHandle<()>, Arc<AtomicU64>) {
    let swaps = Arc::new(AtomicU64::new(0));
    let counted = swaps.clone();
    let handle = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            // Opened each time: a removal of `dir` itself takes the old one away.
            let Ok(dirfd) = fs::File::open(&dir).map(OwnedFd::from) else {
                let _ = fs::create_dir_all(&dir);
                continue;
            };
            let (a, b) = (OsStr::new("a"), OsStr::new("b"));
            if rename_at(dirfd.as_fd(), a, dirfd.as_fd(), b, Rename::Exchange).is_ok() {
                counted.fetch_add(1, Ordering::Relaxed);
            }
            if fs::symlink_metadata(dir.join("a")).is_err() {
                let _ = fs::create_dir_all(dir.join("a/x"));
                let _ = fs::write(dir.join("a/x/f"), b"f");
            }
            if fs::symlink_metadata(dir.join("b")).is_err() {
                let _ = symlink(&outside, dir.join("b"));
            }
        }
    });
    (handle, swaps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_directories_for_symlinks_never_removes_outside() {
    const REMOVALS: usize = 300;
    let shim = Shim::start();
    let root = scratch("rm-race");
    let outside = sentinel(&root);
    let dir = root.join("p");
    fs::create_dir_all(dir.join("a/x")).unwrap();
    symlink(&outside, dir.join("b")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (handle, swaps) = swapper(dir.clone(), outside.clone(), stop.clone());
    let (mut removed, mut failed) = (0, 0);
    for i in 0..REMOVALS {
        // The swapper swaps between any two removals, however loaded the machine.
        let seen = swaps.load(Ordering::Relaxed);
        common::eventually(Duration::from_secs(10), "a swap", || {
            swaps.load(Ordering::Relaxed) > seen
        })
        .await;
        // Alternately the swapped entries themselves and the directory holding them.
        let target = if i % 3 == 0 {
            dir.clone()
        } else {
            dir.join("a")
        };
        match shim.client.remove_files(target.to_str().unwrap()).await {
            Ok(()) => removed += 1,
            Err(e) => {
                assert!(
                    matches!(
                        e.code(),
                        Some(
                            ErrorCode::Internal | ErrorCode::FileNotFound | ErrorCode::InvalidPath
                        )
                    ),
                    "{e}"
                );
                failed += 1;
            }
        }
        intact(&outside);
        if i % 3 == 0 {
            let _ = fs::create_dir_all(dir.join("a/x"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!("race: {REMOVALS} removals ({removed} done, {failed} failed), {swaps} swaps");
    assert!(swaps >= REMOVALS as u64, "the swapper ran ({swaps} swaps)");
    assert!(removed > 0, "some removals succeeded");
    intact(&outside);
    let _ = fs::remove_dir_all(&root);
}
