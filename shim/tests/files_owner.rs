//! `owner=UID:GID` on uploads and pulls (PROTOCOL.md 4.8.3), on the real binary: as root every
//! entry and every directory the upload creates gets the owner (checked with `lstat`, symlinks
//! included) while what was there and what lies outside keep theirs; set-user-ID is dropped; a
//! shim run as an unprivileged user (no `CAP_CHOWN`) is refused a foreign owner before anything is
//! written and allowed its own.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::artifacts::{grant, pull_spec, scratch};
use common::{Shim, error_code, raw};
use protocol::ErrorCode;
use protocol::artifacts::PullState;
use protocol::owner::Owner;

const OWNER: Owner = Owner {
    uid: 1000,
    gid: 1001,
};

/// `(uid, gid)` of `p` itself (a symlink's own).
fn owner_of(p: &Path) -> (u32, u32) {
    let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.uid(), m.gid())
}

/// A tar with a directory entry, a set-user-ID file in it, a file whose parents are not named
/// (created as parents only), a symlink to a file outside, a hard link and a set-group-ID
/// directory; every header says uid/gid 4321.
fn hostile_owners_tar(outside_file: &Path) -> Bytes {
    let mut b = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(4321);
        h.set_gid(4321);
        h.set_mtime(1_000_000_000);
        h.set_size(size);
        h
    };
    let mut h = header(tar::EntryType::Directory, 0o755, 0);
    b.append_data(&mut h, "d/", &[][..]).unwrap();
    let mut h = header(tar::EntryType::Regular, 0o6755, 3);
    b.append_data(&mut h, "d/suid", &b"#!x"[..]).unwrap();
    let mut h = header(tar::EntryType::Regular, 0o644, 2);
    b.append_data(&mut h, "x/y/z.txt", &b"hi"[..]).unwrap();
    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
    b.append_link(&mut h, "l", outside_file).unwrap();
    let mut h = header(tar::EntryType::Link, 0o644, 0);
    b.append_link(&mut h, "hard", "x/y/z.txt").unwrap();
    let mut h = header(tar::EntryType::Directory, 0o2775, 0);
    b.append_data(&mut h, "sg/", &[][..]).unwrap();
    Bytes::from(b.into_inner().unwrap())
}

/// An outside directory with a file, owned by root.
/// Uploads `hostile_owners_tar` into `dir` with the owner `OWNER`.
async fn upload_owned(shim: &Shim, dir: &Path, outside_file: &Path) {
    shim.client
        .files_in_as(
            dir.to_str().unwrap(),
            Some(OWNER),
            client::transport::full_body(hostile_owners_tar(outside_file)),
        )
        .await
        .unwrap();
}

