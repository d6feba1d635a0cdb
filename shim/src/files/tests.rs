//! Tests of files in/out on real files: round trips, naming, errors. Hostile streams are in
//! `tests/attacks.rs`. Every test works in its own directory under the system temp dir, removed
//! afterwards; nothing points at real system paths.
#![allow(
    clippy::unwrap_used,
    reason = "a test should fail loudly where its setup breaks"
)]

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use tar::EntryType;

use super::{FilesError, archive, extract};

mod attacks;
mod resume;
mod shrinking;
mod staging;
mod walk;

/// A scratch directory, removed on drop.
pub(super) struct Scratch(pub PathBuf);

impl Scratch {
    pub(crate) fn new(test: &str) -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("stepshim-files-{}-{test}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    pub(crate) fn join(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A tar stream built entry by entry with raw names, so tests can write what `tar::Builder` refuses.
pub(super) struct RawTar(tar::Builder<Vec<u8>>);

impl RawTar {
    pub(crate) fn new() -> RawTar {
        RawTar(tar::Builder::new(Vec::new()))
    }

    pub(crate) fn entry(
        &mut self,
        kind: EntryType,
        name: &[u8],
        link: &[u8],
        mode: u32,
        data: &[u8],
    ) -> &mut Self {
        let mut header = tar::Header::new_gnu();
        let old = header.as_old_mut();
        assert!(name.len() <= old.name.len() && link.len() <= old.linkname.len());
        old.name[..name.len()].copy_from_slice(name);
        old.linkname[..link.len()].copy_from_slice(link);
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_mtime(1_500_000_000);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(data.len() as u64);
        header.set_cksum();
        self.0.append(&header, data).unwrap();
        self
    }

    pub(crate) fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.entry(EntryType::Regular, name.as_bytes(), b"", 0o644, data)
    }

    pub(crate) fn dir(&mut self, name: &str) -> &mut Self {
        self.entry(EntryType::Directory, name.as_bytes(), b"", 0o755, b"")
    }

    pub(crate) fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.entry(
            EntryType::Symlink,
            name.as_bytes(),
            target.as_bytes(),
            0o777,
            b"",
        )
    }

    pub(crate) fn hard_link(&mut self, name: &str, target: &str) -> &mut Self {
        self.entry(
            EntryType::Link,
            name.as_bytes(),
            target.as_bytes(),
            0o644,
            b"",
        )
    }

    pub(crate) fn finish(&mut self) -> Vec<u8> {
        self.0.finish().unwrap();
        std::mem::take(self.0.get_mut())
    }
}

/// The names of the entries of a tar stream, in order.
fn names(tar: &[u8]) -> Vec<String> {
    tar::Archive::new(tar)
        .entries()
        .unwrap()
        .map(|e| String::from_utf8(e.unwrap().path_bytes().into_owned()).unwrap())
        .collect()
}

