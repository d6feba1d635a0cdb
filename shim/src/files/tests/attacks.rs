//! Hostile tar streams: each must fail with `InvalidTar` (or be defused) and write nothing outside
//! the target directory. Escaping names and links point at `outside`, a sibling of the target
//! directory inside the test's scratch directory, never at real system paths.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::PathBuf;

use tar::EntryType;

use super::{RawTar, Scratch, mode, mtime};
use crate::files::{FilesError, extract};

/// A target directory `dir` and a sentinel directory `outside` next to it.
struct Arena {
    scratch: Scratch,
    dir: PathBuf,
    outside: PathBuf,
}

impl Arena {
    fn new(test: &str) -> Arena {
        let scratch = Scratch::new(test);
        let dir = scratch.join("dir");
        let outside = scratch.join("outside");
        fs::create_dir_all(&dir).unwrap();
        fs::create_dir_all(&outside).unwrap();
        Arena {
            scratch,
            dir,
            outside,
        }
    }

    fn outside_str(&self) -> String {
        self.outside.display().to_string()
    }

    /// The names in `outside`, sorted.
    fn outside_names(&self) -> Vec<String> {
        names_in(&self.outside)
    }

    /// The names in `dir`, sorted (a staging directory left behind would show here).
    fn dir_names(&self) -> Vec<String> {
        names_in(&self.dir)
    }

    /// Extracts `tar`, expecting `InvalidTar`.
    fn refuse(&self, tar: &[u8]) -> String {
        match extract(tar, &self.dir, true) {
            Err(FilesError::InvalidTar(msg)) => msg,
            other => panic!("expected InvalidTar, got {other:?}"),
        }
    }
}

/// The names in a directory, sorted.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn absolute_and_dotdot_names_are_refused() {
    let a = Arena::new("escape-names");
    let abs = format!("{}/evil", a.outside_str());
    for name in [abs.as_str(), "../outside/evil", "x/../../outside/evil", "/"] {
        let tar = RawTar::new()
            .file("fine", b"ok")
            .file(name, b"pwned")
            .finish();
        let msg = a.refuse(&tar);
        assert!(
            msg.contains("absolute") || msg.contains(".."),
            "{name}: {msg}"
        );
    }
    assert!(a.outside_names().is_empty());
    assert!(
        fs::read_dir(a.scratch.join("dir/x")).is_err(),
        "nothing made for x/../.."
    );
}

#[test]
fn a_symlink_entry_cannot_redirect_later_entries() {
    let a = Arena::new("symlink-parent");
    let abs = a.outside_str();
    for target in [abs.as_str(), "../outside", "./../outside/."] {
        let tar = RawTar::new()
            .symlink("a", target)
            .file("a/passwd", b"pwned")
            .finish();
        let msg = a.refuse(&tar);
        assert!(msg.contains("symlink"), "{msg}");
        assert!(a.dir_names().is_empty(), "a refused upload leaves nothing");
    }
    // The same through a symlink that was already in the directory.
    symlink(&a.outside, a.dir.join("pre")).unwrap();
    let tar = RawTar::new().file("pre/passwd", b"pwned").finish();
    a.refuse(&tar);
    let tar = RawTar::new().dir("pre/sub/").finish();
    a.refuse(&tar);
    assert!(a.outside_names().is_empty());
}

#[test]
fn a_symlink_replacing_a_directory_is_not_written_through() {
    let a = Arena::new("symlink-replaces-dir");
    let out = a.outside_str();
    // An empty directory is replaced, but what follows cannot go through the symlink.
    let tar = RawTar::new()
        .dir("d/")
        .symlink("d", &out)
        .file("d/x", b"pwned")
        .finish();
    a.refuse(&tar);
    // A non-empty directory is not replaced at all.
    let tar = RawTar::new()
        .dir("e/")
        .file("e/f", b"f")
        .symlink("e", &out)
        .finish();
    let msg = a.refuse(&tar);
    assert!(msg.contains("non-empty directory"), "{msg}");
    assert!(a.dir_names().is_empty(), "a refused upload leaves nothing");
    assert!(a.outside_names().is_empty());
}

#[test]
fn directory_metadata_set_at_the_end_does_not_follow_a_later_symlink() {
    let a = Arena::new("late-dir-meta");
    fs::set_permissions(&a.outside, fs::Permissions::from_mode(0o700)).unwrap();
    let before = mtime(&a.outside);
    let tar = RawTar::new()
        .entry(EntryType::Directory, b"d/", b"", 0o777, b"")
        .symlink("d", &a.outside_str())
        .finish();
    extract(&tar[..], &a.dir, true).unwrap();
    assert_eq!(
        mode(&a.outside),
        0o700,
        "outside not chmod-ed through the symlink"
    );
    assert_eq!(mtime(&a.outside), before);
    assert_eq!(fs::read_link(a.dir.join("d")).unwrap(), a.outside);
}

