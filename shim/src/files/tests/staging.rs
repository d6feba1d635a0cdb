//! Extraction through the staging directory: both ways of resolving parents, what a failed
//! stream leaves (nothing), merging into an existing directory, the target's own metadata, a
//! symlinked target, sparse entries and the caps.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use tar::EntryType;

use super::{RawTar, Scratch, mode, mtime};
use crate::files::{ExtractStats, FilesError, Limits, Options, Resolve, extract, extract_with};

fn opts(resolve: Resolve) -> Options {
    Options {
        same_owner: false,
        owner: None,
        limits: Limits::default(),
        resolve,
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    n.sort();
    n
}

#[test]
fn both_resolvers_extract_the_same_tree_and_refuse_the_same_symlinks() {
    for resolve in [Resolve::Auto, Resolve::Walk] {
        let t = Scratch::new("resolvers");
        let dir = t.join("dir");
        let tar = RawTar::new()
            .file("a/b/c/deep", b"deep")
            .dir("a/b/")
            .symlink("a/l", "b")
            .hard_link("a/h", "a/b/c/deep")
            .finish();
        extract_with(&tar[..], &dir, &opts(resolve)).unwrap();
        assert_eq!(fs::read(dir.join("a/b/c/deep")).unwrap(), b"deep");
        assert_eq!(fs::read(dir.join("a/h")).unwrap(), b"deep");
        let bad = RawTar::new().file("a/l/x", b"x").finish();
        match extract_with(&bad[..], &dir, &opts(resolve)) {
            Err(FilesError::InvalidTar(msg)) => assert!(msg.contains("symlink"), "{msg}"),
            other => panic!("{resolve:?}: {other:?}"),
        }
        assert!(!dir.join("a/b/x").exists());
        assert_eq!(names(&dir), ["a"], "{resolve:?}: no staging directory left");
    }
}

#[test]
fn a_failed_stream_leaves_the_target_as_it_was() {
    let t = Scratch::new("all-or-nothing");
    let dir = t.join("dir");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("keep"), "old").unwrap();
    let good = RawTar::new()
        .file("keep", b"new")
        .file("added", &[1; 3000])
        .finish();
    for cut in [600, 1024 + 512 + 100, good.len() - 1024] {
        match extract(&good[..cut], &dir, false) {
            Err(FilesError::InvalidTar(_)) => {}
            other => panic!("cut at {cut}: {other:?}"),
        }
        assert_eq!(names(&dir), ["keep"]);
        assert_eq!(fs::read_to_string(dir.join("keep")).unwrap(), "old");
    }
    // A missing target is not even created.
    let missing = t.join("new/nested");
    assert!(extract(&good[..600], &missing, false).is_err());
    assert!(!t.join("new").exists());
    assert_eq!(names(&t.0), ["dir"]);
    // The whole stream: merged over what is there, others kept.
    fs::write(dir.join("other"), "o").unwrap();
    extract(&good[..], &dir, false).unwrap();
    assert_eq!(names(&dir), ["added", "keep", "other"]);
    assert_eq!(fs::read_to_string(dir.join("keep")).unwrap(), "new");
}

#[test]
fn a_conflict_found_at_commit_moves_nothing() {
    let t = Scratch::new("conflict");
    let dir = t.join("dir");
    fs::create_dir_all(dir.join("full")).unwrap();
    fs::write(dir.join("full/x"), "x").unwrap();
    let tar = RawTar::new().file("a", b"a").file("full", b"f").finish();
    match extract(&tar[..], &dir, false) {
        Err(FilesError::InvalidTar(msg)) => assert!(msg.contains("non-empty"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(names(&dir), ["full"]);
    // A directory made only as a parent does not replace a symlink already there.
    symlink(t.join("elsewhere"), dir.join("pre")).unwrap();
    let tar = RawTar::new().file("pre/f", b"f").finish();
    assert!(matches!(
        extract(&tar[..], &dir, false),
        Err(FilesError::InvalidTar(_))
    ));
    assert!(fs::symlink_metadata(dir.join("pre")).unwrap().is_symlink());
}

#[test]
fn a_dot_entry_leaves_the_target_metadata_alone() {
    let t = Scratch::new("dot-entry");
    let dir = t.join("dir");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
    let tar = RawTar::new()
        .entry(EntryType::Directory, b"./", b"", 0o777, b"")
        .entry(EntryType::Directory, b"sub/", b"", 0o700, b"")
        .file("sub/f", b"f")
        .finish();
    extract(&tar[..], &dir, true).unwrap();
    assert_eq!(mode(&dir), 0o750);
    assert_ne!(
        mtime(&dir),
        1_500_000_000,
        "the entry's mtime is not applied"
    );
    assert_eq!(
        mode(&dir.join("sub")),
        0o700,
        "other directories keep theirs"
    );
    assert_eq!(mtime(&dir.join("sub")), 1_500_000_000);
}

#[test]
fn a_target_reached_through_a_symlink_is_refused() {
    let t = Scratch::new("symlinked-target");
    fs::create_dir(t.join("outside")).unwrap();
    symlink(t.join("outside"), t.join("dir")).unwrap();
    let tar = RawTar::new().file("f", b"f").finish();
    for target in [t.join("dir"), t.join("dir/sub")] {
        match extract(&tar[..], &target, false) {
            Err(FilesError::InvalidPath(msg)) => assert!(msg.contains("symlink"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(names(&t.join("outside")).is_empty());
}

/// A GNU sparse entry of apparent size `real` with 4 KiB of data at its start and its end.
pub(super) fn sparse_tar(real: u64) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_path("sparse.img").unwrap();
    h.set_entry_type(EntryType::GNUSparse);
    h.set_mode(0o644);
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
    out
}

#[test]
fn sparse_entries_are_written_sparse_and_capped_by_apparent_size() {
    let t = Scratch::new("sparse");
    let dir = t.join("dir");
    let stats = extract(&sparse_tar(2 << 30)[..], &dir, false).unwrap();
    assert_eq!(
        stats,
        ExtractStats {
            entries: 1,
            bytes: 2 << 30
        }
    );
    let meta = fs::metadata(dir.join("sparse.img")).unwrap();
    assert_eq!(meta.len(), 2 << 30);
    assert!(
        meta.blocks() * 512 < 1 << 20,
        "{} blocks on disk",
        meta.blocks()
    );
    match extract(&sparse_tar(1 << 40)[..], &dir, false) {
        Err(FilesError::TooLarge(msg)) => assert!(msg.contains("sparse.img"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(names(&dir), ["sparse.img"]);
}

#[test]
fn the_caps_refuse_with_too_large_and_leave_nothing() {
    let t = Scratch::new("caps");
    let dir = t.join("dir");
    let limits = Limits {
        max_bytes: 64 * 1024,
        max_header_bytes: 1024,
        ..Limits::default()
    };
    let o = Options {
        limits,
        ..opts(Resolve::Auto)
    };
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    b.append_data(&mut h, "n/".repeat(600) + "f", &b"x"[..])
        .unwrap();
    let long = b.into_inner().unwrap();
    let big = RawTar::new().file("big", &[7; 100_000]).finish();
    for tar in [long, big] {
        match extract_with(&tar[..], &dir, &o) {
            Err(FilesError::TooLarge(_)) => {}
            other => panic!("{other:?}"),
        }
        assert!(!dir.exists());
    }
}
