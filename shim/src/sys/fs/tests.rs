//! One test per wrapper, on real files in a scratch directory under the system temp dir.
#![allow(
    clippy::unwrap_used,
    reason = "a test should fail loudly where its setup breaks"
)]

use super::*;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};

struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("stepshim-sysfs-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("dir/sub")).unwrap();
        std::fs::create_dir_all(p.join("outside")).unwrap();
        symlink(p.join("outside"), p.join("dir/link")).unwrap();
        std::fs::write(p.join("dir/file"), "data").unwrap();
        Scratch(p)
    }

    fn dir(&self) -> OwnedFd {
        File::open(self.0.join("dir")).unwrap().into()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn errno(r: io::Result<impl std::fmt::Debug>) -> i32 {
    r.unwrap_err().raw_os_error().unwrap()
}

#[test]
fn open_dir_at_refuses_symlinks_and_files() {
    let s = Scratch::new("open-at");
    let d = s.dir();
    let root = open_root().unwrap();
    assert!(open_dir_at(root.as_fd(), os("tmp")).is_ok() || Path::new("/tmp").is_symlink());
    open_dir_at(d.as_fd(), os("sub")).unwrap();
    assert_eq!(errno(open_dir_at(d.as_fd(), os("link"))), libc::ENOTDIR);
    assert_eq!(errno(open_dir_at(d.as_fd(), os("file"))), libc::ENOTDIR);
    assert_eq!(
        open_dir_at(d.as_fd(), os("a\0b")).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn open_dir_beneath_stays_beneath_without_symlinks() {
    let s = Scratch::new("beneath");
    let d = s.dir();
    match open_dir_beneath(d.as_fd(), os("sub")) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            eprintln!("skipped: no openat2 on this kernel");
            return;
        }
        r => {
            r.unwrap();
        }
    }
    assert_eq!(
        errno(open_dir_beneath(d.as_fd(), os("link"))),
        libc::ENOTDIR
    );
    assert_eq!(
        errno(open_dir_beneath(d.as_fd(), os("link/x"))),
        libc::ELOOP
    );
    assert_eq!(
        errno(open_dir_beneath(d.as_fd(), os("../outside"))),
        libc::EXDEV
    );
    assert_eq!(errno(open_dir_beneath(d.as_fd(), os("/tmp"))), libc::EXDEV);
    assert_eq!(
        errno(open_dir_beneath(d.as_fd(), os("sub/missing"))),
        libc::ENOENT
    );
}

#[test]
fn mkdir_create_symlink_link_and_unlink_work_in_place() {
    let s = Scratch::new("create");
    let d = s.dir();
    mkdir_at(d.as_fd(), os("new"), 0o700).unwrap();
    assert_eq!(errno(mkdir_at(d.as_fd(), os("new"), 0o700)), libc::EEXIST);
    let mut f = create_file_at(d.as_fd(), os("f"), 0o600).unwrap();
    io::Write::write_all(&mut f, b"x").unwrap();
    // O_EXCL|O_NOFOLLOW: an existing symlink is neither followed nor reused.
    assert_eq!(
        errno(create_file_at(d.as_fd(), os("link"), 0o600)),
        libc::EEXIST
    );
    assert!(
        std::fs::read_dir(s.0.join("outside"))
            .unwrap()
            .next()
            .is_none()
    );
    symlink_at(os("../outside"), d.as_fd(), os("sl")).unwrap();
    assert_eq!(
        std::fs::read_link(s.0.join("dir/sl")).unwrap(),
        Path::new("../outside")
    );
    link_at(d.as_fd(), os("f"), d.as_fd(), os("h")).unwrap();
    assert_eq!(std::fs::metadata(s.0.join("dir/f")).unwrap().nlink(), 2);
    // A link to a symlink links the symlink itself.
    link_at(d.as_fd(), os("link"), d.as_fd(), os("h2")).unwrap();
    assert!(
        std::fs::symlink_metadata(s.0.join("dir/h2"))
            .unwrap()
            .is_symlink()
    );
    unlink_at(d.as_fd(), os("h2"), false).unwrap();
    assert_eq!(errno(unlink_at(d.as_fd(), os("new"), false)), libc::EISDIR);
    unlink_at(d.as_fd(), os("new"), true).unwrap();
    assert!(!s.0.join("dir/new").exists());
}

#[test]
fn rename_at_replaces_refuses_or_exchanges() {
    let s = Scratch::new("rename");
    let d = s.dir();
    std::fs::write(s.0.join("dir/a"), "a").unwrap();
    std::fs::write(s.0.join("dir/b"), "b").unwrap();
    assert_eq!(
        errno(rename_at(
            d.as_fd(),
            os("a"),
            d.as_fd(),
            os("b"),
            Rename::NoReplace
        )),
        libc::EEXIST
    );
    rename_at(d.as_fd(), os("a"), d.as_fd(), os("sub"), Rename::Exchange).unwrap();
    assert!(s.0.join("dir/a").is_dir());
    assert_eq!(std::fs::read_to_string(s.0.join("dir/sub")).unwrap(), "a");
    rename_at(d.as_fd(), os("sub"), d.as_fd(), os("b"), Rename::Replace).unwrap();
    assert_eq!(std::fs::read_to_string(s.0.join("dir/b")).unwrap(), "a");
    // The symlink moves; its target does not.
    rename_at(
        d.as_fd(),
        os("link"),
        d.as_fd(),
        os("moved"),
        Rename::NoReplace,
    )
    .unwrap();
    assert!(s.0.join("outside").is_dir());
    assert!(
        std::fs::symlink_metadata(s.0.join("dir/moved"))
            .unwrap()
            .is_symlink()
    );
}

#[test]
fn stat_at_does_not_follow_and_lchown_at_changes_the_link_itself() {
    let s = Scratch::new("stat");
    let d = s.dir();
    assert_eq!(stat_at(d.as_fd(), os("link")).unwrap().kind, Kind::Symlink);
    assert_eq!(stat_at(d.as_fd(), os("sub")).unwrap().kind, Kind::Dir);
    let f = stat_at(d.as_fd(), os("file")).unwrap();
    assert_eq!(f.kind, Kind::File);
    assert_eq!(
        f.mode,
        std::fs::metadata(s.0.join("dir/file")).unwrap().mode() & 0o7777
    );
    assert_eq!(errno(stat_at(d.as_fd(), os("missing"))), libc::ENOENT);
    let me = (f.uid, f.gid);
    lchown_at(d.as_fd(), os("link"), me.0, me.1).unwrap();
    if me.0 == 0 {
        lchown_at(d.as_fd(), os("link"), 4321, 4321).unwrap();
        assert_eq!(stat_at(d.as_fd(), os("link")).unwrap().uid, 4321);
        let outside = std::fs::metadata(s.0.join("outside")).unwrap();
        assert_eq!(outside.uid(), 0, "the symlink's target keeps its owner");
    }
}

#[test]
fn stat_fd_and_read_link_at_read_through_descriptors() {
    let s = Scratch::new("statfd");
    let d = s.dir();
    let dir = stat_fd(d.as_fd()).unwrap();
    let by_path = std::fs::metadata(s.0.join("dir")).unwrap();
    assert_eq!(
        (dir.kind, dir.ino, dir.dev),
        (Kind::Dir, by_path.ino(), by_path.dev())
    );
    assert_eq!(dir.ctime, (by_path.ctime(), by_path.ctime_nsec()));
    let f = stat_at(d.as_fd(), os("file")).unwrap();
    let file = open_file_at(d.as_fd(), os("file")).unwrap();
    let opened = stat_fd(file.as_fd()).unwrap();
    assert_eq!((opened.ino, opened.size, opened.nlink), (f.ino, f.size, 1));
    let target = std::fs::read_link(s.0.join("dir/link")).unwrap();
    assert_eq!(
        read_link_at(d.as_fd(), os("link")).unwrap(),
        target.as_os_str()
    );
    assert_eq!(errno(read_link_at(d.as_fd(), os("file"))), libc::EINVAL);
    assert_eq!(errno(open_file_at(d.as_fd(), os("link"))), libc::ELOOP);
}

#[test]
fn set_mtime_at_changes_the_link_itself() {
    let s = Scratch::new("mtime");
    let d = s.dir();
    let target = std::fs::metadata(s.0.join("outside")).unwrap().mtime();
    set_mtime_at(d.as_fd(), os("link"), 1_000_000_000).unwrap();
    let link = std::fs::symlink_metadata(s.0.join("dir/link")).unwrap();
    assert_eq!(link.mtime(), 1_000_000_000);
    assert_eq!(
        std::fs::metadata(s.0.join("outside")).unwrap().mtime(),
        target
    );
    assert_eq!(
        errno(set_mtime_at(d.as_fd(), os("missing"), 0)),
        libc::ENOENT
    );
}

#[test]
fn dir_names_lists_without_dots_and_random_u64_varies() {
    let s = Scratch::new("names");
    let d = s.dir();
    let mut names = dir_names(d.as_fd()).unwrap();
    names.sort();
    assert_eq!(names, ["file", "link", "sub"]);
    assert_eq!(
        dir_names(d.as_fd()).unwrap().len(),
        3,
        "the fd's offset is untouched"
    );
    assert_ne!(random_u64().unwrap(), random_u64().unwrap());
}