fn archive_to_vec(path: &Path, trailing_slash: bool) -> Result<Vec<u8>, FilesError> {
    let mut path = path.display().to_string();
    if trailing_slash {
        path.push('/');
    }
    archive(&path, Vec::new())
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn set_mtime(path: &Path, secs: u64) {
    let file = fs::File::open(path).unwrap();
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

fn mtime(path: &Path) -> i64 {
    fs::symlink_metadata(path).unwrap().mtime()
}

/// 5 MiB of deterministic noise.
fn big_contents() -> Vec<u8> {
    test_support::noise(5 * 1024 * 1024, 0x9e37_79b9_7f4a_7c15)
}

#[test]
fn a_tree_survives_a_round_trip_with_contents_links_modes_and_mtimes() {
    let t = Scratch::new("round-trip");
    let src = t.join("src");
    fs::create_dir_all(src.join("d1/d2")).unwrap();
    fs::write(src.join("d1/d2/file.txt"), "hello\n").unwrap();
    fs::write(src.join("empty"), "").unwrap();
    let big = big_contents();
    fs::write(src.join("big"), &big).unwrap();
    symlink("d1/d2/file.txt", src.join("link")).unwrap();
    fs::hard_link(src.join("d1/d2/file.txt"), src.join("hard")).unwrap();
    for (name, mode) in [("run.sh", 0o755), ("suid", 0o4755), ("private", 0o600)] {
        fs::write(src.join(name), "#!/bin/sh\n").unwrap();
        fs::set_permissions(src.join(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::set_permissions(src.join("d1/d2"), fs::Permissions::from_mode(0o750)).unwrap();
    set_mtime(&src.join("d1/d2/file.txt"), 1_000_000_000);
    set_mtime(&src.join("d1"), 1_100_000_000);

    let tar = archive_to_vec(&src, true).unwrap();
    let dst = t.join("dst");
    let stats = extract(&tar[..], &dst, false).unwrap();

    // ./ d1/ d2/ file.txt big empty hard link private run.sh suid
    assert_eq!(stats.entries, 11);
    assert_eq!(stats.bytes, 6 + big.len() as u64 + 3 * 10);
    assert_eq!(
        fs::read_to_string(dst.join("d1/d2/file.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(fs::read(dst.join("empty")).unwrap(), b"");
    assert_eq!(
        Sha256::digest(fs::read(dst.join("big")).unwrap()),
        Sha256::digest(&big)
    );
    assert_eq!(
        fs::read_link(dst.join("link")).unwrap(),
        Path::new("d1/d2/file.txt")
    );
    assert_eq!(
        fs::metadata(dst.join("hard")).unwrap().ino(),
        fs::metadata(dst.join("d1/d2/file.txt")).unwrap().ino(),
        "the hard link is a hard link again"
    );
    assert_eq!(mode(&dst.join("run.sh")), 0o755);
    assert_eq!(mode(&dst.join("suid")), 0o4755);
    assert_eq!(mode(&dst.join("private")), 0o600);
    assert_eq!(mode(&dst.join("d1/d2")), 0o750);
    assert_eq!(mtime(&dst.join("d1/d2/file.txt")), 1_000_000_000);
    assert_eq!(
        mtime(&dst.join("d1")),
        1_100_000_000,
        "directory mtime set after its contents"
    );
}

#[test]
fn a_trailing_slash_archives_the_contents_and_none_names_the_directory() {
    let t = Scratch::new("naming");
    let src = t.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/a"), "a").unwrap();
    fs::write(src.join("b"), "b").unwrap();

    let contents = archive_to_vec(&src, true).unwrap();
    assert_eq!(names(&contents), ["./", "./b", "./sub/", "./sub/a"]);
    let whole = archive_to_vec(&src, false).unwrap();
    assert_eq!(names(&whole), ["src/", "src/b", "src/sub/", "src/sub/a"]);

    let dst = t.join("dst");
    extract(&whole[..], &dst, false).unwrap();
    assert_eq!(fs::read_to_string(dst.join("src/sub/a")).unwrap(), "a");
    extract(&contents[..], &dst, false).unwrap();
    assert_eq!(fs::read_to_string(dst.join("sub/a")).unwrap(), "a");
}

#[test]
fn a_single_file_is_one_entry_named_after_it_and_a_symlink_is_not_followed() {
    let t = Scratch::new("single");
    fs::write(t.join("report.txt"), "42\n").unwrap();
    symlink("report.txt", t.join("alias")).unwrap();

    let tar = archive_to_vec(&t.join("report.txt"), false).unwrap();
    let mut archive = tar::Archive::new(&tar[..]);
    let mut entries = archive.entries().unwrap();
    let mut entry = entries.next().unwrap().unwrap();
    assert_eq!(&*entry.path_bytes(), b"report.txt");
    assert_eq!(entry.header().entry_type(), EntryType::Regular);
    assert_eq!(io::read_to_string(&mut entry).unwrap(), "42\n");
    drop(entry);
    assert!(entries.next().is_none());

    let tar = archive_to_vec(&t.join("alias"), false).unwrap();
    let mut archive = tar::Archive::new(&tar[..]);
    let entry = archive.entries().unwrap().next().unwrap().unwrap();
    assert_eq!(entry.header().entry_type(), EntryType::Symlink);
    assert_eq!(&*entry.link_name_bytes().unwrap(), b"report.txt");
}

#[test]
fn missing_paths_are_not_found_and_relative_paths_are_invalid() {
    let t = Scratch::new("missing");
    fs::write(t.join("file"), "x").unwrap();
    for missing in [t.join("nope"), t.join("nope/deeper")] {
        let err = archive_to_vec(&missing, false).unwrap_err();
        assert!(matches!(err, FilesError::NotFound(_)), "{err:?}");
    }
    let err = archive_to_vec(&t.join("file"), true).unwrap_err();
    assert!(
        matches!(err, FilesError::NotFound(_)),
        "file/ is no directory: {err:?}"
    );
    for bad in ["relative/path", "", "/a\0b"] {
        let err = archive(bad, Vec::new()).unwrap_err();
        assert!(
            matches!(err, FilesError::InvalidPath(_)),
            "{bad:?}: {err:?}"
        );
    }
    let tar = RawTar::new().file("a", b"a").finish();
    let err = extract(&tar[..], Path::new("relative/dir"), false).unwrap_err();
    assert!(matches!(err, FilesError::InvalidPath(_)), "{err:?}");
    let err = extract(&tar[..], &t.join("file"), false).unwrap_err();
    assert!(
        matches!(err, FilesError::InvalidPath(_)),
        "a file as target: {err:?}"
    );
}

#[test]
fn extracting_into_a_missing_nested_directory_creates_it() {
    let t = Scratch::new("nested");
    let dst = t.join("a/b/c");
    let tar = RawTar::new().file("x/y.txt", b"y").finish();
    let stats = extract(&tar[..], &dst, false).unwrap();
    assert_eq!(stats.entries, 1);
    assert_eq!(fs::read_to_string(dst.join("x/y.txt")).unwrap(), "y");
}

#[test]
fn long_gnu_and_pax_names_work() {
    let t = Scratch::new("long");
    let src = t.join("src");
    let deep = format!("{}/{}/{}", "d".repeat(60), "e".repeat(60), "f".repeat(60));
    fs::create_dir_all(src.join(&deep)).unwrap();
    fs::write(src.join(&deep).join("g".repeat(150)), "deep").unwrap();
    let far = format!("{deep}/{}", "g".repeat(150));
    symlink(&far, src.join("to-far")).unwrap();

    let tar = archive_to_vec(&src, true).unwrap();
    let dst = t.join("dst");
    extract(&tar[..], &dst, false).unwrap();
    assert_eq!(fs::read_to_string(dst.join(&far)).unwrap(), "deep");
    assert_eq!(fs::read_link(dst.join("to-far")).unwrap(), Path::new(&far));

    // A pax header naming the next entry.
    let long = format!("{}/{}", "p".repeat(90), "q".repeat(90));
    let record = format!("path={long}\n");
    let mut len = record.len() + 4;
    if format!("{len} {record}").len() != len {
        len += 1;
    }
    let pax = format!("{len} {record}");
    assert_eq!(pax.len(), len);
    let tar = RawTar::new()
        .entry(
            EntryType::XHeader,
            b"PaxHeader/x",
            b"",
            0o644,
            pax.as_bytes(),
        )
        .file("short-name", b"pax")
        .finish();
    extract(&tar[..], &dst, false).unwrap();
    assert_eq!(fs::read_to_string(dst.join(&long)).unwrap(), "pax");
    assert!(!dst.join("short-name").exists());
}

#[test]
fn owners_are_kept_when_asked_and_setuid_survives_the_chown() {
    let t = Scratch::new("owners");
    fs::write(t.join("probe"), "").unwrap();
    if fs::metadata(t.join("probe")).unwrap().uid() != 0 {
        eprintln!("skipped: chown needs root");
        return;
    }
    let mut raw = RawTar::new();
    let mut header = tar::Header::new_gnu();
    header.set_path("suid").unwrap();
    header.set_entry_type(EntryType::Regular);
    header.set_mode(0o4750);
    header.set_uid(1234);
    header.set_gid(5678);
    header.set_size(2);
    header.set_cksum();
    raw.0.append(&header, &b"hi"[..]).unwrap();
    let tar = raw.finish();

    let kept = t.join("kept");
    extract(&tar[..], &kept, true).unwrap();
    let meta = fs::metadata(kept.join("suid")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1234, 5678));
    assert_eq!(meta.mode() & 0o7777, 0o4750);

    let mine = t.join("mine");
    extract(&tar[..], &mine, false).unwrap();
    assert_eq!(fs::metadata(mine.join("suid")).unwrap().uid(), 0);
}