fn outside(root: &Path) -> PathBuf {
    let o = root.join("outside");
    fs::create_dir(&o).unwrap();
    fs::write(o.join("secret"), b"secret").unwrap();
    o.join("secret")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_with_an_owner_gives_it_to_everything_it_creates() {
    let shim = Shim::start();
    let root = scratch("owner-new");
    let secret = outside(&root);
    let before = owner_of(&secret);
    // DIR and one parent are missing: the upload creates both.
    let dir = root.join("made/dir");
    upload_owned(&shim, &dir, &secret).await;
    let want = (OWNER.uid, OWNER.gid);
    for rel in [
        "",
        "d",
        "d/suid",
        "x",
        "x/y",
        "x/y/z.txt",
        "l",
        "hard",
        "sg",
    ] {
        assert_eq!(owner_of(&dir.join(rel)), want, "{rel:?}");
    }
    assert_eq!(
        owner_of(&root.join("made")),
        want,
        "a missing parent of DIR"
    );
    assert_eq!(
        owner_of(&root),
        (0, 0),
        "an existing ancestor keeps its owner"
    );
    assert_eq!(
        owner_of(&secret),
        before,
        "a symlink's target is never chowned"
    );
    let mode = |rel: &str| fs::symlink_metadata(dir.join(rel)).unwrap().mode() & 0o7777;
    assert_eq!(
        mode("d/suid"),
        0o755,
        "set-user-ID and set-group-ID dropped"
    );
    assert_eq!(mode("sg"), 0o2775, "a directory keeps its set-group-ID");
    assert_eq!(mode("x/y/z.txt"), 0o644);
    assert_eq!(fs::read_link(dir.join("l")).unwrap(), secret);
    let _ = fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_directory_keeps_its_owner_and_the_tar_owners_without_owner() {
    let shim = Shim::start();
    let root = scratch("owner-existing");
    let secret = outside(&root);
    let dir = root.join("dir");
    fs::create_dir_all(dir.join("x")).unwrap();
    fs::write(dir.join("x/kept"), b"k").unwrap();
    upload_owned(&shim, &dir, &secret).await;
    let want = (OWNER.uid, OWNER.gid);
    assert_eq!(owner_of(&dir), (0, 0), "DIR existed");
    assert_eq!(owner_of(&dir.join("x")), (0, 0), "merged into, not created");
    assert_eq!(owner_of(&dir.join("x/kept")), (0, 0), "not in the stream");
    for rel in ["d", "d/suid", "x/y", "x/y/z.txt", "l", "sg"] {
        assert_eq!(owner_of(&dir.join(rel)), want, "{rel:?}");
    }
    // Without owner, a root shim keeps the tar's owners and modes.
    let plain = root.join("plain");
    shim.client
        .files_in_bytes(plain.to_str().unwrap(), hostile_owners_tar(&secret))
        .await
        .unwrap();
    assert_eq!(owner_of(&plain.join("d/suid")), (4321, 4321));
    let suid = fs::symlink_metadata(plain.join("d/suid")).unwrap().mode() & 0o7777;
    assert_eq!(suid, 0o6755);
    let _ = fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_owner_is_a_bad_request_and_writes_nothing() {
    let shim = Shim::start();
    let root = scratch("owner-bad");
    let dir = root.join("dir");
    let tar = hostile_owners_tar(Path::new("/nowhere"));
    for owner in [
        "1000",
        "a:b",
        "-1:0",
        "4294967295:0",
        "1000:1000:1",
        "1000%3A",
    ] {
        let q = format!("/v1/files?path={}&owner={owner}", dir.display());
        let (status, _, body) = raw(&shim.addr, "PUT", &q, Some(&shim.token), &tar).await;
        assert_eq!(status, 400, "{owner}");
        assert_eq!(error_code(&body), "bad_request", "{owner}");
    }
    let mut spec = pull_spec("http://127.0.0.1:1", &root, "t", &dir);
    spec.owner = Some(Owner {
        uid: u32::MAX,
        gid: 0,
    });
    let err = shim.client.pull("p", &spec, None).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{err}");
    assert!(!dir.exists());
    let _ = fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_with_an_owner_gives_it_to_the_pulled_tree() {
    let src_shim = Shim::start();
    let dst_shim = Shim::start();
    let src = scratch("owner-pull-src");
    fs::create_dir_all(src.join("a/b")).unwrap();
    fs::write(src.join("a/b/f"), b"f").unwrap();
    fs::write(src.join("s"), b"s").unwrap();
    fs::set_permissions(src.join("s"), fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::symlink("a/b/f", src.join("link")).unwrap();
    src_shim
        .client
        .grant(&grant(&src, "owner-tok", 60, None))
        .await
        .unwrap();
    let dst = scratch("owner-pull-dst").join("in");
    let mut spec = pull_spec(&src_shim.url(), &src, "owner-tok", &dst);
    spec.owner = Some(OWNER);
    dst_shim.client.pull("p", &spec, None).await.unwrap();
    let done = dst_shim.client.pull_status("p", Some(60)).await.unwrap();
    assert_eq!(done.state, PullState::Done, "{done:?}");
    for rel in ["", "a", "a/b", "a/b/f", "s", "link"] {
        assert_eq!(owner_of(&dst.join(rel)), (OWNER.uid, OWNER.gid), "{rel:?}");
    }
    let mode = fs::symlink_metadata(dst.join("s")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    let _ = fs::remove_dir_all(&src);
    let _ = fs::remove_dir_all(dst.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_without_cap_chown_may_give_only_its_own_ids() {
    let shim = Shim::start_as_nobody();
    let root = scratch("owner-unpriv");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
    let dir = root.join("dir");
    let tar = || client::transport::full_body(hostile_owners_tar(Path::new("/nowhere")));
    for foreign in [
        OWNER,
        Owner { uid: 65534, gid: 0 },
        Owner { uid: 0, gid: 65534 },
    ] {
        let err = shim
            .client
            .files_in_as(dir.to_str().unwrap(), Some(foreign), tar())
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Some(ErrorCode::OwnerNotPermitted),
            "{foreign}: {err}"
        );
        assert!(!dir.exists(), "{foreign}: nothing written");
        let mut spec = pull_spec("http://127.0.0.1:1", &root, "t", &dir);
        spec.owner = Some(foreign);
        let err = shim.client.pull("p", &spec, None).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::OwnerNotPermitted), "{err}");
    }
    let own = Owner {
        uid: 65534,
        gid: 65534,
    };
    shim.client
        .files_in_as(dir.to_str().unwrap(), Some(own), tar())
        .await
        .unwrap();
    for rel in ["", "d", "d/suid", "x/y/z.txt", "l"] {
        assert_eq!(owner_of(&dir.join(rel)), (65534, 65534), "{rel:?}");
    }
    let _ = fs::remove_dir_all(&root);
}