#[test]
fn writing_over_a_symlink_replaces_it_instead_of_writing_through_it() {
    let a = Arena::new("over-symlink");
    let victim = a.outside.join("victim");
    fs::write(&victim, "original").unwrap();
    // A symlink from the stream, then a file of the same name.
    let target = format!("{}/created", a.outside_str());
    let tar = RawTar::new()
        .symlink("l", &target)
        .file("l", b"pwned")
        .finish();
    extract(&tar[..], &a.dir, true).unwrap();
    assert_eq!(fs::read(a.dir.join("l")).unwrap(), b"pwned");
    assert!(fs::symlink_metadata(a.dir.join("l")).unwrap().is_file());
    // A symlink already in the directory, pointing at an existing file outside.
    symlink(&victim, a.dir.join("pre")).unwrap();
    let tar = RawTar::new().file("pre", b"pwned").finish();
    extract(&tar[..], &a.dir, true).unwrap();
    assert_eq!(fs::read(a.dir.join("pre")).unwrap(), b"pwned");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "original");
    assert_eq!(a.outside_names(), ["victim"]);
}

#[test]
fn hard_links_leaving_the_directory_or_going_through_symlinks_are_refused() {
    let a = Arena::new("hard-links");
    let secret = a.outside.join("secret");
    fs::write(&secret, "secret").unwrap();
    let abs = secret.display().to_string();
    let cases = [
        RawTar::new().hard_link("h", "../outside/secret").finish(),
        RawTar::new().hard_link("h", &abs).finish(),
        RawTar::new()
            .symlink("s", "../outside")
            .hard_link("h", "s/secret")
            .finish(),
        RawTar::new()
            .symlink("s2", &abs)
            .hard_link("h", "s2")
            .finish(),
        RawTar::new().hard_link("h", "missing").finish(),
        RawTar::new().dir("sub/").hard_link("h", "sub").finish(),
    ];
    for tar in cases {
        a.refuse(&tar);
        assert!(
            fs::symlink_metadata(a.dir.join("h")).is_err(),
            "no link made"
        );
    }
    let meta = fs::metadata(&secret).unwrap();
    assert_eq!(meta.nlink(), 1, "nothing links to the file outside");
    assert_eq!(fs::read_to_string(&secret).unwrap(), "secret");
    assert_eq!(a.outside_names(), ["secret"]);
    // A link inside the directory still works.
    let tar = RawTar::new()
        .file("f", b"data")
        .hard_link("h", "./f")
        .finish();
    extract(&tar[..], &a.dir, true).unwrap();
    assert_eq!(
        fs::metadata(a.dir.join("h")).unwrap().ino(),
        fs::metadata(a.dir.join("f")).unwrap().ino()
    );
}

#[test]
fn devices_and_fifos_are_refused() {
    let a = Arena::new("devices");
    for kind in [EntryType::Char, EntryType::Block, EntryType::Fifo] {
        let tar = RawTar::new().entry(kind, b"dev", b"", 0o666, b"").finish();
        let msg = a.refuse(&tar);
        assert!(msg.contains("refused"), "{msg}");
        assert!(fs::symlink_metadata(a.dir.join("dev")).is_err());
    }
}

#[test]
fn corrupt_and_truncated_streams_are_invalid() {
    let a = Arena::new("corrupt");
    let good = RawTar::new().file("a", &[7; 4000]).file("b", b"b").finish();
    let mut bad_sum = good.clone();
    bad_sum[0] ^= 0x20;
    let garbage: Vec<u8> = (0..2048u32).map(|i| (i * 31 % 251) as u8).collect();
    let cases: [(&str, &[u8]); 5] = [
        ("garbage", &garbage),
        ("bad checksum", &bad_sum),
        ("cut inside contents", &good[..512 + 1000]),
        ("cut at an entry boundary", &good[..512 + 4096]),
        ("empty", &[]),
    ];
    for (what, tar) in cases {
        match extract(tar, &a.dir, false) {
            Err(FilesError::InvalidTar(_)) => {}
            other => panic!("{what}: expected InvalidTar, got {other:?}"),
        }
    }
    let stats = extract(&good[..], &a.dir, false).unwrap();
    assert_eq!((stats.entries, stats.bytes), (2, 4001));
    assert!(a.outside_names().is_empty());
}

#[test]
fn a_non_directory_entry_cannot_name_the_target_itself() {
    let a = Arena::new("root-entry");
    let tar = RawTar::new().file(".", b"x").finish();
    a.refuse(&tar);
    assert!(fs::metadata(&a.dir).unwrap().is_dir());
}
